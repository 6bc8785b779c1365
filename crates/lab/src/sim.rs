//! The simulation loop: one setup on the scenario, tick by tick on a virtual clock, every
//! draw from the seed. Pure: the same scenario, setup and seed give the same [`Run`].
//!
//! ```text
//!  t = 0: every instance registers (Register + lease grant), every caller looks up once
//!  each 10 ms tick, in this order:
//!    1. lifecycle   crash (or drain, then deregister + revoke + stop), silence on/off
//!    2. heartbeats  each live instance whose jittered heartbeat fell due since the last tick
//!                   renews now (a refused renewal re-registers with the next incarnation);
//!                   the next one is scheduled from now
//!    3. keeper      leases past their deadline expire in one command (brake permitting)
//!    4. callers     lookups at each caller's own cache phase, or watch updates committed at
//!                   least `propagation` ago; balancers rebuilt if the set changed
//!    5. requests    each caller sends its requests of the tick: pick, live or failed
//! ```
//!
//! Randomness: independent streams derived from the seed (who crashes, who goes silent,
//! heartbeat phases and jitter, cache phases, each caller's rotation starts), so the crashed
//! instances and the phases are the same in every setup of a run, and a setup's extra draws
//! (an ejection's rebuild) never shift another stream.

use muster_client::registrar::timing::jitter;
use muster_core::{LeaseId, Revision};
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::caller::{Caller, Outcome};
use crate::control::ControlPlane;
use crate::scenario::{Discovery, Refresh, RegistrySetup, Scenario, Setup, Stop};

/// Everything one setup's run measured, plus the draws the analytic expectation needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Requests sent.
    pub requests: u64,
    /// Failed requests (routed to a dead instance, or to nothing).
    pub failed: u64,
    /// Of those, requests with no endpoint to route to.
    pub unroutable: u64,
    /// Failed requests per report window.
    pub failed_per_window: Vec<u64>,
    /// Failed requests per second of virtual time.
    pub failed_per_second: Vec<u64>,
    /// When the last failed request was sent.
    pub last_failed_ms: Option<u64>,
    /// Heartbeats that reached the registry (renewals, refused ones included).
    pub heartbeats: u64,
    /// Registrations after the start (an instance whose lease was lost registers again).
    pub reregistrations: u64,
    /// Registry lookups by callers after the initial one.
    pub lookups: u64,
    /// Watch deliveries (one batch of updates to every caller).
    pub watch_deliveries: u64,
    /// The sum over ticks of instances heartbeating (alive, registered, not silenced).
    pub heartbeating_tick_sum: u64,
    /// Live instances the registry removed (a silenced instance whose lease expired).
    pub evicted_alive: u64,
    /// The fewest endpoints registered at any tick.
    pub min_registered: usize,
    /// Ejections started by callers.
    pub ejections: u64,
    /// Ticks during which self-preservation held expiries.
    pub protection_ticks: u64,
    /// The crashed (or drained) instances, by index.
    pub killed: Vec<u32>,
    /// Their last heartbeat before the crash (ms).
    pub killed_last_heartbeat_ms: Vec<u64>,
    /// Each caller's cache phase (ms): it looks up at `phase + k × period`.
    pub cache_phase_ms: Vec<u64>,
}

/// Where the simulation reports progress: `(tick, ticks)` every [`PROGRESS_EVERY`] ticks.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Progress is reported every 100 ticks (one virtual second at 10 ms): frequent enough for a
/// smooth bar, rare enough to cost nothing.
pub const PROGRESS_EVERY: u64 = 100;

/// Stream ids for [`stream`]: one generator per purpose.
mod streams {
    pub(super) const KILLED: u64 = 1;
    pub(super) const SILENCED: u64 = 2;
    pub(super) const HEARTBEAT_PHASE: u64 = 3;
    pub(super) const HEARTBEAT_JITTER: u64 = 4;
    pub(super) const CACHE_PHASE: u64 = 5;
    pub(super) const CALLER: u64 = 1 << 32;
}

