//! Prometheus's `consul_sd` against the Consul-compatible listener (SPEC E1), request for
//! request, decoded the way its Go client decodes (Debian's Prometheus is built without
//! consul_sd, so this fixture stands in for it).
//!
//! What Prometheus sends (discovery/consul/consul.go with github.com/hashicorp/consul/api;
//! `allow_stale: true` and a 2-minute watch timeout are its defaults; Go's `url.Values`
//! encodes the query sorted by key; `index` only once it has one):
//! ```text
//!  GET /v1/agent/self                                    (no datacenter configured)
//!      → map[string]map[string]interface{}; info["Config"]["Datacenter"].(string)
//!  GET /v1/catalog/services?stale=&wait=120000ms          → map[string][]string
//!  GET /v1/catalog/services?index=N&stale=&wait=120000ms  (blocks until the set changes)
//!  GET /v1/health/service/<name>?stale=&wait=120000ms     → []ServiceEntry (no passing)
//!  GET /v1/health/service/<name>?index=N&stale=&wait=120000ms
//! ```
//! and from each reply's headers `X-Consul-Index` (a uint64; equal to the last one means
//! "timed out, nothing changed", so it must be ≥ 1 and move on a change),
//! `X-Consul-LastContact` (a uint64 of milliseconds) and `X-Consul-KnownLeader`.
//!
//! The types below mirror the Go structs field for field, with the Go types: an integer
//! sent as a string, a string sent as a number, or a `null` where Prometheus dereferences
//! fails here as it fails there. Stricter than Go in one way, on purpose: maps and lists
//! must be present and non-null, since a client in a language without Go's zero values
//! (the npm client, a Python script) breaks on a missing one.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use muster_server::RunningServer;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::support::{STEP, poll, test_config};

/// Prometheus's `watchTimeout` (2 minutes) as Go's `durToMsec` writes it.
const PROMETHEUS_WAIT: &str = "120000ms";
/// The Consul view's tenant and namespace (`[consul]` defaults).
const NATIVE: &str = "/v1/registry/default/default";

/// `agent.Self()`: every top-level value an object.
type AgentSelf = HashMap<String, HashMap<String, Value>>;
/// `catalog.Services()`: service name → tags.
type CatalogServices = HashMap<String, Vec<String>>;

/// `api.ServiceEntry`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(dead_code, reason = "mirrors the Go struct; decoding is the check")]
struct ServiceEntry {
    node: Node,
    service: AgentService,
    checks: Vec<HealthCheck>,
}

/// `api.Node`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(dead_code, reason = "mirrors the Go struct; decoding is the check")]
struct Node {
    #[serde(rename = "ID")]
    id: String,
    node: String,
    address: String,
    datacenter: String,
    tagged_addresses: HashMap<String, String>,
    meta: HashMap<String, String>,
    create_index: u64,
    modify_index: u64,
}

/// `api.AgentService` (the fields Prometheus reads, and every integer).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(dead_code, reason = "mirrors the Go struct; decoding is the check")]
struct AgentService {
    #[serde(rename = "ID")]
    id: String,
    service: String,
    tags: Vec<String>,
    meta: HashMap<String, String>,
    port: i64,
    address: String,
    /// `json:",omitempty"`: may be absent, never another shape.
    #[serde(default)]
    tagged_addresses: Option<HashMap<String, ServiceAddress>>,
    weights: AgentWeights,
    enable_tag_override: bool,
    #[serde(default)]
    create_index: Option<u64>,
    #[serde(default)]
    modify_index: Option<u64>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    partition: Option<String>,
}

/// `api.ServiceAddress`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(dead_code, reason = "mirrors the Go struct; decoding is the check")]
struct ServiceAddress {
    address: String,
    port: i64,
}

/// `api.AgentWeights`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(dead_code, reason = "mirrors the Go struct; decoding is the check")]
struct AgentWeights {
    passing: i64,
    warning: i64,
}

