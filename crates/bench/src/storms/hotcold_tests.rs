use super::*;

#[test]
fn a_cold_change_is_delivered_by_its_revision_or_missed() {
    let t = now();
    let at = |ms| t + Duration::from_millis(ms);
    let change = |watcher, sent, replied, revision| Change {
        watcher,
        sent: at(sent),
        replied: at(replied),
        revision,
    };
    let changes = [change(0, 0, 4, 10), change(1, 100, 110, 20), change(2, 200, 203, 30)];
    // Watcher 0 got its update before the reply; watcher 1 two ms after it; watcher 2
    // only an older revision.
    let receipts = vec![vec![(10, at(3))], vec![(20, at(112))], vec![(29, at(201))]];
    let phase = phase_figures(&changes, 1, &receipts, Some(5));
    assert_eq!(
        (phase.changes, phase.missed),
        (3, 2),
        "one failed write, one silent watcher"
    );
    let delivery = phase.delivery.unwrap();
    assert_eq!(delivery.max_ms, 12.0);
    assert_eq!(phase.after_reply.unwrap().max_ms, 2.0);
    assert_eq!(phase.after_reply.unwrap().p50_ms, 0.0, "before the reply counts as 0");
    assert_eq!(phase.commit.unwrap().max_ms, 10.0);
}

#[test]
fn the_ratio_needs_both_phases() {
    let of = |ms: u64| {
        let mut h = Histogram::new();
        h.record(Duration::from_millis(ms));
        LatencySummary::of(&h)
    };
    assert_eq!(p99_ratio(of(20), of(10)), Some(2.0));
    assert_eq!(p99_ratio(of(20), None), None);
}
