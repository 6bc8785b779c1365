//! The request workloads (register, renew, read) for each system: a setup where the workload
//! needs one (leases to renew, a set to read), then the closed-loop [`driver`](crate::driver).
//! Hot loops check only the status (and etcd's keepalive TTL): parsing every reply would
//! spend the CPU the server under test shares with the load generator on this machine.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::Method;
use muster_core::api::{SnapshotReply, WriteReply};

use crate::client::Http;
use crate::codec::{EtcdGrant, EtcdStreamLine};
use crate::driver::{Outcome, closed_loop};
use crate::meter::CpuMeter;
use crate::report::{LatencySummary, System, SystemResult};
use crate::requests::{Names, READ_ENDPOINTS, READ_SERVICE, etcd_grant, etcd_keepalive};
use crate::{BenchError, Plan, Workload};

/// Setups (granting leases, writing the read set) are bounded by count, with this time bound
/// only as a guard against a stalled server.
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);

/// The register workload writes at most this many endpoints per run, whatever
/// `--max-requests` says: each run has a tenant of its own, and the server's default quota is
/// 1,000,000 endpoints per tenant; past it every registration would be a quota error.
const MAX_REGISTRATIONS: u64 = 900_000;

/// How long every `--servers` node may take to serve the read set written through the
/// first: a follower applies a commit within a heartbeat (100 ms); 10 s is a stalled node.
const READ_SET_TIMEOUT: Duration = Duration::from_secs(10);

/// A system under load.
#[derive(Debug, Clone)]
pub(crate) struct Subject {
    /// Which system.
    pub(crate) system: System,
    /// Its client.
    pub(crate) http: Http,
    /// Its PID, for memory figures.
    pub(crate) pid: Option<u32>,
}

/// A workload's result from its outcome and CPU meter (shared with `tls::handshakes`).
pub(crate) fn result(system: System, outcome: &Outcome, meter: &CpuMeter) -> SystemResult {
    let mut result = SystemResult::from_requests(
        system,
        outcome.requests,
        outcome.errors,
        outcome.elapsed,
        &outcome.latencies,
    );
    result.latency = LatencySummary::of_closed_loop(&outcome.latencies);
    result.note = outcome.first_error.as_ref().map(|err| format!("first error: {err}"));
    meter.finish(&mut result);
    result
}

fn setup_failed(subject: &Subject, workload: Workload, detail: String) -> BenchError {
    BenchError::Setup {
        system: subject.system.name(),
        workload: workload.name(),
        detail,
    }
}

/// Checks that a setup ran every operation; reports the first failure otherwise.
fn complete(subject: &Subject, workload: Workload, outcome: &Outcome, wanted: u64) -> Result<(), BenchError> {
    if outcome.errors == 0 && outcome.requests == wanted {
        return Ok(());
    }
    let detail = format!(
        "{} of {wanted} operations failed or did not run; first error: {}",
        wanted - (outcome.requests - outcome.errors),
        outcome.first_error.as_deref().unwrap_or("none (timed out)"),
    );
    Err(setup_failed(subject, workload, detail))
}

/// Durable registrations of new instances (Muster) or puts of new keys (etcd).
pub(crate) async fn register(subject: &Subject, plan: &Plan, names: &Arc<Names>) -> SystemResult {
    let (http, names) = (subject.http.clone(), Arc::clone(names));
    let max = plan.max_requests.min(MAX_REGISTRATIONS);
    let meter = CpuMeter::start(subject.pid);
    let outcome = match subject.system {
        System::Muster | System::MusterTls => {
            closed_loop(plan.connections, plan.duration, max, move |n| {
                let (http, names) = (http.clone(), Arc::clone(&names));
                async move {
                    let (path, body) = names.muster_register(n);
                    http.send_ok(Method::PUT, &path, Some(body)).await.map(drop)
                }
            })
            .await
        }
        System::Etcd => {
            closed_loop(plan.connections, plan.duration, plan.max_requests, move |n| {
                let (http, names) = (http.clone(), Arc::clone(&names));
                async move {
                    http.send_ok(Method::POST, "/v3/kv/put", Some(names.etcd_put(n)))
                        .await
                        .map(drop)
                }
            })
            .await
        }
    };
    result(subject.system, &outcome, &meter)
}

