use super::*;
use crate::balance::fixtures::{Fixture, ready};
use crate::balance::{ConfigError, Fraction};

/// Ten seconds base, 35 s cap, three failures, 30% cap: small numbers that show each rule.
fn detector() -> OutlierDetector {
    OutlierDetector::new(EjectionConfig {
        consecutive_failures: 3,
        base_ejection_ms: 10_000,
        max_ejection_ms: 35_000,
        max_ejected: Fraction::percent(30),
    })
    .unwrap()
}

/// Fails `endpoint` `times` times at `now_ms` and returns the last outcome.
fn fail(detector: &mut OutlierDetector, endpoint: &Member, times: u32, now_ms: u64) -> FailureOutcome {
    (0..times)
        .map(|_| detector.record_failure(endpoint, 10, now_ms))
        .last()
        .unwrap()
}

#[test]
fn n_failures_in_a_row_eject_for_the_base_time_and_then_it_returns() {
    let mut detector = detector();
    let endpoint = Fixture::ready(0).build();
    assert_eq!(
        fail(&mut detector, &endpoint, 2, 1_000),
        FailureOutcome::Counted {
            consecutive_failures: 2
        }
    );
    assert!(!detector.is_ejected(&endpoint, 1_000));
    let ejection = Ejection {
        until_ms: 12_000,
        times_ejected: 1,
    };
    assert_eq!(
        fail(&mut detector, &endpoint, 1, 2_000),
        FailureOutcome::Ejected(ejection)
    );
    assert!(detector.is_ejected(&endpoint, 11_999));
    assert_eq!(detector.next_return_ms(11_999), Some(12_000));
    assert!(!detector.is_ejected(&endpoint, 12_000));
    assert_eq!(detector.next_return_ms(12_000), None);
}

#[test]
fn a_success_breaks_the_run_of_failures() {
    let mut detector = detector();
    let endpoint = Fixture::ready(0).build();
    fail(&mut detector, &endpoint, 2, 0);
    detector.record_success(&endpoint, 0);
    assert_eq!(
        fail(&mut detector, &endpoint, 2, 0),
        FailureOutcome::Counted {
            consecutive_failures: 2
        }
    );
    assert!(!detector.is_ejected(&endpoint, 0));
}

#[test]
fn repeated_ejections_last_longer_up_to_the_cap() {
    let mut detector = detector();
    let endpoint = Fixture::ready(0).build();
    let mut now = 0;
    let mut durations = Vec::new();
    for _ in 0..5 {
        let FailureOutcome::Ejected(ejection) = fail(&mut detector, &endpoint, 3, now) else {
            panic!("not ejected at {now}");
        };
        durations.push(ejection.until_ms - now);
        // It fails again the moment it returns: no time in service, no decay.
        now = ejection.until_ms;
    }
    assert_eq!(durations, [10_000, 20_000, 30_000, 35_000, 35_000]);
}

#[test]
fn time_back_in_service_shrinks_the_next_ejection() {
    let mut detector = detector();
    let endpoint = Fixture::ready(0).build();
    fail(&mut detector, &endpoint, 3, 0); // 10 s, back at 10 s
    fail(&mut detector, &endpoint, 3, 10_000); // 20 s, back at 30 s
    // 25 s in service (two base periods) take the multiplier from 2 back to 0: base again.
    let FailureOutcome::Ejected(ejection) = fail(&mut detector, &endpoint, 3, 55_000) else {
        panic!("not ejected");
    };
    assert_eq!(
        ejection,
        Ejection {
            until_ms: 65_000,
            times_ejected: 1
        }
    );
}