/// `api.HealthCheck`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(dead_code, reason = "mirrors the Go struct; decoding is the check")]
struct HealthCheck {
    node: String,
    #[serde(rename = "CheckID")]
    check_id: String,
    name: String,
    status: String,
    notes: String,
    output: String,
    #[serde(rename = "ServiceID")]
    service_id: String,
    service_name: String,
    service_tags: Vec<String>,
    #[serde(rename = "Type")]
    kind: String,
    #[serde(default)]
    exposed_port: i64,
    #[serde(default)]
    definition: Option<HealthCheckDefinition>,
    create_index: u64,
    modify_index: u64,
}

/// `api.HealthCheckDefinition`: its durations are Go `ReadableDuration`s, which decode a
/// string with `time.ParseDuration` (so `""` fails) or a number of nanoseconds.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[allow(dead_code, reason = "mirrors the Go struct; decoding is the check")]
struct HealthCheckDefinition {
    #[serde(default, rename = "HTTP")]
    http: Option<String>,
    #[serde(default, rename = "TCP")]
    tcp: Option<String>,
    #[serde(default, rename = "GRPC")]
    grpc: Option<String>,
    #[serde(default)]
    interval: Option<GoDuration>,
    #[serde(default)]
    timeout: Option<GoDuration>,
    #[serde(default)]
    deregister_critical_service_after: Option<GoDuration>,
    #[serde(default)]
    interval_duration: Option<GoDuration>,
    #[serde(default)]
    timeout_duration: Option<GoDuration>,
    #[serde(default)]
    deregister_critical_service_after_duration: Option<GoDuration>,
}

/// A Go `ReadableDuration` / `time.Duration` in JSON: a `time.ParseDuration` string or a
/// number of nanoseconds.
#[derive(Debug)]
#[allow(dead_code, reason = "decoding is the check")]
struct GoDuration(f64);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::Number(n) => Ok(GoDuration(n.as_f64().unwrap_or_default())),
            Value::String(text) => parse_go_duration(&text)
                .map(GoDuration)
                .ok_or_else(|| serde::de::Error::custom(format!("time.ParseDuration({text:?}) fails"))),
            other => Err(serde::de::Error::custom(format!("not a Go duration: {other}"))),
        }
    }
}

/// Go's `time.ParseDuration`: `[-+]` then one or more `<decimal><unit>` (units ns, us, µs,
/// ms, s, m, h), or a bare `0`; in nanoseconds.
fn parse_go_duration(text: &str) -> Option<f64> {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    if body == "0" {
        return Some(0.0);
    }
    let mut rest = body;
    let mut total = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .into_iter()
            .filter(|unit| rest.starts_with(unit))
            .max_by_key(|unit| unit.len())?;
        let nanos = match unit {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            _ => 3_600e9,
        };
        total += number * nanos;
        rest = &rest[unit.len()..];
    }
    Some(total)
}

/// `HealthChecks.AggregatedStatus()`: maintenance > critical > warning > passing.
fn aggregated_status(checks: &[HealthCheck]) -> &'static str {
    let (mut passing, mut warning, mut critical, mut maintenance) = (false, false, false, false);
    for check in checks {
        if check.check_id == "_node_maintenance" || check.check_id.starts_with("_service_maintenance:") {
            maintenance = true;
            continue;
        }
        match check.status.as_str() {
            "passing" => passing = true,
            "warning" => warning = true,
            "critical" => critical = true,
            _ => return "",
        }
    }
    match (maintenance, critical, warning, passing) {
        (true, ..) => "maintenance",
        (_, true, ..) => "critical",
        (_, _, true, _) => "warning",
        _ => "passing",
    }
}

/// What `parseQueryMeta` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QueryMeta {
    last_index: u64,
    last_contact_ms: u64,
    known_leader: bool,
}

