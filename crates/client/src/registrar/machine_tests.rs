//! The registrar's decisions, step by step on a fixed clock and a fixed RNG: each test feeds
//! outcomes and asserts the exact action and status that follow.

use std::time::Duration;

use muster_core::api::{ErrorBody, ErrorDetail, LeaseReply, WriteReply};
use muster_core::{Incarnation, LeaseId, Revision, ServingState};
use rand_core::RngCore;
use tokio::time::Instant;

use crate::http::ClientError;
use crate::registrar::{Action, Outcome, RegistrarMachine};
use crate::{LeaseLossPolicy, RegistrarConfig, RegistrarStatus, ShutdownStage};

/// An RNG that always draws the same number: `1 << 31` is the middle (no jitter), 0 the
/// shortest delay and `u32::MAX` the longest.
struct Fixed(u32);

impl RngCore for Fixed {
    fn next_u32(&mut self) -> u32 {
        self.0
    }
    fn next_u64(&mut self) -> u64 {
        u64::from(self.0) << 32
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        dest.fill(0);
    }
}

const MIDDLE: u32 = 1 << 31;
const TTL: Duration = Duration::from_secs(9);
const GRACE: Duration = Duration::from_secs(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn config() -> RegistrarConfig {
    RegistrarConfig {
        ttl: TTL,
        drain_grace: GRACE,
        ..RegistrarConfig::default()
    }
}

fn machine_with(config: RegistrarConfig, draw: u32, t0: Instant) -> RegistrarMachine<Fixed> {
    RegistrarMachine::new(config, Incarnation(7_000), t0, Fixed(draw))
}

fn api(status: u16, code: &str) -> ClientError {
    ClientError::Api {
        status,
        body: ErrorBody {
            error: ErrorDetail {
                code: code.into(),
                message: format!("{code} (test)"),
            },
        },
    }
}

fn unreachable() -> ClientError {
    ClientError::Connect {
        server: "http://127.0.0.1:1".into(),
        reason: "connection refused".into(),
        source: std::sync::Arc::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
    }
}

fn written(revision: u64, lease: Option<u64>) -> Outcome {
    Outcome::Written(WriteReply {
        revision: Revision(revision),
        lease: lease.map(|id| LeaseReply {
            id: LeaseId(id),
            ttl_ms: 9_000,
            deadline_unix_ms: 0,
        }),
        unchanged: None,
    })
}

fn renewed(lease: u64) -> Outcome {
    Outcome::Renewed(LeaseReply {
        id: LeaseId(lease),
        ttl_ms: 9_000,
        deadline_unix_ms: 0,
    })
}

/// A machine registered at `t0` with lease 3 at revision 10.
fn registered(t0: Instant) -> RegistrarMachine<Fixed> {
    registered_with(config(), t0)
}

/// [`registered`] with another configuration.
fn registered_with(config: RegistrarConfig, t0: Instant) -> RegistrarMachine<Fixed> {
    let mut machine = machine_with(config, MIDDLE, t0);
    assert_eq!(
        machine.poll(t0),
        Some(Action::Register {
            incarnation: Incarnation(7_000),
            serving: ServingState::Starting,
            ttl_ms: 9_000,
        })
    );
    machine.complete(t0 + ms(20), written(10, Some(3)));
    machine
}

#[test]
fn a_registration_is_renewed_at_a_third_of_the_granted_ttl() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    let RegistrarStatus::Healthy(registration) = machine.status() else {
        panic!("{:?}", machine.status());
    };
    assert_eq!((registration.lease, registration.revision), (LeaseId(3), Revision(10)));
    // The deadline counts from when the registration was sent, not answered: it errs early.
    assert_eq!(registration.lease_deadline, t0 + TTL);
    assert_eq!(machine.next_wake(), Some(t0 + ms(20) + ms(3_000)));
    assert_eq!(machine.poll(t0 + ms(3_019)), None);
    assert_eq!(machine.poll(t0 + ms(3_020)), Some(Action::Renew { lease: LeaseId(3) }));
    assert_eq!(machine.poll(t0 + ms(3_021)), None, "one action at a time");
    machine.complete(t0 + ms(3_030), renewed(3));
    let registration = machine.status().registration().cloned().unwrap();
    assert_eq!(registration.lease_deadline, t0 + ms(3_020) + TTL);
    assert_eq!(machine.next_wake(), Some(t0 + ms(6_030)));
}