/// The generator of stream `id` for `seed` (xoshiro256++ seeded through SplitMix64).
fn stream(seed: u64, id: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A uniform draw in `0..n` (Lemire's multiply; the bias, under 2^-40 here, is irrelevant).
fn below(rng: &mut impl RngCore, n: u64) -> u64 {
    ((u128::from(rng.next_u64()) * u128::from(n)) >> 64) as u64
}

/// The crashed instances: one in each of `killed` equal strata of the fleet, at a random
/// place in it. Stratified so that they are spread over every caller's rotation as a real
/// 10% would be on average, without the luck of a clumped draw.
pub fn killed_instances(scenario: &Scenario) -> Vec<u32> {
    let mut rng = stream(scenario.seed, streams::KILLED);
    let (n, k) = (u64::from(scenario.instances), u64::from(scenario.killed));
    (0..k)
        .map(|j| {
            let (lo, hi) = (j * n / k, (j + 1) * n / k);
            (lo + below(&mut rng, hi - lo)) as u32
        })
        .collect()
}

/// `count` instances drawn among those that do not crash.
fn silenced_instances(scenario: &Scenario, killed: &[u32], count: u32) -> Vec<u32> {
    let mut rng = stream(scenario.seed, streams::SILENCED);
    let mut pool: Vec<u32> = (0..scenario.instances)
        .filter(|i| killed.binary_search(i).is_err())
        .collect();
    for j in 0..count as usize {
        let pick = j + below(&mut rng, (pool.len() - j) as u64) as usize;
        pool.swap(j, pick);
    }
    pool.truncate(count as usize);
    pool
}

/// The instances' side: who is alive, silent, when each heartbeats, with which lease.
struct Fleet {
    alive: Vec<bool>,
    silenced: Vec<bool>,
    due_us: Vec<u64>,
    last_heartbeat_ms: Vec<u64>,
    lease: Vec<LeaseId>,
    incarnation: Vec<u64>,
}

/// Runs `setup` on `scenario`. The scenario and setup must have passed validation.
pub fn simulate(scenario: &Scenario, setup: &Setup, progress: Progress<'_>) -> Run {
    let n = scenario.instances as usize;
    let ticks = scenario.ticks();
    let crash_tick = scenario.crash_tick();
    let killed = killed_instances(scenario);
    let registry = setup.registry_setup();
    let silenced = match registry.and_then(|r| r.silence) {
        Some(silence) => silenced_instances(scenario, &killed, silence.instances),
        None => Vec::new(),
    };

    // t = 0: register the fleet. A hard-coded list is the same records, read once.
    let ttl_ms = registry.map_or(10_000, |r| r.ttl_ms);
    let mut control = ControlPlane::new(ttl_ms, registry.and_then(|r| r.preservation));
    let mut fleet = Fleet {
        alive: vec![true; n],
        silenced: vec![false; n],
        due_us: vec![0; n],
        last_heartbeat_ms: vec![0; n],
        lease: Vec::with_capacity(n),
        incarnation: vec![1; n],
    };
    for index in 0..scenario.instances {
        fleet.lease.push(control.register(index, 1, 0));
    }
    let mut jitter_rng = stream(scenario.seed, streams::HEARTBEAT_JITTER);
    if let Some(registry) = registry {
        let mut phase_rng = stream(scenario.seed, streams::HEARTBEAT_PHASE);
        for due in &mut fleet.due_us {
            *due = below(&mut phase_rng, registry.heartbeat_ms * 1_000);
        }
    }
    let first = control.snapshot();
    let mut callers: Vec<Caller> = (0..u64::from(scenario.callers))
        .map(|c| {
            let mut caller = Caller::new(
                control.key().clone(),
                setup.eject_ms,
                stream(scenario.seed, streams::CALLER + c),
            );
            caller.install(&first, control.revision(), 0);
            caller.refresh_balancer(0);
            caller
        })
        .collect();
    let tick_ms = scenario.tick_ms;
    let (period_ticks, propagation_ms) = match registry.map(|r| r.refresh) {
        Some(Refresh::Cache { period_ms }) => (Some(period_ms / tick_ms), None),
        Some(Refresh::Watch { propagation_ms }) => (None, Some(propagation_ms)),
        None => (None, None),
    };
    let mut cache_rng = stream(scenario.seed, streams::CACHE_PHASE);
    let phases: Vec<u64> = match period_ticks {
        Some(period) => (0..scenario.callers).map(|_| below(&mut cache_rng, period)).collect(),
        None => Vec::new(),
    };
    let mut delivered = control.revision();
    let mut next_commit = control.commits().len();

    let drain_stop_tick = match setup.stop {
        Stop::Drain { grace_ms } => Some(crash_tick + grace_ms.div_ceil(tick_ms)),
        Stop::Crash => None,
    };
    let silence_ticks = registry.and_then(|r| r.silence).map(|s| {
        let from = s.from_ms / tick_ms;
        (from, from + s.for_ms / tick_ms)
    });

    let mut run = Run {
        requests: 0,
        failed: 0,
        unroutable: 0,
        failed_per_window: vec![0; scenario.duration_ms.div_ceil(scenario.window_ms) as usize],
        failed_per_second: vec![0; scenario.duration_ms.div_ceil(1_000) as usize],
        last_failed_ms: None,
        heartbeats: 0,
        reregistrations: 0,
        lookups: 0,
        watch_deliveries: 0,
        heartbeating_tick_sum: 0,
        evicted_alive: 0,
        min_registered: control.registered(),
        ejections: 0,
        protection_ticks: 0,
        killed: killed.clone(),
        killed_last_heartbeat_ms: Vec::new(),
        cache_phase_ms: phases.iter().map(|p| p * tick_ms).collect(),
    };
    let mut heartbeating = if registry.is_some() { n } else { 0 };

    for tick in 0..ticks {
        let now = tick * tick_ms;
        // 1. Lifecycle.
        if tick == crash_tick {
            run.killed_last_heartbeat_ms = killed.iter().map(|&i| fleet.last_heartbeat_ms[i as usize]).collect();
            match setup.stop {
                Stop::Crash => {
                    for &i in &killed {
                        fleet.alive[i as usize] = false;
                    }
                    if registry.is_some() {
                        heartbeating -= killed.len();
                    }
                }
                Stop::Drain { .. } => {
                    for &i in &killed {
                        control.drain(i, fleet.incarnation[i as usize], now);
                    }
                }
            }
        }
        if Some(tick) == drain_stop_tick {
            for &i in &killed {
                let i = i as usize;
                control.deregister(i as u32, fleet.incarnation[i], fleet.lease[i], now);
                fleet.alive[i] = false;
            }
            heartbeating -= killed.len();
        }
        if let Some((from, until)) = silence_ticks
            && (tick == from || tick == until)
        {
            let quiet = tick == from;
            for &i in &silenced {
                fleet.silenced[i as usize] = quiet;
            }
            heartbeating = if quiet {
                heartbeating - silenced.len()
            } else {
                heartbeating + silenced.len()
            };
        }
        // 2. Heartbeats.
        if let Some(registry) = registry {
            heartbeat(&mut fleet, &mut control, registry, &mut jitter_rng, now, &mut run);
            run.heartbeating_tick_sum += heartbeating as u64;
            // 3. The leader engine's tick (lease expiry).
            let expiry = control.keeper_tick(now);
            run.evicted_alive += expiry.removed.iter().filter(|&&i| fleet.alive[i as usize]).count() as u64;
            run.protection_ticks += u64::from(control.protection_active());
            run.min_registered = run.min_registered.min(control.registered());
        }
        // 4. Callers learn the fleet.
        if let Some(period) = period_ticks {
            let mut snapshot = None;
            for (caller, phase) in callers.iter_mut().zip(&phases) {
                if tick % period == *phase {
                    let snapshot = snapshot.get_or_insert_with(|| control.snapshot());
                    caller.install(snapshot, control.revision(), now);
                    run.lookups += 1;
                }
            }
        }
        if let Some(propagation) = propagation_ms {
            let commits = control.commits();
            let mut target = delivered;
            while let Some(&(revision, at)) = commits.get(next_commit)
                && at + propagation <= now
            {
                target = revision;
                next_commit += 1;
            }
            if target > delivered {
                deliver(&mut callers, &control, delivered, target, now, &mut run);
                delivered = target;
            }
        }
        for caller in &mut callers {
            caller.refresh_balancer(now);
        }
        // 5. Requests.
        let requests = scenario.requests_in_tick(tick);
        for caller in &mut callers {
            for _ in 0..requests {
                let outcome = caller.request(&fleet.alive, now);
                if outcome != Outcome::Served {
                    run.failed += 1;
                    run.unroutable += u64::from(outcome == Outcome::NoEndpoint);
                    run.failed_per_window[(now / scenario.window_ms) as usize] += 1;
                    run.failed_per_second[(now / 1_000) as usize] += 1;
                    run.last_failed_ms = Some(now);
                }
            }
        }
        run.requests += requests * u64::from(scenario.callers);
        if (tick + 1) % PROGRESS_EVERY == 0 || tick + 1 == ticks {
            progress(tick + 1, ticks);
        }
    }
    run.ejections = callers.iter().map(|c| c.ejections).sum();
    run
}

/// Step 2: every live instance whose heartbeat fell due renews (or, lease lost, registers
/// again with the next incarnation, as the registrar does); the next is jittered from now.
fn heartbeat(
    fleet: &mut Fleet,
    control: &mut ControlPlane,
    registry: &RegistrySetup,
    rng: &mut Xoshiro256PlusPlus,
    now_ms: u64,
    run: &mut Run,
) {
    let now_us = now_ms * 1_000;
    let interval = std::time::Duration::from_millis(registry.heartbeat_ms);
    for index in 0..fleet.alive.len() {
        if !fleet.alive[index] || fleet.due_us[index] > now_us {
            continue;
        }
        fleet.due_us[index] = now_us + jitter(rng, interval).as_micros() as u64;
        if fleet.silenced[index] {
            continue;
        }
        run.heartbeats += 1;
        fleet.last_heartbeat_ms[index] = now_ms;
        if control.renew(fleet.lease[index], now_ms).is_err() {
            fleet.incarnation[index] += 1;
            fleet.lease[index] = control.register(index as u32, fleet.incarnation[index], now_ms);
            run.reregistrations += 1;
        }
    }
}

/// Step 4 for watchers: the updates after `delivered` through `target` reach every caller.
fn deliver(
    callers: &mut [Caller],
    control: &ControlPlane,
    delivered: Revision,
    target: Revision,
    now: u64,
    run: &mut Run,
) {
    let updates = control.updates(delivered, target);
    run.watch_deliveries += 1;
    for caller in callers {
        let in_order = updates.iter().all(|update| caller.on_update(update, now));
        if !in_order {
            // The view doubted the stream (it cannot happen here, but the client's answer is
            // a fresh snapshot, so that is what the lab does too).
            caller.install(&control.snapshot(), control.revision(), now);
            run.lookups += 1;
        }
    }
}

/// The discovery a setup uses, in words, for reports.
pub fn describe(setup: &Setup) -> String {
    let mut text = match &setup.discovery {
        Discovery::HardCoded => "a hard-coded list".to_owned(),
        Discovery::Registry(r) => {
            let refresh = match r.refresh {
                Refresh::Cache { period_ms } => format!("callers cache {}", crate::units::format_ms(period_ms)),
                Refresh::Watch { propagation_ms } => {
                    format!(
                        "callers watch ({} propagation)",
                        crate::units::format_ms(propagation_ms)
                    )
                }
            };
            format!(
                "TTL {}, heartbeat {}, {refresh}",
                crate::units::format_ms(r.ttl_ms),
                crate::units::format_ms(r.heartbeat_ms)
            )
        }
    };
    if let Some(eject) = setup.eject_ms {
        text.push_str(&format!(
            ", ejection on first failure for {}",
            crate::units::format_ms(eject)
        ));
    }
    if let Stop::Drain { grace_ms } = setup.stop {
        text.push_str(&format!(", drain {} before stop", crate::units::format_ms(grace_ms)));
    }
    if let Some(r) = setup.registry_setup() {
        if let Some(s) = r.silence {
            text.push_str(&format!(
                ", {} live instances silent for {} from {}",
                s.instances,
                crate::units::format_ms(s.for_ms),
                crate::units::format_ms(s.from_ms)
            ));
        }
        if r.preservation.is_some() {
            text.push_str(", self-preservation on");
        }
    }
    text
}