/// A server with its Consul listener on a free port, and a plain HTTP client.
struct Fixture {
    server: RunningServer,
    _dir: TempDir,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Fixture {
    async fn start() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mut config = test_config(&dir);
        config.consul.enabled = true;
        config.consul.addr = "127.0.0.1:0".parse().unwrap();
        let server = tokio::time::timeout(STEP, muster_server::start(config))
            .await
            .expect("the server starts in time")
            .expect("the server starts");
        Fixture {
            server,
            _dir: dir,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn request(&self, method: Method, url: String, body: Option<Value>) -> (StatusCode, HeaderMap, Bytes) {
        let mut request = Request::builder().method(method).uri(url);
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let body = body.map(|b| serde_json::to_vec(&b).unwrap()).unwrap_or_default();
        let response = tokio::time::timeout(STEP, self.client.request(request.body(Full::new(body.into())).unwrap()))
            .await
            .expect("a reply in time")
            .expect("a reply");
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = tokio::time::timeout(STEP, response.into_body().collect())
            .await
            .expect("the body in time")
            .expect("the body")
            .to_bytes();
        (status, headers, bytes)
    }

    /// A GET on the Consul listener as the Go client sends it, decoded as `T`, with the
    /// query meta it parses.
    async fn consul_get<T: DeserializeOwned>(&self, path_and_query: &str) -> (T, QueryMeta) {
        let addr = self.server.consul_addr().expect("the Consul listener is on");
        let (status, headers, body) = self
            .request(Method::GET, format!("http://{addr}{path_and_query}"), None)
            .await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, StatusCode::OK, "GET {path_and_query}: {text}");
        let decoded = serde_json::from_slice::<T>(&body)
            .unwrap_or_else(|err| panic!("GET {path_and_query}: Go's decoder would fail ({err}) on {text}"));
        (decoded, query_meta(path_and_query, &headers))
    }

    /// Registers `instance` of `service` through the native API (Prometheus only reads).
    async fn register(&self, service: &str, instance: &str, ip: &str, port: u16) {
        let body = json!({
            "incarnation": 1,
            "endpoint": {
                "addresses": [{"ip": ip}],
                "ports": [{"name": "http", "port": port, "protocol": "http"}],
                "labels": {"team": "edge"},
            },
        });
        let url = format!("http://{}{NATIVE}/{service}/{instance}", self.server.local_addr());
        let (status, _, reply) = self.request(Method::PUT, url, Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&reply));
    }
}

/// `parseQueryMeta`, strictly: X-Consul-Index present and ≥ 1 (a missing or zero index
/// makes every blocking query a busy loop that never sees a change), LastContact a uint64.
fn query_meta(what: &str, headers: &HeaderMap) -> QueryMeta {
    let header = |name: &str| {
        headers
            .get(name)
            .unwrap_or_else(|| panic!("{what}: no {name} header in {headers:?}"))
            .to_str()
            .unwrap()
            .to_owned()
    };
    let last_index: u64 = header("x-consul-index")
        .parse()
        .unwrap_or_else(|err| panic!("{what}: X-Consul-Index is not a uint64: {err}"));
    assert!(last_index >= 1, "{what}: X-Consul-Index is 0");
    let last_contact_ms = header("x-consul-lastcontact")
        .parse()
        .unwrap_or_else(|err| panic!("{what}: X-Consul-LastContact is not a uint64: {err}"));
    QueryMeta {
        last_index,
        last_contact_ms,
        known_leader: header("x-consul-knownleader") == "true",
    }
}

/// Runs `query` in a task; the caller makes a change, then [`woken`] waits for the reply.
fn blocking<T, F>(future: F) -> tokio::task::JoinHandle<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(future)
}

/// The reply of a blocking query woken by a change: well before its 2-minute wait.
async fn woken<T>(handle: tokio::task::JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(STEP, handle)
        .await
        .unwrap_or_else(|_| panic!("{what}: the blocking query (wait {PROMETHEUS_WAIT}) did not wake on a change"))
        .expect("the query task")
}