#[test]
fn renewal_jitter_stays_within_ten_percent_of_a_third() {
    let t0 = Instant::now();
    for (draw, expected) in [(0, 2_700), (u32::MAX, 3_300), (MIDDLE, 3_000)] {
        let mut machine = machine_with(config(), draw, t0);
        machine.poll(t0);
        machine.complete(t0, written(10, Some(3)));
        assert_eq!(machine.next_wake(), Some(t0 + ms(expected)), "draw {draw}");
    }
}

#[test]
fn a_failing_renewal_is_reported_since_its_first_failure_and_retried_at_a_tenth_of_the_ttl() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    let t1 = t0 + ms(3_020);
    assert_eq!(machine.poll(t1), Some(Action::Renew { lease: LeaseId(3) }));
    machine.complete(t1, Outcome::Failed(unreachable()));
    let RegistrarStatus::RenewalFailing {
        since, failed_attempts, ..
    } = machine.status()
    else {
        panic!("{:?}", machine.status());
    };
    assert_eq!((since, failed_attempts), (t1, 1));
    assert_eq!(machine.next_wake(), Some(t1 + ms(900)));

    let t2 = t1 + ms(900);
    assert_eq!(machine.poll(t2), Some(Action::Renew { lease: LeaseId(3) }));
    machine.complete(t2, Outcome::Failed(api(503, "unavailable")));
    let RegistrarStatus::RenewalFailing {
        since,
        failed_attempts,
        error,
        registration,
    } = machine.status()
    else {
        panic!("{:?}", machine.status());
    };
    assert_eq!((since, failed_attempts, error.code().as_str()), (t1, 2, "unavailable"));
    assert_eq!(registration.lease_deadline, t0 + TTL, "the deadline does not move");

    let t3 = t2 + ms(900);
    machine.poll(t3);
    machine.complete(t3, renewed(3));
    assert!(matches!(machine.status(), RegistrarStatus::Healthy(_)));
}

#[test]
fn a_lost_lease_is_reported_and_registered_again_with_the_next_incarnation_in_the_last_asked_state() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    machine.set_serving(ServingState::Ready, "warm");
    assert!(matches!(machine.poll(t0 + ms(30)), Some(Action::SetServing { .. })));
    machine.complete(t0 + ms(40), written(11, None));

    let t1 = t0 + ms(3_040);
    machine.poll(t1);
    machine.complete(t1, Outcome::Failed(api(404, "lease_not_found")));
    let RegistrarStatus::LeaseLost {
        lost,
        at,
        reregistering_as,
        ..
    } = machine.status()
    else {
        panic!("{:?}", machine.status());
    };
    assert_eq!(
        (lost.lease, at, reregistering_as),
        (LeaseId(3), t1, Some(Incarnation(7_001)))
    );
    assert!(!machine.status().is_finished());

    // The tombstone refuses incarnation 7000 again, so 7001 registers, already ready.
    assert_eq!(
        machine.poll(t1),
        Some(Action::Register {
            incarnation: Incarnation(7_001),
            serving: ServingState::Ready,
            ttl_ms: 9_000,
        })
    );
    machine.complete(t1, written(20, Some(4)));
    let RegistrarStatus::Healthy(registration) = machine.status() else {
        panic!("{:?}", machine.status());
    };
    assert_eq!(
        (registration.incarnation, registration.lease, registration.lease_losses),
        (Incarnation(7_001), LeaseId(4), 1)
    );
    assert_eq!(machine.poll(t1 + ms(1)), None, "readiness came with the registration");
}

#[test]
fn a_newer_process_refusing_the_reregistration_means_superseded_and_the_registrar_stops() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    let t1 = t0 + ms(3_020);
    machine.poll(t1);
    machine.complete(t1, Outcome::Failed(api(404, "lease_not_found")));
    machine.poll(t1);
    machine.complete(t1, Outcome::Failed(api(409, "stale_incarnation")));
    assert!(matches!(
        machine.status(),
        RegistrarStatus::Superseded {
            incarnation: Incarnation(7_001),
            ..
        }
    ));
    assert!(machine.is_finished());
    assert_eq!((machine.poll(t1 + TTL), machine.next_wake()), (None, None));
}

