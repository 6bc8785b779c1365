//! The load driver behind `muster bench` (SPEC D1, U1, "Performance"): the same workloads
//! against Muster and etcd 3.4 (through its `/v3` JSON gateway), one system at a time, with
//! a report of throughput, p50/p99, the Muster/etcd ratio and the issue's targets. Targets
//! are reported, never asserted.
//!
//! # Layout
//! ```text
//!  args (BenchArgs → Plan) ──▶ run ──▶ spawn (muster serve / etcd, free loopback ports)
//!                               │
//!                               ├─▶ workloads: register, renew, read ──▶ driver (closed loop)
//!                               │       requests (paths, bodies: pure) ── client (hyper-util)
//!                               ├─▶ watch: N streams ──▶ watchers (RSS ÷ N), fanout (latency)
//!                               └─▶ report (pure: Histogram → SystemResult → Report)
//! ```
//! The pure core (histogram, report math, request bodies, codecs, flag resolution) is unit
//! tested; the I/O shells (client, driver, watch, spawn) are thin.
//!
//! # Workloads
//! - `register`: `PUT /v1/registry/...` of new instances over `--services` services, no
//!   lease, vs etcd `kv/put` of the same record under new keys.
//! - `renew`: `PUT /v1/leases/{tenant}/{id}/renew` round-robin over `--leases` leases, vs one
//!   `lease/keepalive` stream message per request (the gateway's way of calling a stream RPC).
//! - `read`: `GET /v1/registry/...` of a 5-endpoint service, vs a `kv/range` over 5 keys.
//! - `fanout`: `--watchers` streams of one service, then `--changes` writes one at a time;
//!   latency from sending the write to each watcher receiving the update of its revision.
//! - `watchers`: server RSS growth (`/proc/PID/status` VmRSS) with those streams open, ÷ N.
//! - `handshake` (with `--tls`): new TLS connections per second, each a full handshake and
//!   one request, against the TLS server; `--tls` also runs every other workload against it
//!   (`muster+tls+auth`: TLS and authentication on, a bootstrapped token, keep-alive), right after the plain server, for a same-run comparison.
//! - `consul` (opt-in): one blocking query per service on the Consul-compatible API over
//!   `--consul-services` services, one change per second: wake-ups per change against
//!   Consul's wake-every-waiter model, and server CPU (see the `consul` module). Muster only.
//! - `xds` (opt-in, feature `xds`): `--xds-streams` ADS streams of one service's EDS, one
//!   HTTP/2 connection each, then `--changes` endpoint changes: commit-to-push per stream,
//!   commit-to-ACK from the server's ledger (`GET /v1/xds/clients`), and server memory per
//!   idle stream (see the `xds` module). Muster only.
//! - `checks` (opt-in): `--checks` endpoints with HTTP checks at 10 s against a target in
//!   this process: probes per second and server CPU, then detection latency per check kind
//!   against its bound (see the `checks` module). Muster only.
//! - `convergence` (opt-in): `--watchers` real muster-client `Resolver`s of one service in
//!   tenant `default` (the DNS listener's), each with its own `Client` (client id `bench-i`,
//!   cohorts `zone=a`/`zone=b` alternating, a watch and a report connection each), then
//!   `--changes` new endpoints one at a time, capped at 16 because the server's ledger keeps
//!   the last 16 changes of a service: commit→applied p50/p99/p999/max from the server's
//!   ledger (`GET /v1/convergence/...`), live/applied subscribers and stragglers, and
//!   commit→DNS-answer from UDP queries of the DNS listener (see the `convergence` module).
//!   The descriptor limit is raised to two per client (the hard limit too, with
//!   `CAP_SYS_RESOURCE`) before a `--spawn`ed server starts, which inherits it. Muster only.
//! - `reconnect`, `evacuation`, `expiry`, `hotcold` (opt-in, `--spawn`): the exceptional
//!   loads (SPEC K1), each on a server of its own: every watcher resuming after a SIGKILL and
//!   restart, a zone drained in one second, leases expiring in the same second beside an
//!   unrelated writer, and cold updates beside a hot service (see the `storms` module).
//! - `scale` (opt-in, `--spawn`): a one-member cluster of its own grown to each `--endpoints`
//!   size; at each, the fill rate, registration p50/p99 (and CO-corrected), RSS per
//!   endpoint, restart after SIGTERM and after SIGKILL, and a new member's catch-up (see the
//!   `scale` module). Muster only.
//!
//! # Use
//! `muster bench` embeds [`BenchArgs`] and prints [`Report::render_table`] (or
//! [`Report::render_json`] with `--json`): `muster bench --spawn --spawn-etcd` measures a
//! fresh server and a fresh etcd side by side.

