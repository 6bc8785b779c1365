//! Human output on fixed data: aligned tables, one-line watch frames, write outcomes, and
//! the error → exit code mapping.

use std::sync::Arc;

use muster_cli::CliError;
use muster_cli::render::{eligible_only, frame_line, grant_text, resolve_text, services_text, utc, write_text};
use muster_cli::table::Table;
use muster_client::ClientError;
use muster_core::api::{
    ErrorBody, ErrorDetail, Frame, LeaseReply, ServiceSummary, ServicesReply, SnapshotReply, WriteReply,
};
use muster_core::{
    DeleteReason, Digest, Event, Incarnation, InstanceId, Label, LeaseId, NamespaceKey, Rejection, Revision,
    ServiceKey, ServiceSnapshot, ServiceUpdate, ServingState,
};

use crate::fixtures::endpoint;

fn key() -> ServiceKey {
    ServiceKey::new("default", "prod", "api").unwrap()
}

fn reply() -> SnapshotReply {
    SnapshotReply {
        revision: Revision(12),
        service_revision: Revision(11),
        digest: Digest(7),
        total: 3,
        endpoints: vec![
            endpoint("api-0", "10.0.0.1", ServingState::Ready, ""),
            endpoint("api-1", "10.0.0.2", ServingState::Draining, "deploy 42"),
            endpoint("api-2", "2001:db8::2", ServingState::Degraded, "slow disk"),
        ],
        next_page_token: None,
        protection_active: false,
        mirrors: Vec::new(),
        failover: None,
    }
}

#[test]
fn tables_align_columns_without_trailing_spaces() {
    let mut table = Table::new(["NAME", "N", "NOTE"]);
    table.row(["a", "1000", ""]);
    table.row(["longer-name", "2"]);
    assert_eq!(
        table.render(),
        "NAME         N     NOTE\n\
         a            1000\n\
         longer-name  2\n"
    );
}

#[test]
fn resolve_shows_only_eligible_endpoints_and_says_how_many_are_left_out() {
    let eligible = eligible_only(reply(), false);
    assert_eq!(eligible.endpoints.len(), 1);
    assert_eq!(eligible.total, 3, "total still describes the whole set");
    assert_eq!(
        resolve_text(&key(), &eligible, false),
        "INSTANCE  INCARNATION  ADDRESSES  PORTS      LOCALITY  WEIGHT  LEASE  REVISION\n\
         api-0     1            10.0.0.1   http:8080  a         100     3      5\n\
         default/prod/api: 1 eligible of 3 endpoints at revision 12\n"
    );
    assert_eq!(
        eligible_only(reply(), true).endpoints.len(),
        2,
        "degraded when asked for"
    );
}

#[test]
fn resolve_all_shows_every_state_and_who_set_it_why() {
    assert_eq!(
        resolve_text(&key(), &reply(), true),
        "INSTANCE  INCARNATION  STATE     ADDRESSES    PORTS      LOCALITY  WEIGHT  LEASE  REVISION  REASON\n\
         api-0     1            ready     10.0.0.1     http:8080  a         100     3      5         owner cli\n\
         api-1     1            draining  10.0.0.2     http:8080  a         100     3      5         owner cli: deploy 42\n\
         api-2     1            degraded  2001:db8::2  http:8080  a         100     3      5         owner cli: slow disk\n\
         default/prod/api: 3 endpoints at revision 12\n"
    );
}

#[test]
fn an_empty_set_is_an_answer_not_an_error() {
    let empty = SnapshotReply {
        endpoints: Vec::new(),
        total: 0,
        ..reply()
    };
    assert_eq!(
        resolve_text(&key(), &empty, false),
        "default/prod/api: 0 eligible of 0 endpoints at revision 12\n"
    );
}

#[test]
fn services_list_as_a_table() {
    let reply = ServicesReply {
        revision: Revision(9),
        services: vec![ServiceSummary {
            service: Label::new("service", "api").unwrap(),
            revision: Revision(8),
            digest: Digest(0xabc),
            endpoints: 2,
            protection_active: false,
        }],
    };
    let namespace = NamespaceKey::new("default", "prod").unwrap();
    assert_eq!(
        services_text(&namespace, &reply),
        "SERVICE  ENDPOINTS  REVISION  DIGEST\n\
         api      2          8         0000000000000abc\n\
         default/prod: 1 service at revision 9\n"
    );
}

#[test]
fn write_outcomes_name_the_revision_and_the_lease() {
    let mut reply = WriteReply {
        revision: Revision(4),
        lease: Some(LeaseReply {
            id: LeaseId(3),
            ttl_ms: 10_000,
            deadline_unix_ms: 1_796_018_639_599,
        }),
        unchanged: None,
    };
    assert_eq!(
        write_text("registered default/prod/api api-0 incarnation 1", &reply),
        "registered default/prod/api api-0 incarnation 1 at revision 4; \
         lease 3 (ttl 10s, expires 2026-11-30T06:03:59.599Z unless renewed)\n"
    );
    assert_eq!(
        grant_text(&reply),
        "granted lease 3 (ttl 10s, expires 2026-11-30T06:03:59.599Z unless renewed) at revision 4\n"
    );
    reply.lease = None;
    reply.unchanged = Some("drain_held".into());
    assert_eq!(
        write_text("set default/prod/api api-0 to ready", &reply),
        "set default/prod/api api-0 to ready: unchanged (drain_held: the drain holds; its owner \
         lifts it (an owner-role token, or --actor owner with auth off)) at revision 4\n",
        "a write that changed nothing says so, and why"
    );
}