#[test]
fn with_the_stop_policy_a_lost_lease_is_final() {
    let t0 = Instant::now();
    let stop = RegistrarConfig {
        lease_loss: LeaseLossPolicy::Stop,
        ..config()
    };
    let mut machine = machine_with(stop, MIDDLE, t0);
    machine.poll(t0);
    machine.complete(t0, written(10, Some(3)));
    machine.poll(t0 + ms(3_000));
    machine.complete(t0 + ms(3_000), Outcome::Failed(api(404, "lease_not_found")));
    let status = machine.status();
    assert!(
        matches!(
            status,
            RegistrarStatus::LeaseLost {
                reregistering_as: None,
                ..
            }
        ),
        "{status:?}"
    );
    assert!(status.is_finished() && machine.is_finished());
}

#[test]
fn a_set_serving_answered_not_found_means_the_record_is_gone_and_it_registers_again() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    machine.set_serving(ServingState::Ready, "");
    machine.poll(t0 + ms(30));
    machine.complete(t0 + ms(40), Outcome::Failed(api(404, "not_found")));
    assert!(matches!(
        machine.poll(t0 + ms(40)),
        Some(Action::Register {
            incarnation: Incarnation(7_001),
            serving: ServingState::Ready,
            ..
        })
    ));
}

#[test]
fn readiness_is_fenced_by_the_incarnation_and_the_latest_request_wins() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    assert_eq!(machine.poll(t0 + ms(30)), None, "nothing asked yet");
    machine.set_serving(ServingState::Ready, "warm");
    machine.set_serving(ServingState::Degraded, "cache cold");
    assert_eq!(
        machine.poll(t0 + ms(30)),
        Some(Action::SetServing {
            incarnation: Incarnation(7_000),
            state: ServingState::Degraded,
            reason: "cache cold".into(),
        })
    );
    machine.complete(t0 + ms(40), written(11, None));
    let registration = machine.status().registration().cloned().unwrap();
    assert_eq!(
        (registration.serving, registration.revision),
        (ServingState::Degraded, Revision(11))
    );
    assert_eq!(machine.poll(t0 + ms(50)), None);
}

#[test]
fn an_owners_drain_holding_against_readiness_is_reported_not_retried_forever() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    machine.set_serving(ServingState::Ready, "");
    machine.poll(t0 + ms(30));
    machine.complete(
        t0 + ms(40),
        Outcome::Written(WriteReply {
            revision: Revision(12),
            lease: None,
            unchanged: Some("drain_held".into()),
        }),
    );
    let registration = machine.status().registration().cloned().unwrap();
    assert_eq!(registration.serving, ServingState::Draining);
    assert_eq!(machine.poll(t0 + ms(50)), None);
}

#[test]
fn a_transient_set_serving_failure_backs_off_and_a_refusal_is_reported_once() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    machine.set_serving(ServingState::Ready, "");
    machine.poll(t0 + ms(30));
    machine.complete(t0 + ms(30), Outcome::Failed(unreachable()));
    assert_eq!(machine.poll(t0 + ms(229)), None);
    assert_eq!(machine.next_wake(), Some(t0 + ms(230)));
    assert!(matches!(machine.poll(t0 + ms(230)), Some(Action::SetServing { .. })));
    machine.complete(t0 + ms(230), Outcome::Failed(api(422, "invalid_field")));
    let registration = machine.status().registration().cloned().unwrap();
    assert_eq!(
        registration.serving_error.map(|e| e.code().to_string()),
        Some("invalid_field".into())
    );
    assert_eq!(machine.poll(t0 + ms(240)), None);
}

#[test]
fn shutdown_drains_keeps_renewing_through_the_grace_then_deregisters_and_revokes() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    let t1 = t0 + ms(1_000);
    machine.shutdown(t1);
    assert_eq!(
        machine.poll(t1),
        Some(Action::Drain {
            incarnation: Incarnation(7_000),
            reason: "shutdown".into(),
        })
    );
    machine.complete(t1, written(11, None));
    let until = t1 + GRACE;
    assert!(matches!(
        machine.status(),
        RegistrarStatus::ShuttingDown {
            stage: ShutdownStage::Grace { until: u },
            ..
        } if u == until
    ));
    assert_eq!(machine.status().registration().unwrap().serving, ServingState::Draining);
    // The lease must outlive the grace: renewal is still due at t0 + 3.02 s.
    assert_eq!(machine.next_wake(), Some(t0 + ms(3_020)));
    assert_eq!(machine.poll(t0 + ms(3_020)), Some(Action::Renew { lease: LeaseId(3) }));
    machine.complete(t0 + ms(3_020), renewed(3));
    assert_eq!(machine.next_wake(), Some(until));
    assert_eq!(machine.poll(until - ms(1)), None);
    assert_eq!(
        machine.poll(until),
        Some(Action::Deregister {
            incarnation: Incarnation(7_000)
        })
    );
    machine.complete(until, written(12, None));
    assert_eq!(machine.poll(until), Some(Action::RevokeLease { lease: LeaseId(3) }));
    machine.complete(until, written(13, None));
    assert_eq!(
        machine.status(),
        RegistrarStatus::Stopped {
            deregistered: true,
            error: None
        }
    );
    assert!(machine.is_finished());
}

