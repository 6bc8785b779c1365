use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use muster_core::convergence::{
    ChangeSummary, ConvergenceReply, DeliveryPath, LatencySummary as WireLatency, PathCount, Straggler,
};
use muster_core::{Revision, ServiceKey};

use super::*;

const NAME: &str = "conv-x.bench.muster.";

/// The listener's answer to query `id`: `rcode` with A records of `ips`.
fn answer(id: u16, rcode: ResponseCode, ips: &[Ipv4Addr]) -> Vec<u8> {
    let mut message = Message::response(id, OpCode::Query);
    message.metadata.response_code = rcode;
    let name = Name::from_ascii(NAME).unwrap();
    message.add_query(Query::query(name.clone(), RecordType::A));
    for ip in ips {
        message.add_answer(Record::from_rdata(name.clone(), 5, RData::A(A(*ip))));
    }
    message.to_vec().unwrap()
}

#[test]
fn the_probe_asks_for_the_services_a_records_under_its_namespace_and_domain() {
    assert_eq!(dns_name("conv-x", "bench", "muster."), NAME);
    assert_eq!(dns_name("conv-x", "bench", "muster"), NAME, "a domain without its dot");
    let query = Message::from_vec(&dns_query(0x1234, NAME).unwrap()).unwrap();
    assert_eq!(query.metadata.id, 0x1234);
    assert_eq!(query.metadata.message_type, MessageType::Query);
    assert_eq!(query.queries.len(), 1);
    assert_eq!(query.queries[0].name().to_ascii(), NAME);
    assert_eq!(query.queries[0].query_type(), RecordType::A);
    assert!(matches!(dns_query(1, "bad..name"), Err(DnsProbeError::Query { .. })));
}

#[test]
fn each_change_gets_a_new_ip_and_only_that_ip_in_an_answer_counts() {
    assert_eq!(change_ip(0), Ipv4Addr::new(10, 77, 0, 0));
    assert_eq!(change_ip(16), Ipv4Addr::new(10, 77, 0, 16));
    assert_eq!(change_ip(257), Ipv4Addr::new(10, 77, 1, 1));
    let old = [change_ip(0), change_ip(1)];
    let packet = answer(7, ResponseCode::NoError, &old);
    assert_eq!(answer_holds(&packet, 7, change_ip(1)), Ok(true));
    assert_eq!(
        answer_holds(&packet, 7, change_ip(2)),
        Ok(false),
        "the change not yet folded in"
    );
    // A service the listener does not know yet, or one with nothing eligible.
    assert_eq!(
        answer_holds(&answer(8, ResponseCode::NXDomain, &[]), 8, change_ip(1)),
        Ok(false)
    );
    assert_eq!(
        answer_holds(&answer(9, ResponseCode::NoError, &[]), 9, change_ip(1)),
        Ok(false)
    );
}

#[test]
fn a_late_answer_to_an_earlier_query_is_told_apart_from_a_broken_one() {
    let late = answer(6, ResponseCode::NoError, &[change_ip(1)]);
    assert_eq!(
        answer_holds(&late, 7, change_ip(1)),
        Err(DnsProbeError::OtherId { expected: 7, got: 6 })
    );
    let query = dns_query(7, NAME).unwrap();
    assert!(
        matches!(
            answer_holds(&query, 7, change_ip(1)),
            Err(DnsProbeError::OtherId { .. })
        ),
        "our own query is not an answer"
    );
    assert!(matches!(
        answer_holds(&answer(7, ResponseCode::Refused, &[]), 7, change_ip(1)),
        Err(DnsProbeError::Rcode(_))
    ));
    assert!(matches!(
        answer_holds(&[0x12, 0x34, 0x81], 7, change_ip(1)),
        Err(DnsProbeError::Undecodable(_))
    ));
}

