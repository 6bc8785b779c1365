//! The live lab at CI scale: a real server, 30 instances on real sockets, 3 killed; it must
//! finish well under a minute, and its stale window stays within TTL + the keeper's tick +
//! the measured propagation + the stated margin (`live::MARGIN_MS`).

use muster_lab::live::{KEEPER_TICK_MS, LiveScenario, MARGIN_MS};
use muster_lab::{Plan, Scenario, report};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_stale_window_stays_within_ttl_plus_propagation_plus_margin() {
    let live = LiveScenario {
        scenario: Scenario {
            instances: 30,
            killed: 3,
            crash_at_ms: 2_000,
            duration_ms: 6_000,
            tick_ms: 1,
            callers: 4,
            rate_per_caller: 50,
            window_ms: 1_000,
            ..Scenario::reference()
        },
        ttl_ms: 1_000,
    };
    live.validate().unwrap();
    let report = report(Plan::Live(live)).await.unwrap();
    assert_eq!(report.mode, "live");
    let setup = &report.setups[0];
    let bound = setup.expected.stale_window_bound_s.unwrap();
    let propagation_s = setup.expected.mean_cache_wait_s.unwrap();
    assert!(
        (bound - (1.0 + (KEEPER_TICK_MS + MARGIN_MS) as f64 / 1_000.0 + propagation_s)).abs() < 1e-9,
        "{bound}"
    );
    // 3 dead of 30, 200 requests/s: about 20 failed requests per second of exposure.
    assert!(setup.failed > 0, "no request reached a dead instance");
    assert!(
        setup.stale_window_s > 0.0 && setup.stale_window_s <= bound,
        "{} > {bound}",
        setup.stale_window_s
    );
    assert!(
        setup.failed_per_window[..2].iter().all(|&w| w == 0),
        "failures before the crash"
    );
    assert!(setup.heartbeats_per_s > 0.0);
}