#![forbid(unsafe_code)]

mod args;
mod checks;
mod client;
mod clock;
mod codec;
mod consul;
mod convergence;
mod driver;
mod error;
mod histogram;
mod limits;
mod load;
mod meter;
mod mirror;
mod render;
mod report;
mod requests;
mod scale;
mod soak;
mod spawn;
mod storms;
mod tls;
mod watch;
mod workloads;
mod xds;

use std::sync::Arc;

use tracing::info;

pub use args::{BenchArgs, Plan, ReadConsistency, Workload, parse_duration};
pub use checks::{ChecksSummary, DetectionSummary};
pub use consul::ConsulSummary;
pub use convergence::{AppliedLatency, ConvergenceChange, ConvergenceSummary, MAX_CHANGES};
pub use error::BenchError;
pub use histogram::Histogram;
pub use load::LoadSpan;
pub(crate) use load::load_average;
pub use report::{
    LatencySummary, MemorySummary, Report, System, SystemInfo, SystemResult, Target, WorkloadReport, anchors,
};
pub use scale::{CatchUpPath, MAX_SIZE, ScaleArgs, ScaleSize, ScaleSummary, SizesError, parse_sizes};
pub use storms::{
    EvacuationSummary, ExpirySummary, HotColdPhase, HotColdSummary, ReconnectSummary, StormArgs, StormPlan,
    StormSummary,
};
pub use xds::{XdsChange, XdsSummary};

use client::Http;
use requests::Names;
use spawn::{Spawned, spawn_etcd, spawn_muster};
use workloads::Subject;

/// Adds a workload's report, stamped with the load average at its end: the 1-minute average
/// then covers the run, so a busy machine shows beside the figures it skewed.
fn finished(workloads: &mut Vec<WorkloadReport>, mut report: WorkloadReport) {
    report.load_average_at_end = load_average();
    workloads.push(report);
}

