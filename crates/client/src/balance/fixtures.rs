//! Endpoint records and seeded generators for the balancer and ejection tests.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use muster_core::{
    Actor, Address, Endpoint, Incarnation, InstanceId, Label, Labels, Locality, NamedPort, Observation, Principal,
    Protocol, Provenance, Revision, ServingState,
};
use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::balance::{Balancer, EligibilityConfig, EligibleSet, Pick};
use crate::eject::OutlierDetector;
use crate::member::Member;

/// The revision every fixture set is built at.
pub(crate) const REVISION: Revision = Revision(42);

/// A seeded generator: the same seed, the same picks.
pub(crate) fn rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}

/// An endpoint under construction: `ep-NNNN`, ready, weight 100, one unscoped address.
pub(crate) struct Fixture(Endpoint);

fn label(text: &str) -> Label {
    Label::new("fixture", text).expect("fixture labels are valid")
}

impl Fixture {
    pub(crate) fn ready(n: u32) -> Fixture {
        let principal = Principal::new("fixture").expect("valid principal");
        Fixture(Endpoint {
            instance: InstanceId::new(&format!("ep-{n:04}")).expect("valid instance"),
            incarnation: Incarnation(1),
            addresses: vec![Address {
                ip: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n)),
                scope: None,
            }]
            .into(),
            ports: vec![NamedPort {
                name: label("http"),
                port: 8080,
                protocol: Protocol::Http,
            }]
            .into(),
            locality: Locality::default(),
            serving: ServingState::Ready,
            weight: 100,
            capacity: None,
            labels: Labels::default(),
            lease: None,
            revision: REVISION,
            provenance: Provenance {
                registrar: principal.clone(),
                source_revision: None,
                policy_revision: Revision::ZERO,
            },
            observation: Observation {
                actor: Actor::App,
                principal,
                at_ms: 0,
                reason: "fixture".into(),
            },
            checks: Box::default(),
        })
    }

    pub(crate) fn serving(mut self, state: ServingState) -> Fixture {
        self.0.serving = state;
        self
    }

    pub(crate) fn weight(mut self, weight: u16) -> Fixture {
        self.0.weight = weight;
        self
    }

    pub(crate) fn incarnation(mut self, incarnation: u64) -> Fixture {
        self.0.incarnation = Incarnation(incarnation);
        self
    }

    /// Region and zone, e.g. `("eu", "eu-a")`.
    pub(crate) fn zone(mut self, region: &str, zone: &str) -> Fixture {
        self.0.locality.region = Some(label(region));
        self.0.locality.zone = Some(label(zone));
        self
    }

    pub(crate) fn priority(mut self, priority: u8) -> Fixture {
        self.0.locality.priority = priority;
        self
    }

    /// Replaces the addresses with one per entry, each with that scope.
    pub(crate) fn scopes(mut self, scopes: &[Option<&str>]) -> Fixture {
        let ip = self.0.addresses[0].ip;
        self.0.addresses = scopes
            .iter()
            .map(|scope| Address {
                ip,
                scope: scope.map(label),
            })
            .collect();
        self
    }

    /// The view's compact record of the endpoint.
    pub(crate) fn build(self) -> Arc<Member> {
        Arc::new(Member::from_endpoint(&self.0))
    }

    /// The full record, as the server holds it.
    pub(crate) fn endpoint(self) -> Arc<Endpoint> {
        Arc::new(self.0)
    }
}

/// `n` ready endpoints `ep-0000..`, weight 100, no locality.
pub(crate) fn ready(n: u32) -> Vec<Arc<Member>> {
    (0..n).map(|i| Fixture::ready(i).build()).collect()
}

/// The eligible set of `endpoints` under the default config, nothing ejected.
pub(crate) fn set_of(endpoints: impl IntoIterator<Item = Arc<Member>>) -> EligibleSet {
    set_with(endpoints, &EligibilityConfig::default())
}

/// The eligible set of `endpoints` under `config`, nothing ejected.
pub(crate) fn set_with(endpoints: impl IntoIterator<Item = Arc<Member>>, config: &EligibilityConfig) -> EligibleSet {
    let endpoints: Vec<_> = endpoints.into_iter().collect();
    EligibleSet::build(REVISION, &endpoints, config, &OutlierDetector::default(), 0)
}

/// How many of `picks` went to each instance.
pub(crate) fn tally(picks: impl IntoIterator<Item = Pick>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for pick in picks {
        *counts.entry(pick.endpoint.instance.to_string()).or_default() += 1;
    }
    counts
}

/// `count` picks from `balancer` with a generator seeded `seed`.
pub(crate) fn picks(balancer: &mut impl Balancer, seed: u64, count: usize) -> Vec<Pick> {
    let mut rng = rng(seed);
    (0..count)
        .map(|_| balancer.pick(&mut rng).expect("the set has a candidate"))
        .collect()
}
