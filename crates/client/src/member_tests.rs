use std::sync::Arc;

use muster_core::{DeleteReason, Endpoint, ServingState};

use super::*;
use crate::balance::fixtures::{Fixture, REVISION};

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

fn endpoints(n: u32) -> Vec<Arc<Endpoint>> {
    (0..n).map(|i| Fixture::ready(i).endpoint()).collect()
}

fn snapshot(endpoints: &[Arc<Endpoint>]) -> ServiceSnapshot {
    ServiceSnapshot::from_endpoints(key(), REVISION, endpoints.iter().cloned())
}

/// The next update of `snapshot`: `events`, with the digest the server would vouch for.
fn update(snapshot: &ServiceSnapshot, events: Vec<Event>) -> ServiceUpdate {
    let mut next = snapshot.clone();
    let revision = Revision(snapshot.revision().0 + 1);
    let mut update = ServiceUpdate {
        key: key(),
        revision,
        prev_revision: snapshot.revision(),
        digest: Digest::EMPTY,
        events,
    };
    for event in &update.events {
        match event {
            Event::Put { endpoint } => next.put(Arc::clone(endpoint)),
            Event::Delete { instance, .. } => next.remove(instance),
        };
    }
    update.digest = next.digest();
    update
}

#[test]
fn a_compact_set_keeps_the_servers_digest_and_routing_fields() {
    let full = snapshot(&endpoints(3));
    let set = MemberSet::from_snapshot(&full);
    assert_eq!(set.digest(), full.digest());
    assert_eq!(set.revision(), full.revision());
    assert_eq!(set.len(), 3);
    for (member, endpoint) in set.iter().zip(full.iter()) {
        assert_eq!(member.instance, endpoint.instance);
        assert_eq!(member.incarnation, endpoint.incarnation);
        assert_eq!(member.addresses, endpoint.addresses);
        assert_eq!(*member.ports, *endpoint.ports);
        assert_eq!(*member.locality, endpoint.locality);
        assert_eq!((member.serving, member.weight), (endpoint.serving, endpoint.weight));
        assert_eq!(member.fingerprint(), endpoint.fingerprint());
    }
}

#[test]
fn equal_port_lists_and_localities_are_shared_not_copied() {
    let set = MemberSet::from_snapshot(&snapshot(&endpoints(3)));
    let members: Vec<_> = set.iter().collect();
    assert!(Arc::ptr_eq(&members[0].ports, &members[2].ports));
    assert!(Arc::ptr_eq(&members[0].locality, &members[1].locality));
}

/// SPEC C1: updates applied to the compact set reach exactly the set the server has.
#[test]
fn updates_reach_the_same_set_and_digest_as_the_full_records() {
    let mut full = snapshot(&endpoints(4));
    let mut set = MemberSet::from_snapshot(&full);
    let drained = Fixture::ready(1).serving(ServingState::Draining).endpoint();
    let events = vec![
        Event::Put { endpoint: drained },
        Event::Delete {
            instance: InstanceId::new("ep-0002").unwrap(),
            incarnation: Incarnation(1),
            reason: DeleteReason::Deregistered,
        },
        Event::Put {
            endpoint: Fixture::ready(9).endpoint(),
        },
    ];
    let next = update(&full, events);
    assert_eq!(set.apply(&next), Ok(true));
    assert_eq!(full.apply(&next), Ok(true));
    assert_eq!(set, MemberSet::from_snapshot(&full));
    assert_eq!(
        set.get(&InstanceId::new("ep-0001").unwrap()).unwrap().serving,
        ServingState::Draining
    );
    assert_eq!(set.apply(&next), Ok(false), "a replay is harmless");
}

/// SPEC C1: the compact set still catches an update whose events do not produce its digest,
/// although it no longer holds the fields the fingerprints cover.
#[test]
fn a_digest_mismatch_is_caught_and_leaves_the_compact_set_unchanged() {
    let full = snapshot(&endpoints(3));
    let mut set = MemberSet::from_snapshot(&full);
    let before = set.clone();
    let mut mangled = update(
        &full,
        vec![Event::Put {
            endpoint: Fixture::ready(0).weight(7).endpoint(),
        }],
    );
    // A record changed in a field the compact record drops: only its fingerprint shows it.
    let mut endpoint = Endpoint::clone(&Fixture::ready(0).weight(7).endpoint());
    endpoint.observation.reason = "tampered".into();
    mangled.events = vec![Event::Put {
        endpoint: Arc::new(endpoint),
    }];
    assert!(matches!(
        set.apply(&mangled),
        Err(GapError::DigestMismatch { revision, .. }) if revision == mangled.revision
    ));
    assert_eq!(set, before);
}

#[test]
fn a_gap_or_another_service_is_refused() {
    let full = snapshot(&endpoints(2));
    let mut set = MemberSet::from_snapshot(&full);
    let mut gap = update(&full, Vec::new());
    gap.prev_revision = Revision(gap.prev_revision.0 - 1);
    assert!(matches!(set.apply(&gap), Err(GapError::Gap { .. })));
    let mut other = update(&full, Vec::new());
    other.key = ServiceKey::new("acme", "prod", "web").unwrap();
    assert!(matches!(set.apply(&other), Err(GapError::WrongService { .. })));
}

#[test]
fn saved_members_whose_fingerprints_miss_the_digest_are_refused() {
    let set = MemberSet::from_snapshot(&snapshot(&endpoints(2)));
    let members = || set.iter().map(|member| Member::clone(member));
    let rebuilt = MemberSet::from_members(key(), set.revision(), set.digest(), members()).unwrap();
    assert_eq!(rebuilt, set);
    assert!(MemberSet::from_members(key(), set.revision(), Digest(set.digest().0 ^ 1), members()).is_err());
    let twice = members().chain(members().take(1));
    assert!(MemberSet::from_members(key(), set.revision(), set.digest(), twice).is_err());
}

/// SPEC C1 through the view: an update whose digest does not match keeps the compact set and
/// asks for a snapshot, even when the tampered field is one the view does not keep.
#[test]
fn the_view_catches_a_digest_mismatch_with_the_compact_set() {
    use crate::view::{Next, Resnapshot, View};
    let full = snapshot(&endpoints(2));
    let mut view = View::new(key());
    view.install(full.clone(), full.revision(), 0);
    let mut mangled = update(
        &full,
        vec![Event::Put {
            endpoint: Fixture::ready(1).serving(ServingState::NotServing).endpoint(),
        }],
    );
    let mut endpoint = Endpoint::clone(&Fixture::ready(1).serving(ServingState::NotServing).endpoint());
    endpoint.labels = muster_core::Labels::default();
    endpoint.provenance.policy_revision = Revision(99);
    mangled.events = vec![Event::Put {
        endpoint: Arc::new(endpoint),
    }];
    assert_eq!(
        view.on_update(&mangled, 1),
        Next::Resnapshot(Resnapshot::DigestMismatch {
            revision: mangled.revision
        })
    );
    let active = view.active().unwrap();
    assert_eq!(active.revision(), full.revision(), "the old set is kept");
    assert_eq!(
        active.get(&InstanceId::new("ep-0001").unwrap()).unwrap().serving,
        ServingState::Ready
    );
    assert!(view.status(1).resnapshot_pending);
}
