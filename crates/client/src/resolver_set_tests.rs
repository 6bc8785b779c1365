use std::sync::Arc;

use muster_core::{Digest, Event, Revision, ServiceSnapshot, ServiceUpdate};

use super::*;
use crate::balance::fixtures::Fixture;

fn key(namespace: &str, service: &str) -> ServiceKey {
    ServiceKey::new("acme", namespace, service).unwrap()
}

fn snapshot_frame(key: ServiceKey, first: u32, count: u32, at: u64) -> Frame {
    let endpoints = (first..first + count).map(|n| Fixture::ready(n).endpoint());
    Frame::Snapshot {
        revision: Revision(at),
        snapshot: ServiceSnapshot::from_endpoints(key, Revision(at), endpoints),
    }
}

fn follow(services: &mut Services, key: ServiceKey) -> (Resolver, bool) {
    let (resolver, feed, stopped) = parts(key, ResolverConfig::default(), None, None);
    let needs_snapshot = services.join(Joining { feed, stopped });
    (resolver, needs_snapshot)
}

fn names(resolver: &Resolver) -> Vec<String> {
    resolver
        .view()
        .active()
        .map(|set| set.iter().map(|m| m.instance.to_string()).collect())
        .unwrap_or_default()
}

/// Each followed service's view gets its own service's frames, and every view the
/// namespace's progress; services nobody follows and other namespaces' frames are ignored.
#[tokio::test]
async fn a_namespace_stream_feeds_each_view_its_own_service_and_everyone_the_progress() {
    let namespace = NamespaceKey::new("acme", "prod").unwrap();
    let mut services = Services::default();
    let (api, api_needs) = follow(&mut services, key("prod", "api"));
    let (web, _) = follow(&mut services, key("prod", "web"));
    assert!(api_needs, "a new view needs a snapshot");
    assert_eq!(services.resume_from(), None, "so the watch starts fresh");

    for frame in [
        snapshot_frame(key("prod", "api"), 0, 2, 5),
        snapshot_frame(key("prod", "db"), 10, 3, 5),
        snapshot_frame(key("prod", "web"), 20, 1, 5),
        snapshot_frame(key("dev", "api"), 30, 4, 5),
        Frame::Progress { revision: Revision(6) },
    ] {
        assert_eq!(services.on_frame(&namespace, &frame).await, Next::Continue);
    }
    assert_eq!(names(&api), ["ep-0000", "ep-0001"]);
    assert_eq!(names(&web), ["ep-0020"]);
    assert_eq!(services.resume_from(), Some(Revision(6)));
    assert_eq!(api.status().received, Revision(6));

    // A bad update of one service asks for a snapshot; the other service's view is untouched.
    let bad = Frame::Update(ServiceUpdate {
        key: key("prod", "web"),
        revision: Revision(7),
        prev_revision: Revision(5),
        digest: Digest(1),
        events: vec![Event::Put {
            endpoint: Fixture::ready(21).endpoint(),
        }],
    });
    assert!(matches!(
        services.on_frame(&namespace, &bad).await,
        Next::Resnapshot(crate::view::Resnapshot::DigestMismatch { .. })
    ));
    assert_eq!(names(&web), ["ep-0020"], "the old set is kept");
    assert!(!api.status().resnapshot_pending);
    assert_eq!(
        services.resume_from(),
        None,
        "one doubtful view makes the next watch fresh"
    );

    drop(web);
    services.prune();
    assert_eq!(services.0.keys().map(Label::as_str).collect::<Vec<_>>(), ["api"]);
    assert_eq!(services.resume_from(), Some(Revision(6)));
}

/// A service confirmed unknown by a fresh stream's progress may resume with the others: its
/// first update, from revision 0, starts its set.
#[tokio::test]
async fn an_unknown_service_resumes_with_the_namespace_and_its_first_update_starts_it() {
    let namespace = NamespaceKey::new("acme", "prod").unwrap();
    let mut services = Services::default();
    let (cache, _) = follow(&mut services, key("prod", "cache"));
    services
        .on_frame(&namespace, &Frame::Progress { revision: Revision(9) })
        .await;
    assert!(cache.view().active().is_none(), "unknown is not empty");
    assert_eq!(services.resume_from(), Some(Revision(9)));

    let endpoint = Fixture::ready(1).endpoint();
    let created = Frame::Update(ServiceUpdate {
        key: key("prod", "cache"),
        revision: Revision(10),
        prev_revision: Revision::ZERO,
        digest: Digest::EMPTY.with(endpoint.fingerprint()),
        events: vec![Event::Put {
            endpoint: Arc::clone(&endpoint),
        }],
    });
    assert_eq!(services.on_frame(&namespace, &created).await, Next::Continue);
    assert_eq!(names(&cache), ["ep-0001"]);
}