/// The measured grace (SPEC L6, O3): the grace asks every 250 ms whether the subscribers
/// applied the drain's revision, and deregisters as soon as they have.
#[test]
fn a_grace_waiting_for_convergence_ends_once_the_subscribers_applied_the_drain() {
    let t0 = Instant::now();
    let mut machine = registered_with(
        RegistrarConfig {
            drain_until_converged: Some(0.99),
            ..config()
        },
        t0,
    );
    let t1 = t0 + ms(1_000);
    machine.shutdown(t1);
    assert!(matches!(machine.poll(t1), Some(Action::Drain { .. })));
    machine.complete(t1, written(11, None));
    assert_eq!(machine.next_wake(), Some(t1 + ms(250)));
    assert_eq!(machine.poll(t1 + ms(249)), None);
    let check = Action::CheckConvergence { revision: Revision(11) };
    assert_eq!(machine.poll(t1 + ms(250)), Some(check.clone()));
    machine.complete(t1 + ms(260), Outcome::Converged(false));
    assert_eq!(
        machine.poll(t1 + ms(300)),
        None,
        "not yet: the next check is 250 ms later"
    );
    assert_eq!(machine.poll(t1 + ms(500)), Some(check.clone()));
    machine.complete(t1 + ms(510), Outcome::Failed(unreachable()));
    assert_eq!(machine.poll(t1 + ms(750)), Some(check));
    machine.complete(t1 + ms(760), Outcome::Converged(true));
    assert_eq!(
        machine.poll(t1 + ms(760)),
        Some(Action::Deregister {
            incarnation: Incarnation(7_000)
        }),
        "deregistered 4.2 s before the grace would have ended"
    );
}

/// Subscribers that never converge hold the endpoint no longer than the grace.
#[test]
fn a_grace_waiting_for_convergence_still_ends_at_the_grace() {
    let t0 = Instant::now();
    let mut machine = registered_with(
        RegistrarConfig {
            drain_until_converged: Some(1.0),
            ..config()
        },
        t0,
    );
    let t1 = t0 + ms(1_000);
    machine.shutdown(t1);
    machine.poll(t1);
    machine.complete(t1, written(11, None));
    let mut at = t1 + ms(250);
    while at < t1 + GRACE {
        match machine.poll(at) {
            Some(Action::CheckConvergence { .. }) => machine.complete(at, Outcome::Converged(false)),
            Some(Action::Renew { lease }) => machine.complete(at, renewed(lease.0)),
            other => panic!("unexpected {other:?} at {:?}", at - t1),
        }
        at = machine.next_wake().unwrap();
    }
    assert_eq!(
        machine.poll(t1 + GRACE),
        Some(Action::Deregister {
            incarnation: Incarnation(7_000)
        })
    );
}

#[test]
fn shutdown_before_registering_stops_at_once() {
    let t0 = Instant::now();
    let mut machine = machine_with(config(), MIDDLE, t0);
    machine.shutdown(t0);
    assert_eq!(machine.poll(t0), None);
    assert_eq!(
        machine.status(),
        RegistrarStatus::Stopped {
            deregistered: false,
            error: None
        }
    );
}

#[test]
fn a_drain_that_cannot_be_published_within_the_grace_still_deregisters() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    machine.shutdown(t0);
    let mut now = t0;
    let mut drains = 0;
    while let Some(Action::Drain { .. }) = machine.poll(now) {
        drains += 1;
        machine.complete(now, Outcome::Failed(unreachable()));
        now = machine.next_wake().unwrap();
    }
    // 0, +0.2, +0.4, +0.8, +1.6 s: the next (+3.2 s) would end past the 5 s grace.
    assert_eq!(drains, 5);
    assert!(matches!(
        machine.status(),
        RegistrarStatus::ShuttingDown {
            stage: ShutdownStage::Deregistering,
            ..
        }
    ));
}

