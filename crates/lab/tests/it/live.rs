//! The live lab at CI scale: a real server, 30 instances on real sockets, 3 killed; the
//! killed instances' removal reaches every caller within the run and its stale window ends
//! before that (an order, not a timing: the window's figure against TTL + the keeper's tick +
//! the measured propagation + `live::MARGIN_MS` is reported, and checked by `.ci/run`, not
//! here). Through `muster proxy` (SPEC D3) a crash stays within
//! `expect::live_proxy_crash_at_most` and a drain fails nothing.

use muster_lab::live::{KEEPER_TICK_MS, LiveScenario, MARGIN_MS};
use muster_lab::{Plan, Scenario, Stop, report};

/// The CI scale: 30 instances, 3 stop at 2 s of 6 s, 4 callers per setup × 50 req/s, TTL 1 s.
fn ci_scale(stop: Stop) -> LiveScenario {
    LiveScenario {
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
        stop,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_stale_window_ends_before_the_removal_reaches_every_caller() {
    let live = ci_scale(Stop::Crash);
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
    // The stale window is proved by order, not timed (its figure against `bound` is what the
    // lab reports): the expiries reach every caller's view within the run, and no request
    // fails after that (SPEC X2: the window ends when the removal reaches the callers).
    let removed_seen_s = setup.live.as_ref().unwrap().removed_seen_s;
    let removed_seen_s = removed_seen_s.expect("the killed instances' removal reached every caller within the run");
    assert!(setup.stale_window_s > 0.0, "a failure after the crash");
    assert!(
        setup.stale_window_s <= removed_seen_s + 1e-9,
        "a request failed after every view had dropped the dead: the last failure {} s after \
         the crash, the removal seen {removed_seen_s} s after it",
        setup.stale_window_s
    );
    assert!(
        setup.failed_per_window[..2].iter().all(|&w| w == 0),
        "failures before the crash"
    );
    assert!(setup.heartbeats_per_s > 0.0);
    assert_eq!(setup.live.as_ref().unwrap().via, "client-library");

    // The same crash through the proxy: connect failures are retried on live instances.
    let proxied = &report.setups[1];
    assert!(proxied.name.starts_with("muster-proxy"), "{}", proxied.name);
    let figures = proxied.live.as_ref().unwrap();
    assert_eq!((figures.via, figures.stop), ("muster-proxy", "crash"));
    assert!(proxied.requests > 0);
    // 3 dead of 30 get about 20 connects a second through the proxy until they are ejected
    // or expire: the proxy retried, and the failures stay within the stated bound (4 callers
    // in flight + the all-attempts-dead share, rounded up).
    assert!(figures.retries > 0, "the proxy never retried a refused connect");
    let at_most = proxied.expected.failed_at_most.unwrap();
    assert!(
        (proxied.failed as f64) <= at_most,
        "{} failed through the proxy, bound {at_most}",
        proxied.failed
    );
    assert!(proxied.failed < setup.failed, "the proxy absorbed the crash");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_before_the_stop_fails_no_request_through_the_proxy_or_the_library() {
    let live = ci_scale(Stop::Drain { grace_ms: 300 });
    live.validate().unwrap();
    let report = report(Plan::Live(live)).await.unwrap();
    let [library, proxied] = report.setups.as_slice() else {
        panic!("two live setups")
    };
    let figures = proxied.live.as_ref().unwrap();
    assert_eq!((figures.via, figures.stop), ("muster-proxy", "drain"));
    assert_eq!(figures.drain_grace_s, Some(0.3));
    assert!(figures.drain_seen_s.is_some());
    assert!(proxied.requests > 0 && library.requests > 0);
    assert_eq!(proxied.expected.failed, Some(0.0));
    assert_eq!(proxied.failed, 0, "a drained instance got a request through the proxy");
    assert_eq!(proxied.stale_window_s, 0.0);
    assert_eq!(library.failed, 0, "a drained instance got a library request");
}

#[test]
fn a_drain_grace_that_outlasts_the_run_is_refused() {
    let live = ci_scale(Stop::Drain { grace_ms: 4_000 });
    let error = live.validate().unwrap_err();
    assert!(error.to_string().contains("drain"), "{error}");
}
