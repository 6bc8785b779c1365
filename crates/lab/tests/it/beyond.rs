//! Muster's own mechanisms against the reference: watches, client ejection, drain and
//! self-preservation.

use crate::support::{relative_error, setup};

#[test]
fn a_drain_before_stop_fails_no_request() {
    // The 5 s grace outlasts the 3 s cache: every caller drops the draining instances from
    // its rotation before they stop.
    let drain = setup("drain");
    assert_eq!(drain.failed, 0);
    assert_eq!(drain.stale_window_s, 0.0);
    assert_eq!(drain.expected.failed, Some(0.0));
}

#[test]
fn a_watch_keeps_the_stale_window_within_ttl_plus_one_tick_plus_propagation() {
    let watch = setup("watch");
    let bound = 2.0 + 0.01 + 0.02;
    assert_eq!(watch.expected.stale_window_bound_s, Some(bound));
    assert!(watch.stale_window_s <= bound, "{}", watch.stale_window_s);
    assert!(relative_error(watch.failed as f64, watch.expected.failed.unwrap()) <= 0.05);
    // Against the same TTL with a 3 s cache: fewer failures, a shorter window, no lookups.
    let cached = setup("ttl-2s");
    assert!(watch.failed < cached.failed && watch.stale_window_s < cached.stale_window_s);
    assert_eq!(watch.lookups_per_s, 0.0);
}

#[test]
fn ejection_on_first_failure_fails_each_pair_at_most_once() {
    // 50 dead × 20 callers, exposed for less than the 30 s ejection: at most 1,000 failures,
    // against 2,000-odd without ejection; the ejections survive every cache refresh.
    let eject = setup("eject");
    assert_eq!(eject.expected.failed_at_most, Some(1_000.0));
    assert!(eject.failed <= 1_000 && eject.failed > 0, "{}", eject.failed);
    assert!(eject.failed * 2 < setup("ttl-10s").failed);
    assert_eq!(eject.ejections, eject.failed, "every failure ejects, none is repeated");
    assert!(eject.stale_window_s <= eject.expected.stale_window_bound_s.unwrap());
}

#[test]
fn self_preservation_keeps_a_silent_fleet_in_routing_at_the_cost_of_the_dead() {
    // 200 live instances go silent with the 50 that crash. Without the brake all 250 leave
    // routing; with it at most 30% of 500 leave within the minute, and the dead it holds
    // keep failing requests until the window slides.
    let silence = setup("silence");
    let kept = setup("preservation");
    assert_eq!(silence.evicted_alive, 200);
    assert_eq!(silence.min_registered, 250);
    assert!(kept.min_registered >= 350, "{}", kept.min_registered);
    assert!(kept.evicted_alive < silence.evicted_alive);
    assert!(kept.protection_s > 0.0);
    assert!(kept.failed > silence.failed);
    // Without the brake, the silence changes nothing for the dead: the crash's expectation holds.
    assert!(relative_error(silence.failed as f64, silence.expected.failed.unwrap()) <= 0.05);
}
