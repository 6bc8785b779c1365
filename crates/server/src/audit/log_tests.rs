//! The audit ring and its queries on fixed records: retention, filters, paging, cursors,
//! tenant scope.

use muster_core::api::{AuditKind, AuditQuery, AuditRecord};
use muster_core::{ErrorCode, Label, ServiceKey};

use crate::audit::filter::{Cursor, MAX_LIMIT, Parsed, QueryError};
use crate::audit::log::{AuditLog, Denial, StaleCursor};

const EPOCH: u64 = 77;

fn mutation(at_ms: u64, principal: &str, key: &str, outcome: &str) -> AuditRecord {
    AuditRecord {
        seq: 0,
        at_ms,
        kind: AuditKind::Mutation,
        principal: Some(principal.to_owned()),
        actor: Some(muster_core::Actor::App),
        verb: "register".into(),
        tenant: Some(Label::new("tenant", key.split('/').next().unwrap()).unwrap()),
        key: Some(key.to_owned()),
        instance: None,
        incarnation: None,
        lease: None,
        accessor: None,
        revision: None,
        outcome: outcome.to_owned(),
        reason: None,
        resource: None,
        source: None,
        log_index: Some(at_ms),
        origin: Some(1),
    }
}

/// Pages `query` from `log` to the end, returning every page's seqs.
fn pages(log: &AuditLog, query: &AuditQuery) -> Vec<Vec<u64>> {
    let mut query = query.clone();
    let mut pages = Vec::new();
    loop {
        let parsed = Parsed::new(&query, None).unwrap();
        let page = log.page(&parsed.filter, parsed.cursor, parsed.limit).unwrap();
        pages.push(page.records.iter().map(|r| r.seq).collect());
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => return pages,
        }
    }
}

fn seqs(log: &AuditLog, query: &AuditQuery) -> Vec<u64> {
    pages(log, query).concat()
}

fn filled() -> AuditLog {
    let log = AuditLog::new(100, EPOCH);
    log.push(mutation(10, "deployer", "acme/prod/api", "applied")); // 1
    log.push(mutation(20, "deployer", "acme/prod/web", "refused:stale_incarnation")); // 2
    log.push(mutation(30, "ci", "acme/staging/api", "unchanged:already_committed")); // 3
    log.push(mutation(40, "ci", "globex/prod/api", "applied")); // 4
    log.push(mutation(50, "deployer", "acme/production/api", "applied")); // 5
    log
}

#[test]
fn the_ring_keeps_the_newest_records_up_to_its_retention_and_counts_the_dropped() {
    let log = AuditLog::new(3, EPOCH);
    for at in 1..=5 {
        log.push(mutation(at, "p", "acme/prod/api", "applied"));
    }
    let parsed = Parsed::new(&AuditQuery::default(), None).unwrap();
    let page = log.page(&parsed.filter, None, 10).unwrap();
    assert_eq!(
        page.records.iter().map(|r| (r.seq, r.at_ms)).collect::<Vec<_>>(),
        [(5, 5), (4, 4), (3, 3)]
    );
    assert_eq!((page.retention, page.evicted), (3, 2));
}

#[test]
fn pages_come_newest_first_and_the_cursor_continues_with_older_records_to_the_end() {
    let log = filled();
    let query = AuditQuery {
        limit: Some(2),
        ..AuditQuery::default()
    };
    assert_eq!(pages(&log, &query), [vec![5, 4], vec![3, 2], vec![1]]);
    // Exactly `limit` left: the last full page offers no cursor to an empty one.
    let four = AuditQuery {
        limit: Some(5),
        ..AuditQuery::default()
    };
    assert_eq!(pages(&log, &four), [vec![5, 4, 3, 2, 1]]);
}

