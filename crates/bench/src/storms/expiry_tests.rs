use super::*;

fn sample(t: Instant, sent_ms: u64, latency_ms: u64, revision: Option<u64>) -> Sample {
    Sample {
        sent: t + Duration::from_millis(sent_ms),
        latency: Duration::from_millis(latency_ms),
        revision,
    }
}

#[test]
fn unrelated_writes_are_split_by_when_they_were_sent() {
    let t = now();
    let samples = [
        sample(t, 0, 4, Some(1)),
        sample(t, 5, 4, None),
        sample(t, 10, 30, Some(3)),
        sample(t, 40, 5, Some(4)),
        sample(t, 99, 1, Some(5)),
    ];
    let (before, during) = phases(&samples, t + Duration::from_millis(10), t + Duration::from_millis(50));
    assert_eq!((before.writes, before.errors, before.latencies.count()), (2, 1, 1));
    assert_eq!(
        (during.writes, during.errors),
        (2, 0),
        "the write after the storm is in neither"
    );
    assert_eq!(during.latencies.max(), Some(Duration::from_millis(30)));
}

#[test]
fn the_expiry_revisions_exclude_the_unrelated_writes_in_between() {
    let t = now();
    let samples = [
        sample(t, 0, 1, Some(100)),
        sample(t, 1, 1, Some(101)),
        sample(t, 2, 1, Some(105)),
        sample(t, 3, 1, Some(110)),
        sample(t, 4, 1, None),
    ];
    // Between 100 (exclusive) and 108: 101 and 105 were unrelated, so 6 were the expiry's.
    assert_eq!(unrelated_in(&samples, 100, 108), 2);
    assert_eq!(108 - 100 - unrelated_in(&samples, 100, 108), 6);
}