fn straggler(i: usize) -> Straggler {
    Straggler {
        client_id: format!("bench-{i}"),
        cohort: Some("zone=a".to_owned()),
        path: DeliveryPath::Watch,
        revision: Revision(10),
        behind_ms: 900,
        last_report_ms: 100,
    }
}

/// The server's summary at revision 12 after changes 11 and 12: 1,001 live (1,000 watch
/// clients and one xDS client; the DNS listener is shown by its path only), 988 applied, 13
/// stragglers.
fn reply() -> ConvergenceReply {
    let change = |revision, applied, p50_ms, p99_ms| ChangeSummary {
        revision: Revision(revision),
        committed_unix_ms: 1_000,
        applied,
        p50_ms,
        p99_ms,
    };
    ConvergenceReply {
        service: ServiceKey::new("default", "bench", "conv-x").unwrap(),
        revision: Revision(12),
        target: Revision(12),
        cohort: None,
        fraction: 1.0,
        live: 1_001,
        applied: 988,
        needed: 1_001,
        converged: false,
        cohorts: Vec::new(),
        paths: vec![
            PathCount {
                path: DeliveryPath::Dns,
                live: 1,
                applied: 1,
            },
            PathCount {
                path: DeliveryPath::Watch,
                live: 1_000,
                applied: 987,
            },
            PathCount {
                path: DeliveryPath::Xds,
                live: 1,
                applied: 1,
            },
        ],
        by_revision: Vec::new(),
        latency: WireLatency {
            samples: 1_989,
            p50_ms: 3,
            p90_ms: 7,
            p99_ms: 21,
            p999_ms: 40,
            max_ms: 55,
            buckets: Vec::new(),
        },
        changes: vec![change(12, 988, 4, 30), change(11, 1_001, 2, 12)],
        stragglers: (0..13).map(straggler).collect(),
        stragglers_total: 13,
        silent: Vec::new(),
        silent_total: 2,
        silent_after_ms: 30_000,
        unix_ms: 2_000,
    }
}

fn fleet() -> FleetFigures {
    FleetFigures {
        service: "default/bench/conv-x".to_owned(),
        watchers: 1_000,
        opened: 1_000,
        open_s: 2.5,
        live_before: 1_000,
        descriptor_limit: Some(21_024),
        changes_asked: 20,
    }
}

fn probe(revision: u64, dns_ms: Option<f64>, all_applied_ms: Option<f64>) -> ChangeProbe {
    ChangeProbe {
        revision,
        reply_ms: 1.5,
        dns_ms,
        all_applied_ms,
    }
}

#[test]
fn the_summary_takes_the_servers_latency_and_counts_and_joins_each_change_by_revision() {
    let probes = [probe(11, Some(0.2), Some(300.0)), probe(12, Some(0.4), None)];
    let summary = ConvergenceSummary::new(fleet(), &probes, &reply(), None, Some(1.25));
    assert_eq!(
        summary.applied,
        AppliedLatency {
            samples: 1_989,
            p50_ms: 3,
            p90_ms: 7,
            p99_ms: 21,
            p999_ms: 40,
            max_ms: 55,
        }
    );
    assert_eq!((summary.live, summary.applied_subscribers), (1_001, 988));
    assert!(!summary.converged);
    assert_eq!(summary.stragglers_total, 13);
    assert_eq!(summary.stragglers.len(), 10, "the first ten are named");
    assert_eq!(summary.stragglers[0], "bench-0@10, behind 900 ms");
    assert_eq!(summary.silent_total, 2);
    assert_eq!(summary.changes_not_converged, 1);
    assert_eq!(summary.dns_missed, 0);
    assert_eq!(summary.load_average_at_end, Some(1.25));
    let first = &summary.changes[0];
    assert_eq!(
        (first.revision, first.applied, first.p50_ms, first.p99_ms),
        (11, Some(1_001), Some(2), Some(12))
    );
    assert_eq!(summary.changes[1].applied, Some(988));
    let dns = summary.dns.unwrap();
    assert!((0.35..=0.45).contains(&dns.max_ms), "{dns:?}");
}