#[test]
fn a_deregistration_that_keeps_failing_gives_up_after_a_ttl_and_leaves_it_to_expiry() {
    let t0 = Instant::now();
    let no_grace = RegistrarConfig {
        drain_grace: Duration::ZERO,
        ..config()
    };
    let mut machine = machine_with(no_grace, MIDDLE, t0);
    machine.poll(t0);
    machine.complete(t0, written(10, Some(3)));
    machine.shutdown(t0);
    machine.poll(t0);
    machine.complete(t0, written(11, None));
    let mut now = t0;
    loop {
        match machine.poll(now) {
            Some(Action::Deregister { .. }) => machine.complete(now, Outcome::Failed(unreachable())),
            Some(Action::Renew { lease }) => machine.complete(now, renewed(lease.0)),
            Some(other) => panic!("unexpected {other:?}"),
            None => {}
        }
        let Some(wake) = machine.next_wake() else { break };
        now = wake;
        assert!(now < t0 + TTL + TTL, "never gave up");
    }
    let RegistrarStatus::Stopped { deregistered, error } = machine.status() else {
        panic!("{:?}", machine.status());
    };
    assert!(!deregistered);
    assert_eq!(error.map(|e| e.code().to_string()), Some("cannot_connect".into()));
}

#[test]
fn a_record_already_gone_at_shutdown_is_not_an_error_to_retry() {
    let t0 = Instant::now();
    let mut machine = registered(t0);
    machine.shutdown(t0);
    machine.poll(t0);
    machine.complete(t0, Outcome::Failed(api(404, "not_found")));
    assert_eq!(machine.poll(t0), Some(Action::RevokeLease { lease: LeaseId(3) }));
    machine.complete(t0, Outcome::Failed(api(404, "lease_not_found")));
    assert!(matches!(
        machine.status(),
        RegistrarStatus::Stopped {
            deregistered: false,
            ..
        }
    ));
}

#[test]
fn an_unreachable_registry_is_retried_with_doubling_capped_backoff() {
    let t0 = Instant::now();
    let mut machine = machine_with(config(), MIDDLE, t0);
    let mut now = t0;
    let mut delays = Vec::new();
    for _ in 0..9 {
        assert!(matches!(machine.poll(now), Some(Action::Register { .. })));
        machine.complete(now, Outcome::Failed(unreachable()));
        let next = machine.next_wake().unwrap();
        delays.push((next - now).as_millis());
        now = next;
    }
    assert_eq!(delays, [200, 400, 800, 1_600, 3_200, 6_400, 10_000, 10_000, 10_000]);
    let RegistrarStatus::Registering {
        failed_attempts,
        last_error,
        ..
    } = machine.status()
    else {
        panic!("{:?}", machine.status());
    };
    assert_eq!(
        (failed_attempts, last_error.unwrap().code().to_string()),
        (9, "cannot_connect".to_owned())
    );
}

#[test]
fn an_invalid_record_is_refused_for_good_and_a_stale_first_incarnation_is_superseded() {
    let t0 = Instant::now();
    let mut machine = machine_with(config(), MIDDLE, t0);
    machine.poll(t0);
    machine.complete(t0, Outcome::Failed(api(422, "address_out_of_scope")));
    assert!(matches!(machine.status(), RegistrarStatus::Refused { .. }));
    assert!(machine.is_finished());

    let mut machine = machine_with(config(), MIDDLE, t0);
    machine.poll(t0);
    machine.complete(t0, Outcome::Failed(api(409, "stale_incarnation")));
    assert!(matches!(machine.status(), RegistrarStatus::Superseded { .. }));
}

#[test]
fn a_lost_reply_to_a_registration_is_retried_with_the_same_incarnation() {
    // L1: the retry of a committed registration returns the committed result.
    let t0 = Instant::now();
    let mut machine = machine_with(config(), MIDDLE, t0);
    machine.poll(t0);
    let timeout = ClientError::Timeout {
        server: "http://s".into(),
        after: Duration::from_secs(30),
    };
    machine.complete(t0, Outcome::Failed(timeout));
    assert!(matches!(
        machine.poll(t0 + ms(200)),
        Some(Action::Register {
            incarnation: Incarnation(7_000),
            ..
        })
    ));
}