#[test]
fn records_pushed_while_paging_do_not_shift_the_pages_already_begun() {
    let log = filled();
    let parsed = Parsed::new(&AuditQuery::default(), None).unwrap();
    let first = log.page(&parsed.filter, None, 2).unwrap();
    log.push(mutation(60, "late", "acme/prod/api", "applied"));
    let cursor = Cursor::decode(first.next_cursor.as_deref().unwrap());
    let second = log.page(&parsed.filter, cursor, 2).unwrap();
    assert_eq!(second.records.iter().map(|r| r.seq).collect::<Vec<_>>(), [3, 2]);
}

#[test]
fn each_filter_narrows_the_records_and_all_of_them_must_match() {
    let log = filled();
    let query = |q: AuditQuery| seqs(&log, &q);
    let text = |s: &str| Some(s.to_owned());
    assert_eq!(
        query(AuditQuery {
            tenant: text("acme"),
            ..Default::default()
        }),
        [5, 3, 2, 1]
    );
    assert_eq!(
        query(AuditQuery {
            principal: text("ci"),
            ..Default::default()
        }),
        [4, 3]
    );
    assert_eq!(
        query(AuditQuery {
            key: text("acme/prod/api"),
            ..Default::default()
        }),
        [1]
    );
    // A namespace matches its own services, not a namespace its name is a prefix of.
    assert_eq!(
        query(AuditQuery {
            key: text("acme/prod"),
            ..Default::default()
        }),
        [2, 1]
    );
    assert_eq!(
        query(AuditQuery {
            outcome: text("applied"),
            ..Default::default()
        }),
        [5, 4, 1]
    );
    assert_eq!(
        query(AuditQuery {
            outcome: text("refused"),
            ..Default::default()
        }),
        [2]
    );
    assert_eq!(
        query(AuditQuery {
            outcome: text("unchanged:already_committed"),
            ..Default::default()
        }),
        [3]
    );
    assert_eq!(
        query(AuditQuery {
            outcome: text("refused:not_found"),
            ..Default::default()
        }),
        Vec::<u64>::new()
    );
    // since is inclusive, until exclusive.
    assert_eq!(
        query(AuditQuery {
            since_ms: Some(20),
            until_ms: Some(40),
            ..Default::default()
        }),
        [3, 2]
    );
    assert_eq!(
        query(AuditQuery {
            tenant: text("acme"),
            principal: text("deployer"),
            since_ms: Some(15),
            ..Default::default()
        }),
        [5, 2]
    );
}

#[test]
fn a_filtered_page_skips_what_does_not_match_and_still_pages_to_the_end() {
    let log = AuditLog::new(1000, EPOCH);
    for at in 1..=50 {
        let principal = if at % 10 == 0 { "rare" } else { "common" };
        log.push(mutation(at, principal, "acme/prod/api", "applied"));
    }
    let query = AuditQuery {
        principal: Some("rare".into()),
        limit: Some(2),
        ..AuditQuery::default()
    };
    assert_eq!(pages(&log, &query), [vec![50, 40], vec![30, 20], vec![10]]);
}