#[test]
fn at_most_the_configured_fraction_is_ejected_at_once() {
    let mut detector = detector();
    let endpoints = ready(10);
    for endpoint in &endpoints[..3] {
        assert!(matches!(
            fail(&mut detector, endpoint, 3, 0),
            FailureOutcome::Ejected(_)
        ));
    }
    // 30% of 10 known endpoints: the fourth stays in, however often it fails.
    assert_eq!(
        fail(&mut detector, &endpoints[3], 5, 1_000),
        FailureOutcome::CapReached {
            consecutive_failures: 5
        }
    );
    assert!(!detector.is_ejected(&endpoints[3], 1_000));
    assert_eq!(detector.ejected_count(1_000), 3);
    // Once the first three return, its next failure ejects it.
    assert!(matches!(
        fail(&mut detector, &endpoints[3], 1, 10_000),
        FailureOutcome::Ejected(_)
    ));
    // The limit rounds down: 30% of 3 known endpoints is none.
    let mut small = self::detector();
    assert_eq!(
        (0..3).map(|_| small.record_failure(&endpoints[0], 3, 0)).last(),
        Some(FailureOutcome::CapReached {
            consecutive_failures: 3
        })
    );
}

#[test]
fn failures_while_ejected_do_not_extend_the_ejection() {
    let mut detector = detector();
    let endpoint = Fixture::ready(0).build();
    fail(&mut detector, &endpoint, 3, 0);
    let late = fail(&mut detector, &endpoint, 4, 5_000);
    assert_eq!(
        late,
        FailureOutcome::AlreadyEjected(Ejection {
            until_ms: 10_000,
            times_ejected: 1
        })
    );
    assert!(!detector.is_ejected(&endpoint, 10_000));
}

#[test]
fn a_new_incarnation_starts_clean_and_late_reports_about_the_old_one_are_ignored() {
    let mut detector = detector();
    let old = Fixture::ready(0).incarnation(1).build();
    let new = Fixture::ready(0).incarnation(2).build();
    fail(&mut detector, &old, 3, 0);
    assert!(detector.is_ejected(&old, 1));
    assert!(
        !detector.is_ejected(&new, 1),
        "the restarted process is not the one that failed"
    );
    assert_eq!(
        fail(&mut detector, &new, 1, 2),
        FailureOutcome::Counted {
            consecutive_failures: 1
        }
    );
    assert_eq!(detector.record_failure(&old, 10, 3), FailureOutcome::Stale);
    assert_eq!(
        fail(&mut detector, &new, 1, 4),
        FailureOutcome::Counted {
            consecutive_failures: 2
        }
    );
}

#[test]
fn an_ejection_survives_view_refreshes_until_it_times_out() {
    let mut detector = detector();
    let endpoints = ready(3);
    fail(&mut detector, &endpoints[0], 3, 0); // ejected until 10 s
    fail(&mut detector, &endpoints[1], 1, 0); // a counter only
    // A refresh where both left the view: the ejection stays, the bare counter goes.
    detector.forget_departed(&endpoints[2..], 1_000);
    assert_eq!(detector.tracked(), 1);
    // The endpoint comes back in the next refresh: still ejected, same deadline.
    detector.forget_departed(&endpoints, 2_000);
    assert!(detector.is_ejected(&endpoints[0], 9_999));
    // After it times out, a refresh without it forgets it.
    detector.forget_departed(&endpoints[1..], 10_000);
    assert_eq!(detector.tracked(), 0);
}

#[test]
fn settings_that_cannot_work_are_refused_with_a_code() {
    let base = EjectionConfig::default();
    let cases = [
        (
            EjectionConfig {
                consecutive_failures: 0,
                ..base
            },
            "zero_not_allowed",
        ),
        (
            EjectionConfig {
                base_ejection_ms: 0,
                ..base
            },
            "zero_not_allowed",
        ),
        (
            EjectionConfig {
                max_ejection_ms: base.base_ejection_ms - 1,
                ..base
            },
            "max_ejection_below_base",
        ),
    ];
    for (config, code) in cases {
        let err: ConfigError = OutlierDetector::new(config).unwrap_err();
        assert_eq!(err.code(), code, "{config:?}");
    }
    assert!(OutlierDetector::new(base).is_ok());
}