/// Runs every planned workload against every named system (Muster first, then etcd, never
/// both at once) and returns the report. Spawned systems are stopped before this returns.
pub async fn run(args: BenchArgs) -> Result<Report, BenchError> {
    let plan = args.plan()?;
    let load_average_at_start = load_average();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    if args.server.is_none() && args.servers.is_empty() && !args.spawn && args.etcd.is_none() && !args.spawn_etcd {
        return Err(BenchError::NoSystem);
    }
    // Kept alive until the end of the run; dropping one stops its process.
    let mut spawned: Vec<Spawned> = Vec::new();
    let mut systems = Vec::new();
    let mut subjects = Vec::new();
    // `--tls`: the TLS server's URL, PID and the client config trusting its CA.
    let mut tls_server = None;
    // The plain Muster server's Consul-compatible listener, for the consul workload.
    let mut consul_url = args.consul.clone();
    // Its xDS listener, for the xds workload (`--spawn` opens one only when that runs).
    let mut xds_addr = args.xds;
    let want_xds = cfg!(feature = "xds") && plan.workloads.contains(&Workload::Xds);
    // Its DNS listener, for the convergence workload's probe.
    let mut dns_addr = args.dns;
    if plan.workloads.contains(&Workload::Convergence) {
        // Before spawning: the server inherits the limit, and holds as many connections.
        limits::raise_descriptor_limit(convergence::descriptors_wanted(plan.watchers));
    } else if plan
        .workloads
        .iter()
        .any(|w| matches!(w, Workload::Fanout | Workload::Watchers))
    {
        // A watch stream costs a descriptor here and one in the server (which inherits the
        // limit when spawned after this); the margin covers the request workloads' pools.
        limits::raise_descriptor_limit(plan.watchers as u64 + 4_096);
    }
    // The scale, mirror and soak workloads spawn servers of their own; alone, they need no other.
    let spawn_muster_server = args.spawn
        && plan
            .workloads
            .iter()
            .any(|w| !matches!(w, Workload::Scale | Workload::Mirror | Workload::Soak));
    let muster = if spawn_muster_server {
        let bin = muster_bin(&args)?;
        info!(bin = %bin.display(), "starting muster serve");
        let (process, _) = spawn_muster(&bin, false, want_xds).await?;
        let found = Some((process.url.clone(), Some(process.pid), true));
        consul_url = process.consul_url.clone();
        xds_addr = process.xds_addr;
        dns_addr = process.dns_addr;
        spawned.push(process);
        if args.tls {
            info!(bin = %bin.display(), "starting muster serve with TLS");
            let (process, client_tls) = spawn_muster(&bin, true, false).await?;
            tls_server = Some((process.url.clone(), process.pid, client_tls));
            spawned.push(process);
        }
        found
    } else {
        let first = args.servers.first().cloned();
        args.server.clone().or(first).map(|url| (url, args.server_pid, false))
    };
    let etcd = if args.spawn_etcd {
        info!(bin = %args.etcd_bin.display(), "starting etcd");
        let process = spawn_etcd(&args.etcd_bin).await?;
        let found = Some((process.url.clone(), Some(process.pid), true));
        spawned.push(process);
        found
    } else {
        args.etcd.clone().map(|url| (url, args.etcd_pid, false))
    };
    for (system, found) in [(System::Muster, muster), (System::Etcd, etcd)] {
        if let Some((url, pid, was_spawned)) = found {
            let http = Http::new(&url, plan.connections);
            systems.push(SystemInfo {
                system,
                url: http.base().to_owned(),
                spawned: was_spawned,
                pid,
            });
            subjects.push(Subject { system, http, pid });
        }
        // The TLS server right after the plain one, so both run under the same conditions.
        if system == System::Muster
            && let Some((url, pid, client_tls)) = &tls_server
        {
            let http = Http::with_tls(url, plan.connections, client_tls.clone());
            let http = match bootstrap(&http).await {
                Ok(secret) => http.with_token(&secret),
                Err(detail) => return Err(BenchError::Spawn { what: "muster", detail }),
            };
            systems.push(SystemInfo {
                system: System::MusterTls,
                url: http.base().to_owned(),
                spawned: true,
                pid: Some(*pid),
            });
            subjects.push(Subject {
                system: System::MusterTls,
                http,
                pid: Some(*pid),
            });
        }
    }

    let names = Arc::new(Names::new(clock::run_id(), plan.services));
    let mut workloads = Vec::new();
    for workload in [Workload::Register, Workload::Renew, Workload::Read] {
        if !plan.workloads.contains(&workload) {
            continue;
        }
        let mut results = Vec::new();
        for subject in &subjects {
            info!(workload = workload.name(), system = subject.system.name(), "running");
            let result = match workload {
                Workload::Register => workloads::register(subject, &plan, &names).await,
                Workload::Renew => workloads::renew(subject, &plan, &names).await?,
                _ => workloads::read(subject, &plan, &names).await?,
            };
            results.push(result);
        }
        finished(&mut workloads, WorkloadReport::new(workload, results, Vec::new()));
    }
    let fanout = plan.workloads.contains(&Workload::Fanout);
    let memory = plan.workloads.contains(&Workload::Watchers);
    if fanout || memory {
        let (mut fanout_results, mut memory_results, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
        for subject in &subjects {
            info!(
                system = subject.system.name(),
                watchers = plan.watchers,
                "running the watch phase"
            );
            let figures = watch::watch_phase(subject, &plan, &names, fanout, memory).await?;
            fanout_results.extend(figures.fanout);
            memory_results.extend(figures.watchers);
            skipped.extend(figures.memory_skipped);
        }
        if fanout {
            finished(
                &mut workloads,
                WorkloadReport::new(Workload::Fanout, fanout_results, Vec::new()),
            );
        }
        if memory {
            finished(
                &mut workloads,
                WorkloadReport::new(Workload::Watchers, memory_results, skipped),
            );
        }
    }
    if plan.workloads.contains(&Workload::Checks) {
        let mut results = Vec::new();
        let mut skipped = Vec::new();
        for subject in &subjects {
            if subject.system == System::Muster {
                info!(checks = plan.checks, "running the checks workload");
                results.push(checks::checks(subject, &plan, clock::run_id()).await);
            } else {
                skipped.push(format!("{}: it has no health checks", subject.system.name()));
            }
        }
        finished(&mut workloads, WorkloadReport::new(Workload::Checks, results, skipped));
    }
    if plan.workloads.contains(&Workload::Handshake) {
        let mut results = Vec::new();
        let mut skipped = Vec::new();
        match &tls_server {
            Some((url, pid, Some(client_tls))) => {
                let addr = url
                    .trim_start_matches("https://")
                    .parse()
                    .map_err(|_| BenchError::Usage(format!("the TLS server's URL {url} names no address")))?;
                let subject = Subject {
                    system: System::MusterTls,
                    http: Http::new(url, 1),
                    pid: Some(*pid),
                };
                info!("running the TLS handshake workload");
                results.push(tls::handshakes(&subject, addr, client_tls, &plan).await);
            }
            _ => skipped.push("no TLS server: run with --spawn --tls".to_owned()),
        }
        finished(
            &mut workloads,
            WorkloadReport::new(Workload::Handshake, results, skipped),
        );
    }
    if plan.workloads.contains(&Workload::Consul) {
        let mut results = Vec::new();
        let mut skipped = Vec::new();
        for subject in &subjects {
            match (subject.system, &consul_url) {
                (System::Muster, Some(url)) => {
                    info!(
                        services = plan.consul_services,
                        changes = plan.changes,
                        "running the consul workload"
                    );
                    let run = requests::base36(clock::run_id());
                    results.push(consul::consul(&subject.http, url, subject.pid, &plan, &run).await?);
                }
                (System::Muster, None) => {
                    skipped.push("muster: its Consul listener is unknown (use --spawn, or --consul URL)".to_owned());
                }
                (System::Etcd, _) => skipped.push("etcd: it has no Consul API".to_owned()),
                // The same listener code behind TLS measures nothing new.
                (System::MusterTls, _) => {}
            }
        }
        finished(&mut workloads, WorkloadReport::new(Workload::Consul, results, skipped));
    }
    if plan.workloads.contains(&Workload::Xds) {
        let mut results = Vec::new();
        let mut skipped = Vec::new();
        for subject in &subjects {
            match (subject.system, xds_addr) {
                (System::Muster, Some(addr)) if cfg!(feature = "xds") => {
                    info!(
                        streams = plan.xds_streams,
                        changes = plan.changes,
                        "running the xds workload"
                    );
                    results.push(xds_workload(subject, addr, &plan, &names).await?);
                }
                (System::Muster, _) if !cfg!(feature = "xds") => {
                    skipped.push("muster: this build has no xDS client (the `xds` feature is off)".to_owned());
                }
                (System::Muster, _) => {
                    skipped.push("muster: its xDS listener is unknown (use --spawn, or --xds ADDR)".to_owned());
                }
                (System::Etcd, _) => skipped.push("etcd: it has no xDS server".to_owned()),
                // The same listener code behind TLS measures nothing new.
                (System::MusterTls, _) => {}
            }
        }
        finished(&mut workloads, WorkloadReport::new(Workload::Xds, results, skipped));
    }
    if plan.workloads.contains(&Workload::Convergence) {
        let mut results = Vec::new();
        let mut skipped = Vec::new();
        for subject in &subjects {
            match subject.system {
                System::Muster => {
                    info!(
                        watchers = plan.watchers,
                        changes = plan.changes.min(MAX_CHANGES),
                        "running the convergence workload"
                    );
                    let run = requests::base36(clock::run_id());
                    results.push(convergence::convergence(subject, dns_addr, &plan, &run).await?);
                }
                System::Etcd => skipped.push("etcd: it has no convergence telemetry".to_owned()),
                // The same ledger behind TLS measures nothing new.
                System::MusterTls => {}
            }
        }
        finished(
            &mut workloads,
            WorkloadReport::new(Workload::Convergence, results, skipped),
        );
    }
    // The exceptional-load workloads, each on a server of its own (SPEC K1).
    storms::run(&args, &plan, &mut workloads).await?;
    if plan.workloads.contains(&Workload::Scale) {
        info!(sizes = ?plan.endpoints, "running the scale workload");
        let result = scale::scale(&muster_bin(&args)?, &plan, clock::run_id()).await?;
        finished(
            &mut workloads,
            WorkloadReport::new(Workload::Scale, vec![result], Vec::new()),
        );
    }
    if plan.workloads.contains(&Workload::Mirror) {
        let endpoints = args.mirror_endpoints.unwrap_or(if args.quick {
            mirror::QUICK_ENDPOINTS
        } else {
            mirror::DEFAULT_ENDPOINTS
        });
        info!(endpoints, "running the mirror workload");
        let result = mirror::mirror(&muster_bin(&args)?, endpoints, args.mirror_rate, plan.duration).await?;
        finished(
            &mut workloads,
            WorkloadReport::new(Workload::Mirror, vec![result], Vec::new()),
        );
    }
    if plan.workloads.contains(&Workload::Soak) {
        info!(duration = ?plan.duration, "running the soak workload");
        let result = scale::soak_cluster(&muster_bin(&args)?, plan.duration).await?;
        finished(
            &mut workloads,
            WorkloadReport::new(Workload::Soak, vec![result], Vec::new()),
        );
    }
    drop(spawned);
    let report = Report {
        plan,
        systems,
        cpus,
        load_average_at_start,
        workloads,
    };
    if let Some(path) = &args.report_file {
        std::fs::write(path, report.render_json()).map_err(|source| BenchError::ReportFile {
            path: path.clone(),
            source,
        })?;
    }
    Ok(report)
}

/// The binary `--spawn` runs: `--muster-bin`, else this executable.
fn muster_bin(args: &BenchArgs) -> Result<std::path::PathBuf, BenchError> {
    match &args.muster_bin {
        Some(bin) => Ok(bin.clone()),
        None => std::env::current_exe().map_err(|err| BenchError::Spawn {
            what: "muster",
            detail: format!("cannot find this executable ({err}); pass --muster-bin"),
        }),
    }
}

/// The xds workload, or (without the `xds` feature, never called) a setup error.
async fn xds_workload(
    subject: &Subject,
    addr: std::net::SocketAddr,
    plan: &Plan,
    names: &Names,
) -> Result<SystemResult, BenchError> {
    #[cfg(feature = "xds")]
    return xds::xds(subject, addr, plan, names).await;
    #[cfg(not(feature = "xds"))]
    {
        let _ = (addr, plan, names);
        Err(BenchError::Setup {
            system: subject.system.name(),
            workload: Workload::Xds.name(),
            detail: "built without the `xds` feature".to_owned(),
        })
    }
}

/// The secured server's first operator token, its secret sent on every request of the
/// `muster+tls+auth` runs.
async fn bootstrap(http: &Http) -> Result<String, String> {
    let (status, body) = http.send(hyper::Method::POST, "/v1/acl/bootstrap", None).await?;
    let reply: muster_core::api::TokenSecretReply =
        serde_json::from_slice(&body).map_err(|err| format!("acl bootstrap answered {status}: {err}"))?;
    Ok(reply.secret)
}