// Prometheus's whole discovery loop, step for step: datacenter, service list, one
// service's entries, then a blocking query of each kind woken by a new registration.
#[tokio::test]
async fn prometheus_consul_sd_request_sequence_decodes_with_go_types() {
    let fixture = std::sync::Arc::new(Fixture::start().await);
    fixture.register("web", "web-1", "10.0.0.1", 8080).await;

    // getDatacenter (no `datacenter` in the scrape config).
    let addr = fixture.server.consul_addr().expect("the Consul listener is on");
    let (status, _, body) = fixture
        .request(Method::GET, format!("http://{addr}/v1/agent/self"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let info: AgentSelf = serde_json::from_slice(&body).unwrap_or_else(|err| {
        panic!(
            "/v1/agent/self: not map[string]map[string]interface{{}} ({err}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    let datacenter = info
        .get("Config")
        .and_then(|config| config.get("Datacenter"))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("invalid value for Config.Datacenter in {info:?}"));
    assert!(!datacenter.is_empty());

    // watchServices: the first call has no index.
    let (services, catalog_meta) = fixture
        .consul_get::<CatalogServices>(&format!("/v1/catalog/services?stale=&wait={PROMETHEUS_WAIT}"))
        .await;
    assert!(services.contains_key("web"), "{services:?}");
    assert!(catalog_meta.known_leader, "a single node knows its leader");
    assert!(catalog_meta.last_contact_ms < 60_000, "{catalog_meta:?}");

    // watchService("web"): ServiceMultipleTags(name, nil tags, passingOnly=false).
    let path = format!("/v1/health/service/web?stale=&wait={PROMETHEUS_WAIT}");
    let (entries, health_meta) = fixture.consul_get::<Vec<ServiceEntry>>(&path).await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    // The target Prometheus builds: Service.Address if set, else Node.Address; Service.Port.
    let host = if entry.service.address.is_empty() {
        &entry.node.address
    } else {
        &entry.service.address
    };
    assert_eq!(format!("{host}:{}", entry.service.port), "10.0.0.1:8080");
    assert_eq!(entry.service.id, "web-1");
    assert_eq!(entry.service.service, "web");
    assert_eq!(entry.node.datacenter, datacenter);
    assert!(!entry.node.node.is_empty());
    assert_eq!(aggregated_status(&entry.checks), "passing", "{:?}", entry.checks);
    assert!(
        entry
            .checks
            .iter()
            .any(|c| c.check_id == "serfHealth" && c.status == "passing"),
        "{:?}",
        entry.checks
    );

    // The next health call carries the index and blocks; a second instance wakes it.
    let blocked_health = {
        let fixture = std::sync::Arc::clone(&fixture);
        let path = format!(
            "/v1/health/service/web?index={}&stale=&wait={PROMETHEUS_WAIT}",
            health_meta.last_index
        );
        blocking(async move { fixture.consul_get::<Vec<ServiceEntry>>(&path).await })
    };
    // And the catalog's next call blocks too; a new service wakes it.
    let blocked_catalog = {
        let fixture = std::sync::Arc::clone(&fixture);
        let path = format!(
            "/v1/catalog/services?index={}&stale=&wait={PROMETHEUS_WAIT}",
            catalog_meta.last_index
        );
        blocking(async move { fixture.consul_get::<CatalogServices>(&path).await })
    };
    // Both queries are parked before the changes (a query sent after a change would return
    // at once and prove nothing about waking).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !blocked_health.is_finished(),
        "the health query returned with nothing changed"
    );
    assert!(
        !blocked_catalog.is_finished(),
        "the catalog query returned with nothing changed"
    );
    // A new service wakes the catalog query (any change in the namespace may: its index is
    // the namespace's), then a second instance of web wakes web's query.
    fixture.register("db", "db-1", "10.0.0.3", 5432).await;
    let (services, meta) = woken(blocked_catalog, "catalog/services").await;
    assert!(
        meta.last_index > catalog_meta.last_index,
        "{meta:?} after {catalog_meta:?}"
    );
    assert!(
        services.contains_key("db") && services.contains_key("web"),
        "{services:?}"
    );
    fixture.register("web", "web-2", "10.0.0.2", 8080).await;
    let (entries, meta) = woken(blocked_health, "health/service/web").await;
    assert!(
        meta.last_index > health_meta.last_index,
        "{meta:?} after {health_meta:?}"
    );
    assert_eq!(entries.len(), 2, "{entries:?}");
}

// A change elsewhere must not move a service's index: Prometheus compares the index with
// the last one to tell "timed out, nothing changed" from an update, and Muster's blocking
// queries wake only for their own service (Consul's wake on any write).
#[tokio::test]
async fn a_write_to_another_service_leaves_a_services_index_alone() {
    let fixture = Fixture::start().await;
    fixture.register("web", "web-1", "10.0.0.1", 8080).await;
    let path = format!("/v1/health/service/web?stale=&wait={PROMETHEUS_WAIT}");
    let (_, before) = fixture.consul_get::<Vec<ServiceEntry>>(&path).await;
    fixture.register("db", "db-1", "10.0.0.3", 5432).await;
    // Wait until the write is visible, through the catalog.
    let seen = poll(Duration::from_millis(20), || async {
        let (services, _) = fixture
            .consul_get::<CatalogServices>("/v1/catalog/services?stale=")
            .await;
        services.contains_key("db").then_some(())
    })
    .await;
    assert!(seen.is_some(), "db never appeared in the catalog");
    let (_, after) = fixture.consul_get::<Vec<ServiceEntry>>(&path).await;
    assert_eq!(
        after.last_index, before.last_index,
        "web's index moved on a write to db"
    );
}

#[test]
fn go_durations_parse_as_time_parse_duration_does() {
    assert_eq!(parse_go_duration("0"), Some(0.0));
    assert_eq!(parse_go_duration("0s"), Some(0.0));
    assert_eq!(parse_go_duration("1m30s"), Some(90e9));
    assert_eq!(parse_go_duration("120000ms"), Some(120e9));
    assert_eq!(parse_go_duration("1.5h"), Some(5_400e9));
    assert_eq!(parse_go_duration(""), None);
    assert_eq!(parse_go_duration("10"), None);
    assert_eq!(parse_go_duration("5x"), None);
}

#[test]
fn go_shaped_types_refuse_what_gos_decoder_refuses() {
    let good = json!({
        "Node": {"ID": "n", "Node": "muster-1", "Address": "127.0.0.1", "Datacenter": "dc1",
                 "TaggedAddresses": {"lan": "127.0.0.1"}, "Meta": {}, "CreateIndex": 1, "ModifyIndex": 1},
        "Service": {"ID": "web-1", "Service": "web", "Tags": [], "Meta": {}, "Port": 8080, "Address": "",
                    "TaggedAddresses": {"lan_ipv4": {"Address": "10.0.0.1", "Port": 8080}},
                    "Weights": {"Passing": 1, "Warning": 1}, "EnableTagOverride": false},
        "Checks": [{"Node": "muster-1", "CheckID": "serfHealth", "Name": "Serf Health Status",
                    "Status": "passing", "Notes": "", "Output": "", "ServiceID": "", "ServiceName": "",
                    "ServiceTags": [], "Type": "", "CreateIndex": 1, "ModifyIndex": 1,
                    "Definition": {"Interval": "0s", "Timeout": "0s", "DeregisterCriticalServiceAfter": "0s"}}],
    });
    assert!(serde_json::from_value::<ServiceEntry>(good.clone()).is_ok());
    let broken = |pointer: &str, value: Value| {
        let mut entry = good.clone();
        *entry.pointer_mut(pointer).unwrap() = value;
        serde_json::from_value::<ServiceEntry>(entry).is_err()
    };
    assert!(broken("/Service/Port", json!("8080")), "an integer as a string");
    assert!(broken("/Node/CreateIndex", json!(-1)), "a negative uint64");
    assert!(
        broken("/Node/TaggedAddresses", json!({"lan": {"Address": "x", "Port": 1}})),
        "Node.TaggedAddresses is a string map"
    );
    assert!(
        broken("/Service/TaggedAddresses", json!({"lan": "127.0.0.1"})),
        "Service.TaggedAddresses is a map of {{Address, Port}}"
    );
    assert!(
        broken("/Checks/0/Definition/Interval", json!("")),
        "an empty ReadableDuration"
    );
    let mut missing = good.clone();
    missing["Node"].as_object_mut().unwrap().remove("Meta");
    assert!(
        serde_json::from_value::<ServiceEntry>(missing).is_err(),
        "a missing map"
    );
}