#[test]
fn a_change_the_ledger_no_longer_keeps_has_no_server_figures_and_a_missing_dns_answer_counts() {
    let probes = [probe(5, None, Some(10.0))];
    let summary = ConvergenceSummary::new(fleet(), &probes, &reply(), None, None);
    assert_eq!(summary.changes[0].applied, None);
    assert_eq!(summary.dns_missed, 1);
    assert_eq!(summary.dns, None);
    // Without a probe, nothing is missed: the reason is given instead.
    let skipped = ConvergenceSummary::new(fleet(), &probes, &reply(), Some("no DNS".to_owned()), None);
    assert_eq!(
        (skipped.dns_missed, skipped.dns_skipped.as_deref()),
        (0, Some("no DNS"))
    );
}

#[test]
fn the_fleet_is_live_when_its_watch_subscribers_are_and_converged_when_every_live_one_applied() {
    let mut reply = reply();
    assert_eq!(live_watchers(&reply), 1_000, "the DNS listener is not a watcher");
    assert!(!all_applied(&reply));
    reply.applied = reply.live;
    assert!(all_applied(&reply));
    reply.live = 0;
    reply.applied = 0;
    assert!(!all_applied(&reply), "nobody live is not converged");
    reply.paths.clear();
    assert_eq!(live_watchers(&reply), 0);
}

#[test]
fn the_report_renders_the_convergence_figures_in_the_table_and_json() {
    use crate::report::{Report, System, SystemResult, WorkloadReport};
    use crate::{BenchArgs, Workload};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }
    let plan = Cli::try_parse_from(["bench", "--spawn", "--workloads", "convergence"])
        .unwrap()
        .bench
        .plan()
        .unwrap();
    let mut result = SystemResult::from_requests(
        System::Muster,
        2,
        1,
        std::time::Duration::from_secs(1),
        &Histogram::new(),
    );
    let probes = [probe(11, Some(0.2), Some(300.0)), probe(12, Some(0.4), None)];
    result.convergence = Some(ConvergenceSummary::new(fleet(), &probes, &reply(), None, Some(1.25)));
    let workload = WorkloadReport::new(Workload::Convergence, vec![result], vec!["etcd: none".to_owned()]);
    assert_eq!(workload.target_met, None, "reported, no target");
    let report = Report {
        plan,
        systems: Vec::new(),
        cpus: 2,
        load_average_at_start: Some(0.5),
        workloads: vec![workload],
    };
    let table = report.render_table();
    assert!(
        table.contains("p50 3 ms, p90 7 ms, p99 21 ms, p999 40 ms, max 55 ms"),
        "{table}"
    );
    assert!(
        table.contains("1,001 live, 988 applied (not converged), 13 stragglers"),
        "{table}"
    );
    assert!(table.contains("load average 1.25 at the end"), "{table}");
    assert!(
        table.contains("revision 12: reply 1.50 ms, DNS 400 µs, all applied (polled) no"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&report.render_json()).unwrap();
    let figures = &json["workloads"][0]["results"][0]["convergence"];
    assert_eq!(figures["applied"]["p999_ms"], 40);
    assert_eq!(figures["stragglers_total"], 13);
    assert_eq!(figures["changes"][1]["dns_ms"], 0.4);
    assert_eq!(json["workloads"][0]["workload"], "convergence");
}

#[test]
fn a_client_costs_two_descriptors_on_each_side_and_the_limit_says_how_many_fit() {
    use super::fleet::{clients_within, descriptors_wanted};
    assert_eq!(
        descriptors_wanted(10_000),
        21_024,
        "a watch and a report connection each, and slack"
    );
    // This machine's hard limit of 20,000 holds fewer than 10,000 clients.
    assert_eq!(clients_within(20_000), 9_488);
    assert_eq!(clients_within(descriptors_wanted(9_488)), 9_488);
    assert_eq!(clients_within(100), 0);
}
