//! The endpoint events' fields (SPEC O2), read back from a capturing subscriber: a lease that
//! runs out must be findable in the log by tenant, namespace, service, instance, incarnation
//! and revision.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use muster_consensus::{ApplyObserver, Judged};
use muster_core::{Incarnation, Revision, ServiceKey};
use muster_leader::Duty;
use muster_registry::{Command, ExpireLeases, LeaseSpec, Registry, RegistryConfig};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

use super::{EndpointLog, TARGET, duty_committed};

/// One captured event: its target, level and fields (the message as `message`).
#[derive(Debug, Clone)]
struct Captured {
    target: String,
    level: tracing::Level,
    fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Captured {
            target: event.metadata().target().to_owned(),
            level: *event.metadata().level(),
            fields,
        });
    }
}

/// Runs `f` with a subscriber that records every event; returns them.
fn captured(f: impl FnOnce()) -> Vec<Captured> {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, f);
    capture.0.lock().unwrap().clone()
}

fn key() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

/// The registry after `api-0` (incarnation 7) registered with a lease of its own; the lease.
fn registered() -> (Registry, muster_core::LeaseId, Revision) {
    let mut registry = Registry::new(RegistryConfig::default());
    let mut command = muster_testkit::register(&key(), "api-0", 0, 100, LeaseSpec::Grant { ttl_ms: 10_000 });
    if let Command::Register(register) = &mut command {
        register.target.incarnation = Incarnation(7);
    }
    let applied = registry.apply(&command, &muster_testkit::meta()).unwrap();
    (registry, applied.lease.unwrap().id, applied.revision)
}

fn assert_endpoint_fields(event: &Captured, incarnation: u64, revision: Revision) {
    let field = |name: &str| event.fields.get(name).map(String::as_str);
    assert_eq!(event.target, TARGET, "{event:?}");
    assert_eq!(field("tenant"), Some("acme"), "{event:?}");
    assert_eq!(field("namespace"), Some("prod"), "{event:?}");
    assert_eq!(field("service"), Some("api"), "{event:?}");
    assert_eq!(field("instance"), Some("api-0"), "{event:?}");
    assert_eq!(
        field("incarnation"),
        Some(incarnation.to_string().as_str()),
        "{event:?}"
    );
    assert_eq!(field("revision"), Some(revision.0.to_string().as_str()), "{event:?}");
}

/// SPEC O2: the leader's committed lease expiry is one `info` event per endpoint removed,
/// naming the endpoint by all six fields and the revision the removal committed at.
#[test]
fn a_committed_lease_expiry_logs_the_endpoint_by_its_six_fields_at_info() {
    let (mut registry, lease, registered_at) = registered();
    let expire = Command::ExpireLeases(ExpireLeases { leases: vec![lease] });
    let applied = registry.apply(&expire, &muster_testkit::meta()).unwrap();
    assert!(applied.revision > registered_at);
    let events = captured(|| duty_committed(Duty::LeaseKeeper, &applied));
    let expired: Vec<&Captured> = events
        .iter()
        .filter(|e| {
            e.fields
                .get("message")
                .is_some_and(|m| m.starts_with("endpoint expired"))
        })
        .collect();
    assert_eq!(expired.len(), 1, "{events:?}");
    assert_eq!(expired[0].level, tracing::Level::INFO);
    assert_endpoint_fields(expired[0], 7, applied.revision);
}

/// SPEC O2 on the apply path: a registration and a fenced re-registration by an older
/// incarnation are `debug` events with the six fields; the refusal names its code and the
/// revision the registry was at.
#[test]
fn applied_and_refused_endpoint_writes_carry_the_six_fields_at_debug() {
    let (mut registry, _, registered_at) = registered();
    let log = EndpointLog::default();
    let register = muster_testkit::register(&key(), "api-0", 0, 100, LeaseSpec::None);
    let meta = muster_testkit::meta();
    // Incarnation 1 after 7: fenced.
    let result = registry.apply(&register, &meta);
    assert!(result.is_err(), "{result:?}");
    let events = captured(|| {
        log.reset(&registry);
        log.judged(&Judged {
            replayed: false,
            log_index: 2,
            position: 0,
            origin: None,
            command: &register,
            meta: &meta,
            result: &result,
        });
    });
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].level, tracing::Level::DEBUG);
    assert_eq!(
        events[0].fields.get("code").map(String::as_str),
        Some("stale_incarnation")
    );
    assert_endpoint_fields(&events[0], 1, registered_at);

    // A newer incarnation replaces it: one `endpoint changed` at the new revision.
    let mut newer = register.clone();
    if let Command::Register(r) = &mut newer {
        r.target.incarnation = Incarnation(8);
    }
    let result = registry.apply(&newer, &meta);
    let revision = result.as_ref().unwrap().revision;
    let events = captured(|| {
        log.judged(&Judged {
            replayed: false,
            log_index: 3,
            position: 0,
            origin: None,
            command: &newer,
            meta: &meta,
            result: &result,
        });
    });
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0].fields.get("message").map(String::as_str),
        Some("endpoint changed")
    );
    assert_endpoint_fields(&events[0], 8, revision);
}
