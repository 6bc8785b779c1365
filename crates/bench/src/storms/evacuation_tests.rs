use super::*;

#[test]
fn every_service_of_a_hundred_has_thirty_endpoints_in_the_drained_zone() {
    let services = services_of(100_000);
    assert_eq!(services, 1_000);
    let mut zone_a = vec![0; services];
    let mut per_service = vec![0; services];
    for n in 0..100_000 {
        let (service, zone) = placement(n, services);
        per_service[service] += 1;
        zone_a[service] += usize::from(zone == "zone-a");
    }
    assert!(per_service.iter().all(|&n| n == 100));
    assert!(zone_a.iter().all(|&n| n == 30), "30% of each service");
    assert_eq!(services_of(5_050), 51, "a partial service still counts");
}

#[test]
fn each_watcher_of_a_drains_service_delivers_it_once_and_silence_is_missed() {
    let t = now();
    let at = |ms| t + Duration::from_millis(ms);
    let drains = [
        Drained {
            service: 0,
            sent: at(0),
            revision: 10,
        },
        Drained {
            service: 0,
            sent: at(1),
            revision: 11,
        },
        Drained {
            service: 1,
            sent: at(2),
            revision: 12,
        },
    ];
    // Watchers 0 and 2 watch service 0 (the second got 10 and 11 coalesced into 11),
    // watcher 1 watches service 1 and never heard of 12.
    let receipts = vec![vec![(10, at(4)), (11, at(5))], vec![], vec![(11, at(9))]];
    let (latencies, missed, last) = deliveries(&drains, &receipts, |w| w % 2, 2);
    assert_eq!((latencies.count(), missed), (4, 1));
    assert_eq!(latencies.max(), Some(Duration::from_millis(9)));
    assert_eq!(last, Some(at(9)));
}