#[test]
fn deadlines_print_as_utc_without_reading_a_clock() {
    for (ms, text) in [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_000_000, "1970-01-01T00:16:40.000Z"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        (4_102_444_799_999, "2099-12-31T23:59:59.999Z"),
    ] {
        assert_eq!(utc(ms), text);
    }
}

#[test]
fn watch_frames_print_as_one_line_each() {
    let update = Frame::Update(ServiceUpdate {
        key: key(),
        revision: Revision(14),
        prev_revision: Revision(12),
        digest: Digest(1),
        events: vec![
            Event::Put {
                endpoint: Arc::new(endpoint("api-1", "10.0.0.2", ServingState::Draining, "deploy 42")),
            },
            Event::Delete {
                instance: InstanceId::new("api-2").unwrap(),
                incarnation: Incarnation(1),
                reason: DeleteReason::LeaseExpired,
            },
        ],
    });
    assert_eq!(
        frame_line(&update),
        "rev 14 update default/prod/api (after 12): put api-1#1 draining [owner cli: deploy 42]; \
         delete api-2#1 lease_expired"
    );
    let snapshot = ServiceSnapshot::from_endpoints(key(), Revision(12), reply().endpoints.into_iter().map(Arc::new));
    assert_eq!(
        frame_line(&Frame::Snapshot {
            revision: Revision(13),
            snapshot,
        }),
        "rev 13 snapshot default/prod/api: 3 endpoints (service at revision 12): \
         api-0#1 ready, api-1#1 draining, api-2#1 degraded"
    );
    assert_eq!(
        frame_line(&Frame::Progress { revision: Revision(15) }),
        "rev 15 progress"
    );
}

#[test]
fn errors_map_to_their_code_and_exit_code() {
    let refused = CliError::from(ClientError::Api {
        status: 409,
        body: ErrorBody {
            error: ErrorDetail {
                code: "stale_incarnation".into(),
                message: "incarnation: ...".into(),
            },
        },
    });
    assert_eq!((refused.code(), refused.exit_code()), ("stale_incarnation", 1));

    let invalid = CliError::from(Rejection::InvalidName {
        field: "namespace".into(),
        reason: "bad".into(),
    });
    assert_eq!((invalid.code(), invalid.exit_code()), ("invalid_name", 2));

    let unreachable = CliError::from(ClientError::Connect {
        server: "http://127.0.0.1:1".into(),
        reason: "refused".into(),
        source: std::sync::Arc::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
    });
    assert_eq!((unreachable.code(), unreachable.exit_code()), ("cannot_connect", 3));

    let resync = CliError::Resync { revision: Revision(9) };
    assert_eq!((resync.code(), resync.exit_code()), ("resync", 4));
    assert_eq!(resync.to_body().error.code, "resync");

    // A bench whose flags make no run is a usage error; one whose system would not start
    // failed at run time, like `serve`.
    let no_system = CliError::from(muster_bench::BenchError::NoSystem);
    assert_eq!((no_system.code(), no_system.exit_code()), ("usage", 2));
    let spawn = CliError::from(muster_bench::BenchError::Spawn {
        what: "etcd",
        detail: "not on PATH".into(),
    });
    assert_eq!((spawn.code(), spawn.exit_code()), ("spawn_failed", 1));
}

/// A read of a federated region: the local set, then each mirrored set under its source
/// region, then where traffic goes and why (SPEC G1, G2).
#[test]
fn a_federated_resolve_names_each_mirrors_region_and_the_failover_decision() {
    use muster_core::federation::{
        Candidate, CandidateVerdict, FailoverDecision, FailoverReason, MirrorState, MirroredSet,
    };
    let region = |name: &str| Label::new("region", name).unwrap();
    let mut read = reply();
    read.mirrors = vec![MirroredSet {
        source_region: region("eu-west"),
        import: "prod/*".into(),
        source_revision: Revision(40),
        digest: Digest(9),
        cursor: Revision(41),
        age_ms: 1_200,
        state: MirrorState::Available,
        total: 2,
        eligible: 1,
        capacity: 100,
        endpoints: vec![
            endpoint("eu-0", "10.9.0.1", ServingState::Ready, ""),
            endpoint("eu-1", "10.9.0.2", ServingState::NotServing, "down"),
        ],
    }];
    read.failover = Some(FailoverDecision {
        spill: true,
        region: Some(region("eu-west")),
        share_percent: 50,
        reason: FailoverReason::LocalBelowMinimum,
        local_eligible: 1,
        local_total: 3,
        required: 2,
        spill_capacity: 150,
        candidates: vec![Candidate {
            region: region("eu-west"),
            verdict: CandidateVerdict::Admitted,
            capacity: 100,
        }],
    });
    let text = resolve_text(&key(), &eligible_only(read, false), false);
    assert!(
        text.contains("mirrored from region eu-west (prod/*): 1 endpoint of 2 at source revision 40, available"),
        "{text}"
    );
    assert!(
        text.contains("eu-0") && !text.contains("eu-1"),
        "only eligible mirrored endpoints: {text}"
    );
    assert!(
        text.contains("failover: 50% of traffic to region eu-west (local_below_minimum: 1 of 3 local eligible, 2 required; eu-west admitted (capacity 100))"),
        "{text}"
    );
}