/// Grants `plan.leases` leases, then renews them round-robin.
pub(crate) async fn renew(subject: &Subject, plan: &Plan, names: &Arc<Names>) -> Result<SystemResult, BenchError> {
    let ids = Arc::new(Mutex::new(Vec::with_capacity(plan.leases)));
    let (http, names_for_grant, granted) = (subject.http.clone(), Arc::clone(names), Arc::clone(&ids));
    let system = subject.system;
    let grants = closed_loop(plan.connections, SETUP_TIMEOUT, plan.leases as u64, move |_| {
        let (http, names, granted) = (http.clone(), Arc::clone(&names_for_grant), Arc::clone(&granted));
        async move {
            let id = match system {
                System::Muster | System::MusterTls => {
                    let (path, body) = names.muster_grant();
                    let body = http.send_ok(Method::POST, &path, Some(body)).await?;
                    let reply: WriteReply = serde_json::from_slice(&body).map_err(|err| err.to_string())?;
                    reply.lease.ok_or("a grant's reply has no lease")?.id.0
                }
                System::Etcd => {
                    let body = http
                        .send_ok(Method::POST, "/v3/lease/grant", Some(etcd_grant()))
                        .await?;
                    serde_json::from_slice::<EtcdGrant>(&body)
                        .map_err(|err| err.to_string())?
                        .id
                }
            };
            granted.lock().map_err(|_| "poisoned")?.push(id);
            Ok(())
        }
    })
    .await;
    complete(subject, Workload::Renew, &grants, plan.leases as u64)?;
    let ids: Arc<[u64]> = ids.lock().map(|ids| ids.clone().into()).unwrap_or_default();
    let (http, names) = (subject.http.clone(), Arc::clone(names));
    let meter = CpuMeter::start(subject.pid);
    let outcome = closed_loop(plan.connections, plan.duration, plan.max_requests, move |n| {
        let (http, names, ids) = (http.clone(), Arc::clone(&names), Arc::clone(&ids));
        async move {
            let id = ids[(n % ids.len() as u64) as usize];
            match system {
                System::Muster | System::MusterTls => {
                    http.send_ok(Method::PUT, &names.muster_renew(id), None).await.map(drop)
                }
                System::Etcd => {
                    // The gateway answers 200 even for an unknown lease; only a TTL says it lived.
                    let body = http
                        .send_ok(Method::POST, "/v3/lease/keepalive", Some(etcd_keepalive(id)))
                        .await?;
                    let line: EtcdStreamLine = serde_json::from_slice(&body).map_err(|err| err.to_string())?;
                    match line.result {
                        Some(result) if result.ttl > 0 => Ok(()),
                        _ => Err(format!("keepalive refused: {}", String::from_utf8_lossy(&body))),
                    }
                }
            }
        }
    })
    .await;
    Ok(result(system, &outcome, &meter))
}

