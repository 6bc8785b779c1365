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
        count: None,
        last_at_ms: None,
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
    let log = AuditLog::new(100, 100, EPOCH);
    log.push(mutation(10, "deployer", "acme/prod/api", "applied")); // 1
    log.push(mutation(20, "deployer", "acme/prod/web", "refused:stale_incarnation")); // 2
    log.push(mutation(30, "ci", "acme/staging/api", "unchanged:already_committed")); // 3
    log.push(mutation(40, "ci", "globex/prod/api", "applied")); // 4
    log.push(mutation(50, "deployer", "acme/production/api", "applied")); // 5
    log
}

#[test]
fn the_ring_keeps_the_newest_records_up_to_its_retention_and_counts_the_dropped() {
    let log = AuditLog::new(3, 3, EPOCH);
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
    let log = AuditLog::new(1000, 1000, EPOCH);
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
    let log = AuditLog::new(10, 10, EPOCH);
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

/// A denial of `principal` (none: unauthenticated) from `source` at `at_ms`.
fn denial(source: &str, principal: Option<&str>, reason: &str, at_ms: u64) -> Denial {
    Denial {
        principal: principal.map(|p| muster_core::Principal::new(p).unwrap()),
        tenant: None,
        key: None,
        verb: "authenticate".into(),
        resource: "/v1/registry/acme/prod/api".into(),
        code: ErrorCode::Unauthenticated,
        reason: reason.into(),
        source: Some(source.parse().unwrap()),
        at_ms,
    }
}

fn everything(log: &AuditLog) -> muster_core::api::AuditReply {
    let parsed = Parsed::new(&AuditQuery::default(), None).unwrap();
    log.page(&parsed.filter, None, MAX_LIMIT).unwrap()
}

/// Trace: 60 requests with made-up tokens evicted every mutation from a shared ring (SPEC S8).
#[test]
fn no_number_of_denials_evicts_a_mutation() {
    let log = AuditLog::new(3, 5, EPOCH);
    log.push(mutation(1, "deployer", "acme/prod/api", "applied"));
    log.push(mutation(2, "deployer", "acme/prod/web", "applied"));
    // Every denial from another address: none is counted into another.
    for n in 0..1000u32 {
        let [_, _, a, b] = n.to_be_bytes();
        log.denied(denial(
            &format!("10.0.{a}.{b}:4000"),
            None,
            "unknown or revoked token",
            10,
        ));
    }
    let reply = everything(&log);
    let mutations: Vec<u64> = reply
        .records
        .iter()
        .filter(|r| r.kind == AuditKind::Mutation)
        .map(|r| r.at_ms)
        .collect();
    assert_eq!(mutations, [2, 1]);
    assert_eq!(reply.records.len(), 2 + 5);
    assert_eq!((reply.retention, reply.evicted), (3, 0));
    assert_eq!((reply.denial_retention, reply.denials_evicted), (5, 995));
    // And mutations still evict mutations only.
    for at in 3..=6 {
        log.push(mutation(at, "deployer", "acme/prod/api", "applied"));
    }
    let reply = everything(&log);
    assert_eq!((reply.evicted, reply.denials_evicted), (3, 995));
    assert_eq!(reply.records.iter().filter(|r| r.kind == AuditKind::Denial).count(), 5);
}

#[test]
fn pages_merge_mutations_and_denials_by_seq_newest_first_across_both_rings() {
    let log = AuditLog::new(2, 100, EPOCH);
    log.push(mutation(1, "p", "acme/prod/api", "applied")); // 1, evicted below
    log.denied(denial("10.0.0.1:1", None, "a", 2)); // 2
    log.denied(denial("10.0.0.2:1", None, "a", 3)); // 3
    log.push(mutation(4, "p", "acme/prod/api", "applied")); // 4
    log.denied(denial("10.0.0.3:1", None, "a", 5)); // 5
    log.push(mutation(6, "p", "acme/prod/api", "applied")); // 6
    log.denied(denial("10.0.0.4:1", None, "a", 7)); // 7
    let query = AuditQuery {
        limit: Some(2),
        ..AuditQuery::default()
    };
    assert_eq!(pages(&log, &query), [vec![7, 6], vec![5, 4], vec![3, 2]]);
    // A filter of one kind pages through its ring alone, the cursor still by seq.
    let denied = AuditQuery {
        outcome: Some("denied".into()),
        limit: Some(3),
        ..AuditQuery::default()
    };
    assert_eq!(pages(&log, &denied), [vec![7, 5, 3], vec![2]]);
    let applied = AuditQuery {
        outcome: Some("applied".into()),
        limit: Some(1),
        ..AuditQuery::default()
    };
    assert_eq!(pages(&log, &applied), [vec![6], vec![4]]);
    // A cursor beyond the last number given out, or from another log, is still refused.
    let parsed = Parsed::new(&AuditQuery::default(), None).unwrap();
    let beyond = Cursor {
        epoch: EPOCH,
        before: 9,
    };
    assert_eq!(log.page(&parsed.filter, Some(beyond), 10), Err(StaleCursor));
    let current = Cursor {
        epoch: EPOCH,
        before: 8,
    };
    assert_eq!(log.page(&parsed.filter, Some(current), 10).unwrap().records.len(), 6);
}

#[test]
fn a_flood_from_one_address_is_one_record_per_interval_with_its_count_whatever_the_port() {
    use crate::audit::aggregate::DENIAL_INTERVAL_MS;
    let log = AuditLog::new(10, 10, EPOCH);
    let start = 1_000_000;
    // 120 requests with made-up tokens, each on a new connection, within one interval.
    for n in 0..120 {
        let at = start + n * (DENIAL_INTERVAL_MS - 1) / 119;
        log.denied(denial(
            &format!("10.9.8.7:{}", 40_000 + n),
            None,
            "unknown or revoked token",
            at,
        ));
    }
    let reply = everything(&log);
    assert_eq!(reply.records.len(), 1, "{:?}", reply.records);
    let record = &reply.records[0];
    assert_eq!(record.count, Some(120));
    assert_eq!(record.at_ms, start);
    assert_eq!(record.last_at_ms, Some(start + DENIAL_INTERVAL_MS - 1));
    assert_eq!(
        record.source.as_deref(),
        Some("10.9.8.7:40000"),
        "the first request's address"
    );
    // The interval is over: the next denial is a record of its own, at once.
    log.denied(denial(
        "10.9.8.7:50000",
        None,
        "unknown or revoked token",
        start + DENIAL_INTERVAL_MS,
    ));
    let reply = everything(&log);
    let counts: Vec<(u64, Option<u64>)> = reply.records.iter().map(|r| (r.seq, r.count)).collect();
    assert_eq!(counts, [(2, Some(1)), (1, Some(120))]);
    // The counts sum to the requests refused.
    let total: u64 = reply.records.iter().filter_map(|r| r.count).sum();
    assert_eq!(total, 121);
}

#[test]
fn denials_differing_in_address_principal_code_reason_tenant_or_verb_are_each_recorded_at_once() {
    let log = AuditLog::new(10, 100, EPOCH);
    let base = || denial("10.0.0.1:1", Some("token:a"), "no rule of the token allows it", 5);
    log.denied(base());
    log.denied(Denial {
        source: Some("10.0.0.2:1".parse().unwrap()),
        ..base()
    });
    log.denied(Denial {
        principal: Some(muster_core::Principal::new("token:b").unwrap()),
        ..base()
    });
    log.denied(Denial {
        code: ErrorCode::PermissionDenied,
        ..base()
    });
    log.denied(Denial {
        reason: "denied by the rule 'prod/*'".into(),
        ..base()
    });
    log.denied(Denial {
        tenant: Some(Label::new("tenant", "globex").unwrap()),
        ..base()
    });
    log.denied(Denial {
        verb: "admin".into(),
        ..base()
    });
    // The same as the first, from another port and with another resource: counted into it.
    log.denied(Denial {
        source: Some("10.0.0.1:2".parse().unwrap()),
        resource: "/v1/audit".into(),
        ..base()
    });
    let reply = everything(&log);
    assert_eq!(reply.records.len(), 7);
    let counts: Vec<Option<u64>> = reply.records.iter().map(|r| r.count).collect();
    assert_eq!(counts, [Some(1), Some(1), Some(1), Some(1), Some(1), Some(1), Some(2)]);
}

#[test]
fn the_index_of_open_records_is_bounded_by_the_denials_retention() {
    let log = AuditLog::new(10, 8, EPOCH);
    for n in 0..500u32 {
        log.denied(denial("10.0.0.1:1", Some(&format!("token:{n}")), "r", 1));
        assert!(log.open_aggregates() <= 8, "{} after {n}", log.open_aggregates());
    }
    // A key whose record was evicted gets a new record, within the interval or not.
    log.denied(denial("10.0.0.1:1", Some("token:0"), "r", 2));
    let reply = everything(&log);
    assert_eq!(reply.records[0].principal.as_deref(), Some("token:0"));
    assert_eq!(reply.records[0].count, Some(1));
    assert_eq!(reply.records.len(), 8);
}

#[test]
fn counting_into_an_older_record_does_not_move_it_or_shift_the_pages_begun() {
    let log = AuditLog::new(10, 10, EPOCH);
    log.denied(denial("10.0.0.1:1", None, "flood", 1)); // 1
    log.push(mutation(2, "p", "acme/prod/api", "applied")); // 2
    log.push(mutation(3, "p", "acme/prod/api", "applied")); // 3
    let parsed = Parsed::new(&AuditQuery::default(), None).unwrap();
    let first = log.page(&parsed.filter, None, 2).unwrap();
    assert_eq!(first.records.iter().map(|r| r.seq).collect::<Vec<_>>(), [3, 2]);
    log.denied(denial("10.0.0.1:2", None, "flood", 4));
    let cursor = Cursor::decode(first.next_cursor.as_deref().unwrap());
    let second = log.page(&parsed.filter, cursor, 2).unwrap();
    assert_eq!(second.records.len(), 1);
    assert_eq!((second.records[0].seq, second.records[0].count), (1, Some(2)));
    assert_eq!(second.records[0].last_at_ms, Some(4));
    // A record still counting matches a since_ms after its first denial.
    let since = Parsed::new(
        &AuditQuery {
            since_ms: Some(4),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let later = log.page(&since.filter, None, 10).unwrap();
    assert_eq!(later.records.iter().map(|r| r.seq).collect::<Vec<_>>(), [1]);
}

#[test]
fn a_denials_reason_and_resource_are_cut_to_a_bound() {
    let log = AuditLog::new(10, 10, EPOCH);
    log.denied(Denial {
        reason: format!("Origin '{}' is not allowed", "é".repeat(10_000)),
        resource: format!("GET /{}", "a".repeat(100_000)),
        ..denial("10.0.0.1:1", None, "", 1)
    });
    let record = everything(&log).records.remove(0);
    let (reason, resource) = (record.reason.unwrap(), record.resource.unwrap());
    assert!(reason.len() <= 512 && reason.ends_with('…'), "{}", reason.len());
    assert!(
        resource.len() <= 512 && resource.starts_with("GET /aaa"),
        "{}",
        resource.len()
    );
}
