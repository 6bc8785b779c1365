//! Time and randomness are inputs: the same seed prints the same bytes; another seed draws
//! differently and keeps within the same bounds.

use muster_lab::sim::killed_instances;
use muster_lab::{Scenario, Setup, simulate_all};

use crate::support::relative_error;

#[test]
fn the_same_seed_prints_identical_output() {
    let scenario = Scenario::reference();
    let setups = Setup::reference(&scenario);
    let first = simulate_all(&scenario, &setups, &mut |_, _, _| {});
    let second = simulate_all(&scenario, &setups, &mut |_, _, _| {});
    assert_eq!(first.render_json(), second.render_json());
    assert_eq!(first.render_table(), second.render_table());
}

#[test]
fn another_seed_draws_differently_within_the_same_bounds() {
    let reference = Scenario::reference();
    let setups = Setup::reference(&reference);
    let baseline = simulate_all(&reference, &setups, &mut |_, _, _| {});
    for seed in [1, 2, 3] {
        let scenario = Scenario {
            seed,
            ..reference.clone()
        };
        assert_ne!(killed_instances(&scenario), killed_instances(&reference), "seed {seed}");
        let report = simulate_all(&scenario, &setups, &mut |_, _, _| {});
        assert_ne!(
            report.setups[1].failed_per_s, baseline.setups[1].failed_per_s,
            "seed {seed}"
        );
        assert_eq!(
            report.setups[0].failed, 8_000,
            "seed {seed}: the hard-coded figure is exact for any draw"
        );
        for s in &report.setups[1..] {
            let expected = s.expected.failed.unwrap();
            assert!(
                relative_error(s.failed as f64, expected) <= 0.05,
                "seed {seed} {}: {} vs {expected:.0}",
                s.name,
                s.failed
            );
            assert!(
                s.stale_window_s <= s.expected.stale_window_bound_s.unwrap(),
                "seed {seed} {}",
                s.name
            );
            assert!(
                relative_error(s.heartbeats_per_s, s.expected.heartbeats_per_s) <= 0.02,
                "seed {seed} {}",
                s.name
            );
        }
    }
}

#[test]
fn the_same_instances_crash_in_every_setup() {
    let scenario = Scenario::reference();
    let killed = killed_instances(&scenario);
    assert_eq!(killed.len(), 50);
    // One in each tenth of the fleet (stratified), distinct and sorted.
    for (j, &index) in killed.iter().enumerate() {
        assert!((j as u32 * 10..(j as u32 + 1) * 10).contains(&index), "{killed:?}");
    }
}