#[test]
fn a_denial_is_recorded_with_its_source_code_and_reason() {
    let log = AuditLog::new(10, EPOCH);
    log.denied(Denial {
        principal: None,
        tenant: None,
        key: Some(ServiceKey::new("acme", "prod", "api").unwrap()),
        verb: "register".into(),
        resource: "PUT /v1/registry/acme/prod/api/api-0".into(),
        code: ErrorCode::PermissionDenied,
        reason: "no rule allows it".into(),
        source: Some("10.1.2.3:5555".parse().unwrap()),
        at_ms: 99,
    });
    let parsed = Parsed::new(
        &AuditQuery {
            outcome: Some("denied".into()),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let record = log.page(&parsed.filter, None, 10).unwrap().records.remove(0);
    assert_eq!(record.kind, AuditKind::Denial);
    assert_eq!(record.outcome, "denied:permission_denied");
    assert_eq!(record.source.as_deref(), Some("10.1.2.3:5555"));
    assert_eq!(
        record.tenant.as_ref().map(Label::as_str),
        Some("acme"),
        "the key's tenant"
    );
    assert_eq!(record.key.as_deref(), Some("acme/prod/api"));
    assert_eq!(record.reason.as_deref(), Some("no rule allows it"));
    assert_eq!((record.at_ms, record.principal), (99, None));
}

#[test]
fn a_cursor_from_another_start_or_node_is_refused() {
    let log = filled();
    let parsed = Parsed::new(&AuditQuery::default(), None).unwrap();
    let foreign = Cursor {
        epoch: EPOCH + 1,
        before: 3,
    };
    assert_eq!(log.page(&parsed.filter, Some(foreign), 10), Err(StaleCursor));
    let beyond = Cursor {
        epoch: EPOCH,
        before: 99,
    };
    assert_eq!(log.page(&parsed.filter, Some(beyond), 10), Err(StaleCursor));
    // A cursor below everything still held is the end, not an error.
    let old = Cursor {
        epoch: EPOCH,
        before: 1,
    };
    assert!(log.page(&parsed.filter, Some(old), 10).unwrap().records.is_empty());
}

#[test]
fn malformed_parameters_are_refused_naming_the_parameter() {
    for (query, parameter) in [
        (
            AuditQuery {
                tenant: Some("Acme".into()),
                ..Default::default()
            },
            "tenant",
        ),
        (
            AuditQuery {
                key: Some("acme".into()),
                ..Default::default()
            },
            "key",
        ),
        (
            AuditQuery {
                key: Some("acme/prod/api/x".into()),
                ..Default::default()
            },
            "key",
        ),
        (
            AuditQuery {
                key: Some("acme/Prod".into()),
                ..Default::default()
            },
            "key",
        ),
        (
            AuditQuery {
                outcome: Some("refused:".into()),
                ..Default::default()
            },
            "outcome",
        ),
        (
            AuditQuery {
                outcome: Some("ok".into()),
                ..Default::default()
            },
            "outcome",
        ),
        (
            AuditQuery {
                limit: Some(0),
                ..Default::default()
            },
            "limit",
        ),
        (
            AuditQuery {
                cursor: Some("12".into()),
                ..Default::default()
            },
            "cursor",
        ),
        (
            AuditQuery {
                since_ms: Some(5),
                until_ms: Some(5),
                ..Default::default()
            },
            "until_ms",
        ),
    ] {
        match Parsed::new(&query, None) {
            Err(QueryError::Malformed(message)) => assert!(message.starts_with(parameter), "{message}"),
            other => panic!("{query:?} gave {other:?}"),
        }
    }
    let huge = Parsed::new(
        &AuditQuery {
            limit: Some(1 << 20),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    assert_eq!(huge.limit, MAX_LIMIT);
}

#[test]
fn a_tenant_scope_lists_only_its_tenant_and_refuses_another_tenants_records() {
    let log = filled();
    let acme = Label::new("tenant", "acme").unwrap();
    let parsed = Parsed::new(&AuditQuery::default(), Some(&acme)).unwrap();
    let page = log.page(&parsed.filter, None, 100).unwrap();
    assert_eq!(page.records.iter().map(|r| r.seq).collect::<Vec<_>>(), [5, 3, 2, 1]);
    for query in [
        AuditQuery {
            tenant: Some("globex".into()),
            ..Default::default()
        },
        AuditQuery {
            key: Some("globex/prod".into()),
            ..Default::default()
        },
    ] {
        assert!(
            matches!(Parsed::new(&query, Some(&acme)), Err(QueryError::OtherTenant(_))),
            "{query:?}"
        );
    }
    assert!(
        Parsed::new(
            &AuditQuery {
                key: Some("acme/prod".into()),
                ..Default::default()
            },
            Some(&acme)
        )
        .is_ok()
    );
}

#[test]
fn cursors_round_trip_and_foreign_text_is_not_one() {
    let cursor = Cursor { epoch: 123, before: 45 };
    assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
    for bad in ["", "1", ".1", "1.", "a.1", "1.-2", "1.2.3", "99999999999999999999.1"] {
        assert_eq!(Cursor::decode(bad), None, "{bad:?}");
    }
}