/// Writes a 5-endpoint set, checks one read of it, then reads it in a loop.
pub(crate) async fn read(subject: &Subject, plan: &Plan, names: &Arc<Names>) -> Result<SystemResult, BenchError> {
    let system = subject.system;
    let http = subject.http.clone();
    let (writer, names_for_setup) = (http.clone(), Arc::clone(names));
    let setup = closed_loop(1, SETUP_TIMEOUT, READ_ENDPOINTS, move |n| {
        let (http, names) = (writer.clone(), Arc::clone(&names_for_setup));
        async move {
            let instance = format!("i-{n}");
            match system {
                System::Muster | System::MusterTls => {
                    let (path, body) = names.muster_register_in(READ_SERVICE, &instance, n);
                    http.send_ok(Method::PUT, &path, Some(body)).await.map(drop)
                }
                System::Etcd => {
                    let body = names.etcd_put_in(READ_SERVICE, &instance, n);
                    http.send_ok(Method::POST, "/v3/kv/put", Some(body)).await.map(drop)
                }
            }
        }
    })
    .await;
    complete(subject, Workload::Read, &setup, READ_ENDPOINTS)?;
    let verify = match system {
        System::Muster | System::MusterTls => http
            .send_ok(Method::GET, &names.muster_snapshot(READ_SERVICE), None)
            .await
            .and_then(|body| serde_json::from_slice::<SnapshotReply>(&body).map_err(|err| err.to_string()))
            .map(|reply| reply.endpoints.len() as u64),
        System::Etcd => http
            .send_ok(Method::POST, "/v3/kv/range", Some(names.etcd_range(READ_SERVICE)))
            .await
            .and_then(|body| serde_json::from_slice::<serde_json::Value>(&body).map_err(|err| err.to_string()))
            .map(|reply| reply["kvs"].as_array().map_or(0, |kvs| kvs.len() as u64)),
    };
    match verify {
        Ok(READ_ENDPOINTS) => {}
        Ok(other) => {
            let detail = format!("the read set holds {other} entries, not {READ_ENDPOINTS}");
            return Err(setup_failed(subject, Workload::Read, detail));
        }
        Err(err) => return Err(setup_failed(subject, Workload::Read, err)),
    }
    let names = Arc::clone(names);
    let readers = readers(subject, plan, &names).await?;
    let meter = CpuMeter::start(subject.pid);
    let outcome = match system {
        System::Muster | System::MusterTls => {
            let path: Arc<str> = read_path(plan, &names).into();
            let readers = Arc::new(readers.clone());
            closed_loop(plan.connections, plan.duration, plan.max_requests, move |ticket| {
                // Round-robin over the nodes: the tickets are shared, so every node gets
                // one read in `readers.len()` and as many of the connections.
                let (http, path) = (readers[ticket as usize % readers.len()].clone(), Arc::clone(&path));
                async move { http.send_ok(Method::GET, &path, None).await.map(drop) }
            })
            .await
        }
        System::Etcd => {
            let body = names.etcd_range(READ_SERVICE);
            closed_loop(plan.connections, plan.duration, plan.max_requests, move |_| {
                let (http, body) = (http.clone(), body.clone());
                async move { http.send_ok(Method::POST, "/v3/kv/range", Some(body)).await.map(drop) }
            })
            .await
        }
    };
    let mut result = result(system, &outcome, &meter);
    if system == System::Muster && (readers.len() > 1 || plan.read_consistency.is_some()) {
        let spread = format!(
            "reads spread round-robin over {} node(s) ({}), consistency={}",
            readers.len(),
            readers.iter().map(Http::base).collect::<Vec<_>>().join(", "),
            plan.read_consistency.map_or("(not sent)", |c| c.name()),
        );
        result.note = Some(match result.note.take() {
            Some(note) => format!("{spread}; {note}"),
            None => spread,
        });
    }
    Ok(result)
}

/// The read workload's path: the read set's snapshot, with `consistency=` when asked.
fn read_path(plan: &Plan, names: &Names) -> String {
    let path = names.muster_snapshot(READ_SERVICE);
    match plan.read_consistency {
        Some(consistency) => format!("{path}?consistency={}", consistency.name()),
        None => path,
    }
}

/// The clients the read workload spreads over: every `--servers` node for plain Muster,
/// else the subject's own. Each node must serve the whole read set (a follower has applied
/// the setup's writes) before the loop starts; it is polled for that, bounded.
async fn readers(subject: &Subject, plan: &Plan, names: &Names) -> Result<Vec<Http>, BenchError> {
    if subject.system != System::Muster || plan.read_servers.is_empty() {
        return Ok(vec![subject.http.clone()]);
    }
    let path = read_path(plan, names);
    let mut readers = Vec::with_capacity(plan.read_servers.len());
    for url in &plan.read_servers {
        let http = Http::new(url, plan.connections);
        let deadline = crate::clock::now() + READ_SET_TIMEOUT;
        loop {
            let seen = http
                .send_ok(Method::GET, &path, None)
                .await
                .and_then(|body| serde_json::from_slice::<SnapshotReply>(&body).map_err(|err| err.to_string()))
                .map(|reply| reply.endpoints.len() as u64);
            match seen {
                Ok(READ_ENDPOINTS) => break,
                _ if crate::clock::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
                other => {
                    let detail = format!("{url} does not serve the read set: {other:?}");
                    return Err(setup_failed(subject, Workload::Read, detail));
                }
            }
        }
        readers.push(http);
    }
    Ok(readers)
}
