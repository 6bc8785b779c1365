//! The xDS control plane over gRPC (SPEC D5; D3 delivery paths, C3/C4 versions, G1
//! locality, S1–S3 tenants and tokens), driven by envoy-types' generated ADS client exactly
//! as a proxyless gRPC client or Envoy drives it: state-of-the-world LDS → RDS → CDS → EDS
//! for `xds:///api.prod` with ACKs, NACKs and stale nonces; Delta subscribe, unsubscribe,
//! removed resources and reconnects with `initial_resource_versions`; tokens and tenants;
//! and every stream's acknowledged revision in `GET /v1/xds/clients`.
//!
//! No wait here is a timing assertion: every receive is bounded by [`STEP`], and "nothing
//! was resent" is proven by ordering (make a later change; the very next message must be
//! that change's), never by a quiet period.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType, LbPolicy};
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::{HealthStatus, Locality, Node, address, socket_address};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, route, route_action, route_match};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_filter::ConfigType;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::{Any, Struct, Value as ProtoValue, value::Kind};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use hyper::{Method, StatusCode};
use prost::{Message, Name};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

use crate::support::{STEP, TestServer, poll};

const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
const ROUTE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub(crate) const ENDPOINT: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// The name a client on `xds:///api.prod` asks for, for all four types.
pub(crate) const API: &str = "api.prod";

/// A server with the xDS listener on a free loopback port.
async fn xds_server() -> TestServer {
    xds_server_with(|_| {}).await
}

async fn xds_server_with(configure: impl FnOnce(&mut muster_server::ServerConfig)) -> TestServer {
    TestServer::start_with(|config| {
        config.xds.addr = Some("127.0.0.1:0".parse().unwrap());
        configure(config);
    })
    .await
}

/// A node as a gRPC client's bootstrap names it; `zone` is `(region, zone)`.
pub(crate) fn node(id: &str, zone: Option<(&str, &str)>, tenant: Option<&str>) -> Node {
    Node {
        id: id.to_owned(),
        cluster: "it".to_owned(),
        locality: zone.map(|(region, zone)| Locality {
            region: region.to_owned(),
            zone: zone.to_owned(),
            sub_zone: String::new(),
        }),
        metadata: tenant.map(|tenant| Struct {
            fields: HashMap::from([(
                "tenant".to_owned(),
                ProtoValue {
                    kind: Some(Kind::StringValue(tenant.to_owned())),
                },
            )]),
        }),
        ..Node::default()
    }
}

/// A registration body: one address, ports `http` 8080 and `grpc` 9090, with `extra`
/// merged into the endpoint (locality, weight, ports).
fn record(ip: &str, extra: Value) -> Value {
    let mut endpoint = json!({
        "addresses": [{"ip": ip}],
        "ports": [
            {"name": "http", "port": 8080, "protocol": "http"},
            {"name": "grpc", "port": 9090, "protocol": "grpc"},
        ],
    });
    for (key, value) in extra.as_object().unwrap() {
        endpoint[key] = value.clone();
    }
    json!({"incarnation": 1, "endpoint": endpoint})
}

/// `PUT /v1/registry/{tenant}/prod/{service}/{instance}` (with `token`); the write's revision.
async fn put(
    server: &TestServer,
    token: Option<&str>,
    tenant: &str,
    service: &str,
    instance: &str,
    body: Value,
) -> u64 {
    write(
        server,
        token,
        Method::PUT,
        &format!("/v1/registry/{tenant}/prod/{service}/{instance}"),
        body,
    )
    .await
}

/// Registers `instance` of `default/prod/{service}` (the xDS default tenant's).
async fn register(server: &TestServer, service: &str, instance: &str, ip: &str, extra: Value) -> u64 {
    put(server, None, "default", service, instance, record(ip, extra)).await
}

/// Sets the serving state of `default/prod/{service}/{instance}`.
async fn set_serving(server: &TestServer, service: &str, instance: &str, state: &str) -> u64 {
    write(
        server,
        None,
        Method::PUT,
        &format!("/v1/registry/default/prod/{service}/{instance}/serving"),
        json!({"incarnation": 1, "state": state, "reason": "xds test"}),
    )
    .await
}

/// Drains `default/prod/{service}/{instance}` (no grace: it stays, draining).
async fn drain(server: &TestServer, service: &str, instance: &str) -> u64 {
    write(
        server,
        None,
        Method::POST,
        &format!("/v1/registry/default/prod/{service}/{instance}/drain"),
        json!({"incarnation": 1, "reason": "deploy"}),
    )
    .await
}

async fn write(server: &TestServer, token: Option<&str>, method: Method, path: &str, body: Value) -> u64 {
    let auth = token.map(|secret| format!("Bearer {secret}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    server
        .send(method, path, Some(serde_json::to_vec(&body).unwrap()), &headers)
        .await
        .expect(StatusCode::OK)
        .revision()
}

/// `GET /v1/xds/clients` (with `token`).
async fn clients(server: &TestServer, token: Option<&str>) -> Value {
    let auth = token.map(|secret| format!("Bearer {secret}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    server
        .send(Method::GET, "/v1/xds/clients", None, &headers)
        .await
        .expect(StatusCode::OK)
        .body
}

/// The `/v1/xds/clients` entry of `node_id`'s `kind` resource `name`, once `ready` holds.
async fn ledger_entry(
    server: &TestServer,
    node_id: &str,
    kind: &str,
    name: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let found = poll(std::time::Duration::from_millis(20), || async {
        let body = clients(server, None).await;
        let entry = body["clients"]
            .as_array()?
            .iter()
            .filter(|client| client["node_id"] == node_id)
            .flat_map(|client| client["resources"].as_array().cloned().unwrap_or_default())
            .find(|resource| resource["type"] == kind && resource["resource"] == name)?;
        ready(&entry).then_some(entry)
    })
    .await;
    match found {
        Some(entry) => entry,
        None => panic!(
            "no such {kind} {name} entry of {node_id} in time; /v1/xds/clients: {}",
            clients(server, None).await
        ),
    }
}

/// Decodes an `Any` of type `T`, checking its type URL.
fn unpack<T: Message + Name + Default>(any: &Any) -> T {
    assert_eq!(any.type_url, T::type_url(), "the resource's type URL");
    T::decode(any.value.as_slice()).unwrap_or_else(|err| panic!("a {}: {err}", T::full_name()))
}

/// A channel to the xDS listener.
async fn channel(addr: SocketAddr) -> Channel {
    tokio::time::timeout(STEP, Channel::from_shared(format!("http://{addr}")).unwrap().connect())
        .await
        .expect("connects in time")
        .expect("connects")
}

/// Attaches `authorization: Bearer <token>` when there is a token.
fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(secret) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {secret}").parse().unwrap());
    }
    request
}

/// A request stream fed from a channel, so the test speaks as the client goes.
fn outbound<T: Send + 'static>() -> (
    mpsc::UnboundedSender<T>,
    impl futures_util::Stream<Item = T> + Send + 'static,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    (tx, stream)
}

/// One state-of-the-world ADS stream.
pub(crate) struct Sotw {
    requests: mpsc::UnboundedSender<DiscoveryRequest>,
    responses: Streaming<DiscoveryResponse>,
    node: Node,
}

impl Sotw {
    async fn open(addr: SocketAddr, node: Node, token: Option<&str>) -> Result<Sotw, tonic::Status> {
        Sotw::open_on(channel(addr).await, node, token).await
    }

    async fn open_on(channel: Channel, node: Node, token: Option<&str>) -> Result<Sotw, tonic::Status> {
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        let (requests, stream) = outbound();
        let responses = tokio::time::timeout(STEP, client.stream_aggregated_resources(with_token(stream, token)))
            .await
            .expect("the stream opens in time")?
            .into_inner();
        Ok(Sotw {
            requests,
            responses,
            node,
        })
    }

    pub(crate) async fn connect(addr: SocketAddr, node: Node) -> Sotw {
        Sotw::open(addr, node, None).await.expect("the ADS stream opens")
    }

    /// Sends a request (ACK when `nonce` is the latest and `error` is `None`).
    fn send(&self, type_url: &str, names: &[&str], version: &str, nonce: &str, error: Option<&str>) {
        let request = DiscoveryRequest {
            version_info: version.to_owned(),
            node: Some(self.node.clone()),
            resource_names: names.iter().map(|n| (*n).to_owned()).collect(),
            type_url: type_url.to_owned(),
            response_nonce: nonce.to_owned(),
            error_detail: error.map(|message| RpcStatus {
                code: Code::InvalidArgument as i32,
                message: message.to_owned(),
                details: Vec::new(),
            }),
            ..DiscoveryRequest::default()
        };
        self.requests.send(request).expect("the stream is open");
    }

    /// The first request for `names` of `type_url`.
    fn subscribe(&self, type_url: &str, names: &[&str]) {
        self.send(type_url, names, "", "", None);
    }

    /// ACKs `response` for `names`.
    pub(crate) fn ack(&self, response: &DiscoveryResponse, names: &[&str]) {
        self.send(&response.type_url, names, &response.version_info, &response.nonce, None);
    }

    /// The next response; fails the test after [`STEP`] or on a stream error.
    pub(crate) async fn next(&mut self) -> DiscoveryResponse {
        self.try_next()
            .await
            .unwrap_or_else(|status| panic!("the stream failed: {status:?}"))
    }

    async fn try_next(&mut self) -> Result<DiscoveryResponse, tonic::Status> {
        tokio::time::timeout(STEP, self.responses.message())
            .await
            .expect("a response in time")?
            .ok_or_else(|| tonic::Status::unknown("the stream ended"))
    }

    /// Subscribes, takes the response, ACKs it and returns it.
    pub(crate) async fn fetch(&mut self, type_url: &str, names: &[&str]) -> DiscoveryResponse {
        self.subscribe(type_url, names);
        let response = self.next().await;
        assert_eq!(response.type_url, type_url, "the response answers the request's type");
        self.ack(&response, names);
        response
    }
}

/// One Delta ADS stream.
struct Delta {
    requests: mpsc::UnboundedSender<DeltaDiscoveryRequest>,
    responses: Streaming<DeltaDiscoveryResponse>,
    node: Node,
}

impl Delta {
    async fn connect(addr: SocketAddr, node: Node) -> Delta {
        let mut client = AggregatedDiscoveryServiceClient::new(channel(addr).await);
        let (requests, stream) = outbound();
        let responses = tokio::time::timeout(STEP, client.delta_aggregated_resources(stream))
            .await
            .expect("the stream opens in time")
            .expect("the Delta stream opens")
            .into_inner();
        Delta {
            requests,
            responses,
            node,
        }
    }

    fn send(&self, request: DeltaDiscoveryRequest) {
        self.requests
            .send(DeltaDiscoveryRequest {
                node: Some(self.node.clone()),
                ..request
            })
            .expect("the stream is open");
    }

    fn subscribe(&self, type_url: &str, names: &[&str], initial: &[(&str, &str)]) {
        self.send(DeltaDiscoveryRequest {
            type_url: type_url.to_owned(),
            resource_names_subscribe: names.iter().map(|n| (*n).to_owned()).collect(),
            initial_resource_versions: initial
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            ..DeltaDiscoveryRequest::default()
        });
    }

    fn unsubscribe(&self, type_url: &str, names: &[&str]) {
        self.send(DeltaDiscoveryRequest {
            type_url: type_url.to_owned(),
            resource_names_unsubscribe: names.iter().map(|n| (*n).to_owned()).collect(),
            ..DeltaDiscoveryRequest::default()
        });
    }

    fn ack(&self, response: &DeltaDiscoveryResponse) {
        self.send(DeltaDiscoveryRequest {
            type_url: response.type_url.clone(),
            response_nonce: response.nonce.clone(),
            ..DeltaDiscoveryRequest::default()
        });
    }

    /// The next response, ACKed.
    async fn next(&mut self) -> DeltaDiscoveryResponse {
        let response = tokio::time::timeout(STEP, self.responses.message())
            .await
            .expect("a Delta response in time")
            .unwrap_or_else(|status| panic!("the Delta stream failed: {status:?}"))
            .expect("the Delta stream is open");
        self.ack(&response);
        response
    }

    /// The next response that carries resources or removals (skipping empty ones).
    async fn next_change(&mut self) -> DeltaDiscoveryResponse {
        loop {
            let response = self.next().await;
            if !response.resources.is_empty() || !response.removed_resources.is_empty() {
                return response;
            }
        }
    }
}

/// `resource name → version` of a Delta response.
fn versions(response: &DeltaDiscoveryResponse) -> HashMap<String, String> {
    response
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.version.clone()))
        .collect()
}

/// The one ClusterLoadAssignment of an EDS response.
pub(crate) fn assignment(response: &DiscoveryResponse) -> ClusterLoadAssignment {
    assert_eq!(response.type_url, ENDPOINT);
    assert_eq!(response.resources.len(), 1, "one assignment: {response:?}");
    unpack(&response.resources[0])
}

/// One endpoint of an assignment as the test compares it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    ip: String,
    port: u32,
    health: HealthStatus,
    weight: Option<u32>,
    priority: u32,
    zone: String,
}

fn endpoints(cla: &ClusterLoadAssignment) -> Vec<Seen> {
    let mut seen = Vec::new();
    for locality in &cla.endpoints {
        for lb in &locality.lb_endpoints {
            let Some(HostIdentifier::Endpoint(endpoint)) = &lb.host_identifier else {
                panic!("an endpoint without an address: {lb:?}");
            };
            let Some(address::Address::SocketAddress(socket)) =
                endpoint.address.as_ref().and_then(|a| a.address.as_ref())
            else {
                panic!("not a socket address: {endpoint:?}");
            };
            let Some(socket_address::PortSpecifier::PortValue(port)) = socket.port_specifier else {
                panic!("no port: {socket:?}");
            };
            seen.push(Seen {
                ip: socket.address.clone(),
                port,
                health: HealthStatus::try_from(lb.health_status).expect("a known health status"),
                weight: lb.load_balancing_weight.as_ref().map(|w| w.value),
                priority: locality.priority,
                zone: locality.locality.as_ref().map(|l| l.zone.clone()).unwrap_or_default(),
            });
        }
    }
    seen.sort();
    seen
}

fn health_of(cla: &ClusterLoadAssignment, ip: &str) -> HealthStatus {
    endpoints(cla)
        .into_iter()
        .find(|e| e.ip == ip)
        .unwrap_or_else(|| panic!("{ip} is not in {cla:?}"))
        .health
}

/// The whole gRPC client walk for `xds:///api.prod` (SPEC D5): a Listener of that exact
/// name whose `api_listener` is an HttpConnectionManager with RDS over ADS and the Router
/// filter last; a RouteConfiguration whose one virtual host matches the name and routes to
/// a cluster of the same name; a Cluster of type EDS over ADS; and the ClusterLoadAssignment
/// with the `grpc` port (else the first), endpoint and locality weights, every version the
/// service's revision.
#[tokio::test]
async fn a_grpc_client_walks_lds_rds_cds_eds_for_api_prod_at_the_services_revision() {
    let server = xds_server().await;
    register(
        &server,
        "api",
        "a",
        "10.0.0.1",
        json!({"weight": 3, "locality": {"region": "r1", "zone": "a"}}),
    )
    .await;
    register(
        &server,
        "api",
        "b",
        "10.0.0.2",
        json!({"weight": 5, "locality": {"region": "r1", "zone": "a"},
               "ports": [{"name": "http", "port": 8081, "protocol": "http"}]}),
    )
    .await;
    let service_revision = server
        .get("/v1/registry/default/prod/api")
        .await
        .expect(StatusCode::OK)
        .body["service_revision"]
        .as_u64()
        .unwrap();
    let mut ads = Sotw::connect(server.xds_addr(), node("walker", Some(("r1", "a")), None)).await;

    let lds = ads.fetch(LISTENER, &[API]).await;
    assert_eq!(lds.resources.len(), 1, "{lds:?}");
    let listener: Listener = unpack(&lds.resources[0]);
    assert_eq!(listener.name, API);
    let hcm: HttpConnectionManager = unpack(
        listener
            .api_listener
            .as_ref()
            .and_then(|a| a.api_listener.as_ref())
            .expect("an api_listener"),
    );
    let Some(RouteSpecifier::Rds(rds)) = &hcm.route_specifier else {
        panic!("RDS, not {:?}", hcm.route_specifier);
    };
    assert_eq!(rds.route_config_name, API);
    assert!(matches!(
        rds.config_source
            .as_ref()
            .and_then(|c| c.config_source_specifier.as_ref()),
        Some(ConfigSourceSpecifier::Ads(_))
    ));
    let last = hcm.http_filters.last().expect("http filters");
    let Some(ConfigType::TypedConfig(router)) = &last.config_type else {
        panic!("the last filter has no typed config: {last:?}");
    };
    assert_eq!(router.type_url, Router::type_url(), "the Router filter comes last");

    let rds = ads.fetch(ROUTE, &[API]).await;
    assert_eq!(rds.resources.len(), 1);
    let routes: RouteConfiguration = unpack(&rds.resources[0]);
    assert_eq!(routes.name, API);
    assert_eq!(routes.virtual_hosts.len(), 1);
    let host = &routes.virtual_hosts[0];
    assert_eq!(host.domains, [API]);
    let route = host.routes.first().expect("a route");
    assert!(matches!(
        route.r#match.as_ref().and_then(|m| m.path_specifier.as_ref()),
        Some(route_match::PathSpecifier::Prefix(prefix)) if prefix.is_empty()
    ));
    let Some(route::Action::Route(action)) = &route.action else {
        panic!("a route action: {route:?}");
    };
    assert_eq!(
        action.cluster_specifier,
        Some(route_action::ClusterSpecifier::Cluster(API.to_owned()))
    );

    // A name that does not exist is left out of a SotW response, not an error.
    let cds = ads.fetch(CLUSTER, &[API, "ghost.prod"]).await;
    assert_eq!(cds.resources.len(), 1, "only the known service: {cds:?}");
    let cluster: Cluster = unpack(&cds.resources[0]);
    assert_eq!(cluster.name, API);
    assert_eq!(
        cluster.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32))
    );
    assert_eq!(cluster.lb_policy, LbPolicy::RoundRobin as i32);
    let eds_config = cluster.eds_cluster_config.as_ref().expect("an EDS config");
    assert_eq!(eds_config.service_name, API);
    assert!(matches!(
        eds_config
            .eds_config
            .as_ref()
            .and_then(|c| c.config_source_specifier.as_ref()),
        Some(ConfigSourceSpecifier::Ads(_))
    ));

    let eds = ads.fetch(ENDPOINT, &[API]).await;
    assert_eq!(
        eds.version_info,
        service_revision.to_string(),
        "version_info = the service's revision"
    );
    let cla = assignment(&eds);
    assert_eq!(cla.cluster_name, API);
    assert_eq!(
        endpoints(&cla),
        [
            Seen {
                ip: "10.0.0.1".into(),
                port: 9090,
                health: HealthStatus::Healthy,
                weight: Some(3),
                priority: 0,
                zone: "a".into()
            },
            Seen {
                ip: "10.0.0.2".into(),
                port: 8081,
                health: HealthStatus::Healthy,
                weight: Some(5),
                priority: 0,
                zone: "a".into()
            },
        ],
        "the grpc port, else the first; endpoint weights"
    );
    assert_eq!(cla.endpoints.len(), 1, "one locality");
    assert_eq!(
        cla.endpoints[0].load_balancing_weight.as_ref().map(|w| w.value),
        Some(8),
        "3 + 5"
    );
}

/// Health mapping (SPEC D5, M3): ready, degraded and draining map to their xDS names and
/// every other state to UNHEALTHY, never UNKNOWN (which gRPC clients treat as usable).
#[tokio::test]
async fn serving_states_map_to_xds_health_and_never_to_unknown() {
    let server = xds_server().await;
    for (instance, ip) in [
        ("ready", "10.0.1.1"),
        ("degraded", "10.0.1.2"),
        ("draining", "10.0.1.3"),
        ("starting", "10.0.1.4"),
        ("not-serving", "10.0.1.5"),
        ("unknown", "10.0.1.6"),
    ] {
        register(&server, "api", instance, ip, json!({})).await;
    }
    set_serving(&server, "api", "degraded", "degraded").await;
    drain(&server, "api", "draining").await;
    set_serving(&server, "api", "starting", "starting").await;
    set_serving(&server, "api", "not-serving", "not_serving").await;
    let last = set_serving(&server, "api", "unknown", "unknown").await;

    let mut ads = Sotw::connect(server.xds_addr(), node("health", None, None)).await;
    let eds = ads.fetch(ENDPOINT, &[API]).await;
    assert_eq!(eds.version_info, last.to_string());
    let cla = assignment(&eds);
    let health: Vec<(String, HealthStatus)> = endpoints(&cla).into_iter().map(|e| (e.ip, e.health)).collect();
    assert_eq!(
        health,
        [
            ("10.0.1.1".to_owned(), HealthStatus::Healthy),
            ("10.0.1.2".to_owned(), HealthStatus::Degraded),
            ("10.0.1.3".to_owned(), HealthStatus::Draining),
            ("10.0.1.4".to_owned(), HealthStatus::Unhealthy),
            ("10.0.1.5".to_owned(), HealthStatus::Unhealthy),
            ("10.0.1.6".to_owned(), HealthStatus::Unhealthy),
        ]
    );
}

/// Priority from zone proximity to the node (SPEC G1): tiers ranked densely by (the
/// endpoint's failover priority, same zone < same region < other region), so a node in
/// zone `a` uses zone `b` only while zone `a` has nothing; a node without a locality gets
/// the dense rank of the failover priority alone.
#[tokio::test]
async fn priority_follows_zone_proximity_to_the_nodes_locality() {
    let server = xds_server().await;
    for (instance, ip, locality) in [
        ("a", "10.0.2.1", json!({"region": "r1", "zone": "a"})),
        ("b", "10.0.2.2", json!({"region": "r1", "zone": "b"})),
        ("c", "10.0.2.3", json!({"region": "r2", "zone": "c"})),
        (
            "a-backup",
            "10.0.2.4",
            json!({"region": "r1", "zone": "a", "priority": 5}),
        ),
    ] {
        register(&server, "api", instance, ip, json!({ "locality": locality })).await;
    }

    let mut near_a = Sotw::connect(server.xds_addr(), node("in-a", Some(("r1", "a")), None)).await;
    let cla = assignment(&near_a.fetch(ENDPOINT, &[API]).await);
    let tiers: Vec<(String, u32)> = endpoints(&cla).into_iter().map(|e| (e.ip, e.priority)).collect();
    assert_eq!(
        tiers,
        [
            ("10.0.2.1".to_owned(), 0),
            ("10.0.2.2".to_owned(), 1),
            ("10.0.2.3".to_owned(), 2),
            ("10.0.2.4".to_owned(), 3),
        ],
        "(priority 0: zone a, region r1, elsewhere), then priority 5's zone a"
    );

    let mut nowhere = Sotw::connect(server.xds_addr(), node("nowhere", None, None)).await;
    let cla = assignment(&nowhere.fetch(ENDPOINT, &[API]).await);
    let tiers: Vec<(String, u32)> = endpoints(&cla).into_iter().map(|e| (e.ip, e.priority)).collect();
    assert_eq!(
        tiers,
        [
            ("10.0.2.1".to_owned(), 0),
            ("10.0.2.2".to_owned(), 0),
            ("10.0.2.3".to_owned(), 0),
            ("10.0.2.4".to_owned(), 1),
        ],
        "without a node locality: the dense rank of the failover priority"
    );
}

/// ACK then change (SPEC C3): after an ACK of version R, a new endpoint pushes an EDS
/// response with a higher version, the write's revision, and `/v1/xds/clients` shows the
/// stream's acknowledged revision once it ACKs that too.
#[tokio::test]
async fn an_acked_stream_gets_each_endpoint_change_at_a_higher_version() {
    let server = xds_server().await;
    let first = register(&server, "api", "a", "10.0.3.1", json!({})).await;
    let mut ads = Sotw::connect(server.xds_addr(), node("acker", None, None)).await;
    let eds = ads.fetch(ENDPOINT, &[API]).await;
    assert_eq!(eds.version_info, first.to_string());
    ledger_entry(&server, "acker", "endpoint", API, |e| e["acked_revision"] == first).await;

    let second = register(&server, "api", "b", "10.0.3.2", json!({})).await;
    let pushed = ads.next().await;
    assert_eq!(pushed.version_info, second.to_string());
    assert!(second > first);
    assert_ne!(pushed.nonce, eds.nonce, "a new nonce per response");
    let ips: Vec<String> = endpoints(&assignment(&pushed)).into_iter().map(|e| e.ip).collect();
    assert_eq!(ips, ["10.0.3.1", "10.0.3.2"]);
    ads.ack(&pushed, &[API]);
    ledger_entry(&server, "acker", "endpoint", API, |e| e["acked_revision"] == second).await;
}

/// Convergence (SPEC O3): an xDS client's ACK of an endpoint resource is its word that it
/// applied the service at that revision; it counts as a subscriber (`xds:NODE`, its zone as
/// the cohort) and a change it ACKs late makes it a straggler until then.
#[tokio::test]
async fn acked_endpoint_resources_count_as_convergence_subscribers() {
    let server = xds_server().await;
    let first = register(&server, "api", "a", "10.0.3.1", json!({})).await;
    let mut ads = Sotw::connect(server.xds_addr(), node("acker", Some(("eu", "eu-1a")), None)).await;
    ads.fetch(ENDPOINT, &[API]).await;
    let summary = |path: &'static str| {
        let server = &server;
        async move { server.get(path).await.expect(StatusCode::OK).body }
    };
    let counted = poll(Duration::from_millis(20), || async {
        let body = summary("/v1/convergence/default/prod/api").await;
        // The DNS listener (tenant `default`) counts too, by path `dns`.
        let xds = json!({"path": "xds", "live": 1, "applied": 1});
        body["paths"]
            .as_array()
            .is_some_and(|paths| paths.contains(&xds))
            .then_some(body)
    })
    .await
    .expect("the ACK counts");
    let zoned = json!({"cohort": "zone=eu-1a", "live": 1, "applied": 1});
    assert!(
        counted["cohorts"].as_array().unwrap().contains(&zoned),
        "{}",
        counted["cohorts"]
    );
    assert_eq!(counted["revision"], first);

    let second = register(&server, "api", "b", "10.0.3.2", json!({})).await;
    let pushed = ads.next().await;
    let behind = summary("/v1/convergence/default/prod/api").await;
    assert_eq!(behind["stragglers_total"], 1);
    assert_eq!(
        behind["stragglers"][0]["client_id"], "xds:acker",
        "pushed, not yet ACKed"
    );
    ads.ack(&pushed, &[API]);
    let caught_up = poll(Duration::from_millis(20), || async {
        let body = summary("/v1/convergence/default/prod/api").await;
        (body["applied"] == 1 && body["target"] == second).then_some(body)
    })
    .await
    .expect("the second ACK counts");
    assert_eq!(
        caught_up["latency"]["samples"], 1,
        "commit→ACK of the second change measured"
    );
}

/// NACK (SPEC C3): a request with the latest nonce and an `error_detail` keeps the previous
/// state, is recorded (`last_nack` in `/v1/xds/clients`, with the refused revision and the
/// message), and is not answered by a resend: the next message is the next change's.
#[tokio::test]
async fn a_nack_is_recorded_and_nothing_is_resent_until_the_next_change() {
    let server = xds_server().await;
    let first = register(&server, "api", "a", "10.0.4.1", json!({})).await;
    let mut ads = Sotw::connect(server.xds_addr(), node("nacker", None, None)).await;
    let accepted = ads.fetch(ENDPOINT, &[API]).await;
    ledger_entry(&server, "nacker", "endpoint", API, |e| e["acked_revision"] == first).await;

    let refused = register(&server, "api", "b", "10.0.4.2", json!({})).await;
    let pushed = ads.next().await;
    assert_eq!(pushed.version_info, refused.to_string());
    // A NACK names the last version the client accepted and the nonce of what it refuses.
    ads.send(
        ENDPOINT,
        &[API],
        &accepted.version_info,
        &pushed.nonce,
        Some("bad weights"),
    );
    let entry = ledger_entry(&server, "nacker", "endpoint", API, |e| !e["last_nack"].is_null()).await;
    assert_eq!(entry["last_nack"]["revision"], refused, "{entry}");
    assert!(
        entry["last_nack"]["message"].as_str().unwrap().contains("bad weights"),
        "{entry}"
    );
    assert_eq!(
        entry["acked_revision"], first,
        "a NACK keeps the previous state: {entry}"
    );
    assert!(entry["nacks"].as_u64().unwrap() >= 1, "{entry}");

    let next = register(&server, "api", "c", "10.0.4.3", json!({})).await;
    let after = ads.next().await;
    assert_eq!(
        after.version_info,
        next.to_string(),
        "the first message after the NACK is the next change, not a resend of {refused}"
    );
    assert_eq!(endpoints(&assignment(&after)).len(), 3);
}

/// Stale nonces (SPEC C3): a request whose nonce is not the latest sent for its type is
/// ignored, whatever it says: its NACK is not recorded and its new resource names are not
/// subscribed (the next push carries only the subscribed name).
#[tokio::test]
async fn a_request_with_a_stale_nonce_is_ignored() {
    let server = xds_server().await;
    let first = register(&server, "api", "a", "10.0.5.1", json!({})).await;
    register(&server, "web", "w", "10.0.5.9", json!({})).await;
    let mut ads = Sotw::connect(server.xds_addr(), node("stale", None, None)).await;
    let old = ads.fetch(ENDPOINT, &[API]).await;
    ledger_entry(&server, "stale", "endpoint", API, |e| e["acked_revision"] == first).await;
    let second = register(&server, "api", "b", "10.0.5.2", json!({})).await;
    let pushed = ads.next().await;
    assert_eq!(pushed.version_info, second.to_string());
    ads.ack(&pushed, &[API]);
    ledger_entry(&server, "stale", "endpoint", API, |e| e["acked_revision"] == second).await;

    // The old nonce, a NACK and a new name: all of it ignored.
    ads.send(
        ENDPOINT,
        &[API, "web.prod"],
        &old.version_info,
        &old.nonce,
        Some("stale complaint"),
    );
    let third = register(&server, "api", "c", "10.0.5.3", json!({})).await;
    let next = ads.next().await;
    assert_eq!(
        next.version_info,
        third.to_string(),
        "no answer to the stale request came first"
    );
    assert_eq!(next.resources.len(), 1, "web.prod was not subscribed: {next:?}");
    assert_eq!(assignment(&next).cluster_name, API);
    ads.ack(&next, &[API]);
    let entry = ledger_entry(&server, "stale", "endpoint", API, |e| e["acked_revision"] == third).await;
    assert!(entry["last_nack"].is_null(), "the stale NACK was not recorded: {entry}");
}

/// Drain semantics (SPEC D5, L5): an endpoint that turns `draining` is DRAINING in the very
/// next EDS push, not some later one.
#[tokio::test]
async fn a_draining_endpoint_is_draining_in_the_very_next_push() {
    let server = xds_server().await;
    register(&server, "api", "a", "10.0.6.1", json!({})).await;
    register(&server, "api", "b", "10.0.6.2", json!({})).await;
    let mut ads = Sotw::connect(server.xds_addr(), node("drainer", None, None)).await;
    let cla = assignment(&ads.fetch(ENDPOINT, &[API]).await);
    assert_eq!(health_of(&cla, "10.0.6.1"), HealthStatus::Healthy);

    let drained = drain(&server, "api", "a").await;
    let pushed = ads.next().await;
    assert_eq!(pushed.version_info, drained.to_string());
    let cla = assignment(&pushed);
    assert_eq!(health_of(&cla, "10.0.6.1"), HealthStatus::Draining);
    assert_eq!(
        health_of(&cla, "10.0.6.2"),
        HealthStatus::Healthy,
        "the other keeps serving"
    );
}

/// Safe emptiness (SPEC D5): a known service whose endpoints are all non-ready gets an
/// assignment with no HEALTHY endpoint, a real response, never an error or a missing
/// resource that a client would keep its old endpoints for.
#[tokio::test]
async fn a_service_with_nothing_ready_gets_an_assignment_without_healthy_endpoints() {
    let server = xds_server().await;
    register(&server, "api", "a", "10.0.7.1", json!({})).await;
    register(&server, "api", "b", "10.0.7.2", json!({})).await;
    let mut ads = Sotw::connect(server.xds_addr(), node("empty", None, None)).await;
    ads.fetch(ENDPOINT, &[API]).await;

    set_serving(&server, "api", "a", "not_serving").await;
    let pushed = ads.next().await;
    ads.ack(&pushed, &[API]);
    let last = drain(&server, "api", "b").await;
    let pushed = ads.next().await;
    assert_eq!(pushed.version_info, last.to_string(), "the last change's push");
    let cla = assignment(&pushed);
    assert_eq!(cla.cluster_name, API);
    let healthy: Vec<Seen> = endpoints(&cla)
        .into_iter()
        .filter(|e| e.health == HealthStatus::Healthy || e.health == HealthStatus::Unknown)
        .collect();
    assert!(healthy.is_empty(), "nothing usable: {cla:?}");
}

/// Delta subscribe (SPEC D5, C3): CDS and EDS names subscribed on a Delta stream arrive as
/// resources whose version is the service's revision; a name that does not exist (unknown,
/// or not `<service>.<namespace>`) is listed in `removed_resources`.
#[tokio::test]
async fn delta_subscriptions_get_versions_and_unknown_names_come_back_removed() {
    let server = xds_server().await;
    let api = register(&server, "api", "a", "10.0.8.1", json!({})).await;
    let web = register(&server, "web", "w", "10.0.8.2", json!({})).await;
    let mut delta = Delta::connect(server.xds_addr(), node("delta", None, None)).await;

    delta.subscribe(CLUSTER, &[API, "web.prod"], &[]);
    let cds = delta.next_change().await;
    assert_eq!(cds.type_url, CLUSTER);
    assert_eq!(
        versions(&cds),
        HashMap::from([
            (API.to_owned(), api.to_string()),
            ("web.prod".to_owned(), web.to_string())
        ])
    );
    for resource in &cds.resources {
        let cluster: Cluster = unpack(resource.resource.as_ref().expect("a resource body"));
        assert_eq!(cluster.name, resource.name);
    }
    assert!(!cds.system_version_info.is_empty(), "the registry revision");

    delta.subscribe(ENDPOINT, &[API], &[]);
    let eds = delta.next_change().await;
    assert_eq!(eds.type_url, ENDPOINT);
    assert_eq!(versions(&eds), HashMap::from([(API.to_owned(), api.to_string())]));
    let cla: ClusterLoadAssignment = unpack(eds.resources[0].resource.as_ref().unwrap());
    assert_eq!(endpoints(&cla)[0].ip, "10.0.8.1");

    delta.subscribe(ENDPOINT, &["ghost.prod", "not-a-name"], &[]);
    let removed = delta.next_change().await;
    let mut names = removed.removed_resources.clone();
    names.sort();
    assert_eq!(names, ["ghost.prod", "not-a-name"], "{removed:?}");
    assert!(removed.resources.is_empty(), "{removed:?}");
}

/// Delta unsubscribe (SPEC D5): after unsubscribing a name, its changes are pushed no more;
/// a change of the name still subscribed is (and comes first, though it was made second).
#[tokio::test]
async fn a_delta_unsubscribe_stops_pushes_for_that_name() {
    let server = xds_server().await;
    register(&server, "api", "a", "10.0.9.1", json!({})).await;
    register(&server, "web", "w", "10.0.9.2", json!({})).await;
    let mut delta = Delta::connect(server.xds_addr(), node("unsub", None, None)).await;
    delta.subscribe(ENDPOINT, &[API, "web.prod"], &[]);
    let mut seen = HashMap::new();
    while seen.len() < 2 {
        seen.extend(versions(&delta.next_change().await));
    }

    delta.unsubscribe(ENDPOINT, &["web.prod"]);
    // An unsubscribe may be answered with an empty response; the probe write below tells.
    register(&server, "web", "w2", "10.0.9.3", json!({})).await;
    let api = register(&server, "api", "b", "10.0.9.4", json!({})).await;
    let next = delta.next_change().await;
    assert_eq!(
        versions(&next),
        HashMap::from([(API.to_owned(), api.to_string())]),
        "web.prod's change is not pushed: {next:?}"
    );
}

/// Delta reconnect (SPEC D5, C3): `initial_resource_versions` equal to the current
/// versions means nothing is resent (the first resource to arrive is a later change's); a
/// stale version means the resource is sent again at once.
#[tokio::test]
async fn a_delta_reconnect_with_current_versions_is_not_resent_and_a_stale_one_is() {
    let server = xds_server().await;
    let first = register(&server, "api", "a", "10.0.10.1", json!({})).await;
    let node_of = || node("reconnect", None, None);
    {
        let mut delta = Delta::connect(server.xds_addr(), node_of()).await;
        delta.subscribe(ENDPOINT, &[API], &[]);
        assert_eq!(versions(&delta.next_change().await)[API], first.to_string());
    }

    let current = first.to_string();
    let mut delta = Delta::connect(server.xds_addr(), node_of()).await;
    delta.subscribe(ENDPOINT, &[API], &[(API, &current)]);
    let later = register(&server, "api", "b", "10.0.10.2", json!({})).await;
    let next = delta.next_change().await;
    assert_eq!(
        versions(&next),
        HashMap::from([(API.to_owned(), later.to_string())]),
        "not a resend of {first}: the later change"
    );
    drop(delta);

    let mut stale = Delta::connect(server.xds_addr(), node_of()).await;
    stale.subscribe(ENDPOINT, &[API], &[(API, &current)]);
    let resent = stale.next_change().await;
    assert_eq!(
        versions(&resent),
        HashMap::from([(API.to_owned(), later.to_string())]),
        "version {first} is stale: sent again"
    );
}

/// Bootstraps the secured server and makes a token per tenant, allowed everything there.
async fn tenants(server: &TestServer) -> (String, String) {
    let operator = operator(server).await;
    let secret = |body: Value| body["secret"].as_str().unwrap().to_owned();
    let acme = secret(token(server, &operator, "acme").await);
    let other = secret(token(server, &operator, "other").await);
    (acme, other)
}

/// The operator token's secret, from the one-time bootstrap.
async fn operator(server: &TestServer) -> String {
    server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A token with every right in `tenant`, made by `operator`: its reply (`secret`, `accessor`).
async fn token(server: &TestServer, operator: &str, tenant: &str) -> Value {
    let auth = format!("Bearer {operator}");
    let body = json!({"tenant": tenant, "allow": ["*/*=*"], "deny": []});
    server
        .send(
            Method::POST,
            "/v1/acl/tokens",
            Some(serde_json::to_vec(&body).unwrap()),
            &[("authorization", auth.as_str())],
        )
        .await
        .expect(StatusCode::CREATED)
        .body
}

/// The first error of a stream opened with `token` and one EDS request for `api.prod`.
async fn refusal(addr: SocketAddr, node: Node, token: Option<&str>) -> tonic::Status {
    match Sotw::open(addr, node, token).await {
        Err(status) => status,
        Ok(mut ads) => {
            ads.subscribe(ENDPOINT, &[API]);
            match ads.try_next().await {
                Err(status) => status,
                Ok(response) => panic!("expected a refusal, got {response:?}"),
            }
        }
    }
}

/// Auth (SPEC S1): with `[auth] enabled`, an ADS stream without a token (or with an
/// unknown one) ends UNAUTHENTICATED before any resource is sent.
#[tokio::test]
async fn with_auth_on_a_stream_without_a_token_is_unauthenticated() {
    let server = xds_server_with(|config| config.auth.enabled = true).await;
    let addr = server.xds_addr();
    assert_eq!(
        refusal(addr, node("anon", None, None), None).await.code(),
        Code::Unauthenticated
    );
    assert_eq!(
        refusal(addr, node("forger", None, None), Some("not-a-token"))
            .await
            .code(),
        Code::Unauthenticated
    );
}

/// Tenant isolation (SPEC S3): a token confined to `acme` sees acme's `api.prod`, never
/// `other`'s service of the same name nor a service only `other` has; naming tenant
/// `other` in the node metadata is PERMISSION_DENIED; and `/v1/xds/clients` shows a caller
/// only its tenant's streams.
#[tokio::test]
async fn a_tenants_token_never_sees_another_tenants_services() {
    let server = xds_server_with(|config| config.auth.enabled = true).await;
    let (acme, other) = tenants(&server).await;
    let acme_api = put(&server, Some(&acme), "acme", "api", "a", record("10.1.0.1", json!({}))).await;
    put(
        &server,
        Some(&other),
        "other",
        "api",
        "a",
        record("10.2.0.1", json!({})),
    )
    .await;
    put(
        &server,
        Some(&other),
        "other",
        "secret",
        "s",
        record("10.2.0.2", json!({})),
    )
    .await;
    let addr = server.xds_addr();

    let mut ads = Sotw::open(addr, node("acme-client", None, None), Some(&acme))
        .await
        .expect("acme's token opens a stream");
    let eds = ads.fetch(ENDPOINT, &[API]).await;
    assert_eq!(eds.version_info, acme_api.to_string());
    let ips: Vec<String> = endpoints(&assignment(&eds)).into_iter().map(|e| e.ip).collect();
    assert_eq!(ips, ["10.1.0.1"], "acme's endpoint only");
    let cds = ads.fetch(CLUSTER, &[API, "secret.prod"]).await;
    let names: Vec<String> = cds.resources.iter().map(|r| unpack::<Cluster>(r).name).collect();
    assert_eq!(names, [API], "other's secret.prod does not exist for acme");
    // `*`: this stream named clusters already, so an empty list would unsubscribe.
    let wildcard = ads.fetch(CLUSTER, &["*"]).await;
    let names: Vec<String> = wildcard.resources.iter().map(|r| unpack::<Cluster>(r).name).collect();
    assert_eq!(names, [API], "wildcard CDS lists acme's services only");

    let denied = refusal(addr, node("sneaky", None, Some("other")), Some(&acme)).await;
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");

    let mut theirs = Sotw::open(addr, node("other-client", None, None), Some(&other))
        .await
        .expect("other's token opens a stream");
    theirs.fetch(ENDPOINT, &[API]).await;
    let seen_by_acme = poll(std::time::Duration::from_millis(20), || async {
        let body = clients(&server, Some(&acme)).await;
        let ids: Vec<String> = body["clients"]
            .as_array()?
            .iter()
            .map(|c| c["node_id"].as_str().unwrap_or_default().to_owned())
            .collect();
        ids.contains(&"acme-client".to_owned()).then_some(ids)
    })
    .await
    .expect("acme's stream is listed");
    assert!(!seen_by_acme.contains(&"other-client".to_owned()), "{seen_by_acme:?}");
}

/// SPEC S3: a token allowed only `prod/x=read,watch` in acme sees only the streams that follow
/// nothing but `x.prod` of acme, in `/v1/xds/clients` and in the metrics; never a stream that
/// also follows acme's `y.prod`, one of acme's that follows only `y.prod`, nor another
/// tenant's `x.prod`.
#[tokio::test]
async fn a_one_service_token_sees_only_the_streams_and_series_of_its_service() {
    let server = xds_server_with(|config| config.auth.enabled = true).await;
    let operator = operator(&server).await;
    for (tenant, service, ip) in [
        ("acme", "x", "10.1.0.1"),
        ("acme", "y", "10.1.0.2"),
        ("other", "x", "10.2.0.1"),
    ] {
        put(&server, Some(&operator), tenant, service, "a", record(ip, json!({}))).await;
    }
    let auth = format!("Bearer {operator}");
    let one_service = server
        .send(
            Method::POST,
            "/v1/acl/tokens",
            Some(serde_json::to_vec(&json!({"tenant": "acme", "allow": ["prod/x=read,watch"]})).unwrap()),
            &[("authorization", auth.as_str())],
        )
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let addr = server.xds_addr();
    let mut streams = Vec::new();
    for (id, tenant, names) in [
        ("acme-x", "acme", &["x.prod"][..]),
        ("acme-y", "acme", &["y.prod"][..]),
        ("acme-xy", "acme", &["x.prod", "y.prod"][..]),
        ("other-x", "other", &["x.prod"][..]),
    ] {
        let mut ads = Sotw::open(addr, node(id, None, Some(tenant)), Some(&operator))
            .await
            .expect("the operator opens a stream for any tenant");
        ads.fetch(ENDPOINT, names).await;
        streams.push(ads);
    }
    // Every stream with its endpoints sent, as the operator sees them.
    poll(std::time::Duration::from_millis(20), || async {
        let body = clients(&server, Some(&operator)).await;
        let ready = body["clients"]
            .as_array()?
            .iter()
            .filter(|c| c["resources"].as_array().is_some_and(|r| !r.is_empty()))
            .count();
        (ready == 4).then_some(())
    })
    .await
    .expect("the operator sees all four streams");

    let seen = clients(&server, Some(&one_service)).await;
    let ids: Vec<&str> = seen["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["node_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["acme-x"], "{seen}");

    // The metrics need the `metrics` right (DECISIONS "Metrics and tenant-wide views"): the
    // one-service token is refused; acme's metrics token sees acme's streams and series only.
    let auth = format!("Bearer {one_service}");
    let (status, _) = server
        .get_text_with("/metrics", &[("authorization", auth.as_str())])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, acme_metrics) =
        crate::support::mint_token(&server, &operator, json!({"tenant": "acme", "allow": ["*/*=metrics"]})).await;
    let auth = format!("Bearer {acme_metrics}");
    let (status, metrics) = server
        .get_text_with("/metrics", &[("authorization", auth.as_str())])
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        metrics.lines().any(|l| l == "muster_xds_streams{protocol=\"sotw\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("muster_xds_subscribers{tenant=\"acme\",namespace=\"prod\",service=\"y\"}")),
        "{metrics}"
    );
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        assert!(!line.contains("\"other\""), "another tenant's series: {line}");
    }
    drop(streams);
}

/// `GET /v1/xds/clients` (SPEC D5, O2): per stream the node id, tenant, protocol and per
/// resource its type, name, sent/acked/latest revisions, the age of the ACK and the last
/// NACK; `acked_revision` is null until the first ACK; a closed stream drops out.
#[tokio::test]
async fn the_clients_page_shows_each_streams_acked_revision_per_resource() {
    let server = xds_server().await;
    let revision = register(&server, "api", "a", "10.0.11.1", json!({})).await;
    let mut ads = Sotw::connect(server.xds_addr(), node("ledger-1", None, None)).await;
    ads.subscribe(ENDPOINT, &[API]);
    let eds = ads.next().await;
    let before_ack = ledger_entry(&server, "ledger-1", "endpoint", API, |e| e["sent_revision"] == revision).await;
    assert!(before_ack["acked_revision"].is_null(), "not acked yet: {before_ack}");

    ads.ack(&eds, &[API]);
    let entry = ledger_entry(&server, "ledger-1", "endpoint", API, |e| {
        e["acked_revision"] == revision
    })
    .await;
    assert_eq!(entry["type_url"], ENDPOINT);
    assert_eq!(entry["latest_revision"], revision);
    assert!(entry["age_ms"].is_u64(), "{entry}");
    assert!(entry["last_nack"].is_null());
    assert_eq!(entry["nacks"], 0);
    let body = clients(&server, None).await;
    assert!(body["revision"].as_u64().unwrap() >= revision);
    let client = body["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["node_id"] == "ledger-1")
        .unwrap()
        .clone();
    assert_eq!(client["protocol"], "sotw");
    assert_eq!(client["tenant"], "default");
    assert_eq!(client["cluster"], "it");
    assert!(client["stream"].is_u64() && client["connected_ms"].is_u64(), "{client}");

    // The same, as aggregates (SPEC O1): no node ids in the labels.
    let (status, metrics) = server.get_text("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        "muster_xds_streams{protocol=\"sotw\"} 1",
        "muster_xds_subscribers{tenant=\"default\",namespace=\"prod\",service=\"api\"} 1",
        "muster_xds_subscribers_at_latest{tenant=\"default\",namespace=\"prod\",service=\"api\"} 1",
        "muster_xds_nacks_total{type=\"endpoint\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} missing:\n{metrics}");
    }
    assert!(!metrics.contains("ledger-1"), "no client id in the metrics");

    drop(ads);
    let gone = poll(std::time::Duration::from_millis(20), || async {
        let body = clients(&server, None).await;
        let listed = body["clients"].as_array()?.iter().any(|c| c["node_id"] == "ledger-1");
        (!listed).then_some(())
    })
    .await;
    assert!(gone.is_some(), "a closed stream drops out of /v1/xds/clients");
}

/// Mutual TLS (SPEC S1): with `[tls]` and a client CA (certificates optional), the xDS
/// listener speaks TLS with ALPN h2 (which gRPC requires); a client certificate bound to a
/// token (its SAN) makes the stream that token's caller with no metadata — its tenant is the
/// token's — and a TLS client with neither certificate nor token is UNAUTHENTICATED.
#[tokio::test]
async fn over_mutual_tls_a_certificate_bound_to_a_token_is_its_caller() {
    use muster_testkit::pki::{Leaf, TestCa};
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};

    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("xds test ca");
    let files = ca.localhost().write(dir.path(), "server");
    let client_ca = ca.write(dir.path(), "client-ca.pem");
    let server = xds_server_with(|config| {
        config.auth.enabled = true;
        config.tls.cert = Some(files.cert);
        config.tls.key = Some(files.key);
        config.tls.client_ca = Some(client_ca);
        config.tls.client_cert = muster_server::ClientCertPolicy::Optional;
    })
    .await;
    let https = crate::tls::tls_client(&ca, None);
    let base = server.url("").replacen("http://", "https://", 1);
    let (status, body) = crate::tls::request(&https, &format!("{base}/v1/acl/bootstrap"), Some(b"{}"), &[])
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let operator: Value = serde_json::from_str(&body).unwrap();
    let operator = format!("Bearer {}", operator["secret"].as_str().unwrap());
    let san = "spiffe://test/ns/prod/sa/xds-client";
    let (status, body) = crate::tls::request(
        &https,
        &format!("{base}/v1/acl/tokens"),
        Some(br#"{"tenant": "acme", "allow": ["*/*=*"], "san": "spiffe://test/ns/prod/sa/xds-client"}"#),
        &[("authorization", operator.as_str())],
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let dial = |identity: Option<&Leaf>| {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca.pem()))
            .domain_name("localhost");
        if let Some(leaf) = identity {
            tls = tls.identity(Identity::from_pem(&leaf.cert, &leaf.key));
        }
        let endpoint = Channel::from_shared(format!("https://{}", server.xds_addr()))
            .unwrap()
            .tls_config(tls)
            .unwrap();
        async move {
            tokio::time::timeout(STEP, endpoint.connect())
                .await
                .expect("connects in time")
                .expect("a TLS connection")
        }
    };
    let leaf = ca.leaf(&[], &[], &[san]);
    let mut ads = Sotw::open_on(dial(Some(&leaf)).await, node("mtls-client", None, None), None)
        .await
        .expect("the certificate's token opens the stream");
    let clusters = ads.fetch(CLUSTER, &["*"]).await;
    assert!(clusters.resources.is_empty(), "acme has no services yet");
    let (status, body) = crate::tls::request(
        &https,
        &format!("{base}/v1/xds/clients"),
        None,
        &[("authorization", operator.as_str())],
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    let client = page["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|client| client["node_id"] == "mtls-client")
        .unwrap_or_else(|| panic!("the stream is listed: {page}"));
    assert_eq!(client["tenant"], "acme", "the bound token's tenant");

    let refused = match Sotw::open_on(dial(None).await, node("nobody", None, None), None).await {
        Err(status) => status,
        Ok(mut anonymous) => {
            anonymous.subscribe(CLUSTER, &["*"]);
            anonymous.try_next().await.expect_err("no certificate, no token")
        }
    };
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
}

/// Revocation (SPEC S1): a token revoked while its ADS stream is open ends that stream
/// UNAUTHENTICATED (the stream re-checks its token on every change of the token table).
#[tokio::test]
async fn revoking_a_token_ends_its_open_stream() {
    let server = xds_server_with(|config| config.auth.enabled = true).await;
    let operator = operator(&server).await;
    let auth = format!("Bearer {operator}");
    let created = token(&server, &operator, "acme").await;
    let (secret, accessor) = (
        created["secret"].as_str().unwrap(),
        created["accessor"].as_str().unwrap(),
    );
    let mut ads = Sotw::open(server.xds_addr(), node("revoked", None, None), Some(secret))
        .await
        .expect("the token opens a stream");
    ads.fetch(CLUSTER, &["*"]).await;
    server
        .send(
            Method::DELETE,
            &format!("/v1/acl/tokens/{accessor}"),
            None,
            &[("authorization", auth.as_str())],
        )
        .await
        .expect(StatusCode::OK);
    let ended = ads.try_next().await.expect_err("the stream ends");
    assert_eq!(ended.code(), Code::Unauthenticated, "{ended:?}");
}

/// An operator's view of one metric's value (`name` with its labels, as exposed).
async fn metric(server: &TestServer, operator: Option<&str>, name: &str) -> Option<f64> {
    let auth = operator.map(|secret| format!("Bearer {secret}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|auth| ("authorization", auth.as_str())).collect();
    let (status, text) = server.get_text_with("/v1/metrics", &headers).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Trace (one front door, SPEC S3, W4): a token allowed `read,watch` on one service asked
/// for 10,000 names of other services on each of 200 streams, and every name entered the
/// hub (an entry and a cache each) before its watch right was checked. Now only the names
/// the token may watch are watched; the others are neither watched nor answered.
#[tokio::test]
async fn names_a_token_may_not_watch_never_reach_the_hub() {
    let server = xds_server_with(|config| config.auth.enabled = true).await;
    let operator = operator(&server).await;
    for service in ["x", "y"] {
        put(
            &server,
            Some(&operator),
            "acme",
            service,
            "a",
            record("10.1.0.1", json!({})),
        )
        .await;
    }
    let auth = format!("Bearer {operator}");
    let one_service = server
        .send(
            Method::POST,
            "/v1/acl/tokens",
            Some(serde_json::to_vec(&json!({"tenant": "acme", "allow": ["prod/x=read,watch"]})).unwrap()),
            &[("authorization", auth.as_str())],
        )
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut names: Vec<String> = (0..50).map(|n| format!("made-up-{n}.prod")).collect();
    names.extend(["x.prod".to_owned(), "y.prod".to_owned()]);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut ads = Sotw::open(server.xds_addr(), node("narrow", None, None), Some(&one_service))
        .await
        .expect("the token opens a stream");
    let response = ads.fetch(ENDPOINT, &names).await;
    let sent: Vec<String> = response
        .resources
        .iter()
        .map(|any| unpack::<ClusterLoadAssignment>(any).cluster_name)
        .collect();
    assert_eq!(sent, ["x.prod"], "only the service the token may watch is answered");
    assert_eq!(
        metric(&server, Some(&operator), "muster_xds_watched_services").await,
        Some(1.0),
        "only x entered the hub"
    );
}

/// Trace (one front door, SPEC W4, S6): xDS streams counted against no cap. Now each
/// stream holds a slot of its principal's `max_watches_per_principal` (shared with watches
/// and parked queries), and the names its streams subscribe to count against
/// `[xds] max_names_per_principal`; a refusal is RESOURCE_EXHAUSTED naming the budget, and
/// a slot comes back when its stream ends.
#[tokio::test]
async fn xds_streams_and_names_count_against_the_principals_budgets() {
    let server = xds_server_with(|config| {
        config.max_watches_per_principal = 2;
        config.xds.max_names_per_principal = 3;
    })
    .await;
    let addr = server.xds_addr();
    let mut first = Sotw::connect(addr, node("first", None, None)).await;
    first.fetch(ENDPOINT, &["a.prod", "b.prod"]).await;
    let mut second = Sotw::connect(addr, node("second", None, None)).await;
    second.fetch(ENDPOINT, &["c.prod"]).await;

    // A third stream is over the stream budget.
    let refused = refusal(addr, node("third", None, None), None).await;
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("max_watches_per_principal"), "{refused:?}");

    // One more name would make four: over the names budget, and the stream ends.
    first.subscribe(ENDPOINT, &["a.prod", "b.prod", "d.prod"]);
    let over = first.try_next().await.expect_err("four names are one too many");
    assert_eq!(over.code(), Code::ResourceExhausted, "{over:?}");
    assert!(over.message().contains("max_names_per_principal"), "{over:?}");

    // Its slot and names come back with its end.
    drop(first);
    let reopened = poll(Duration::from_millis(50), || async {
        let mut again = Sotw::open(addr, node("again", None, None), None).await.ok()?;
        again.subscribe(ENDPOINT, &["d.prod", "e.prod"]);
        again.try_next().await.ok()
    })
    .await;
    assert!(reopened.is_some(), "the first stream's slot and names came back");
    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    let refusals = &status.body["admission"]["refused"];
    assert!(
        refusals["max_names_per_principal"].as_u64().unwrap() >= 1,
        "{}",
        status.body
    );
    assert!(
        refusals["max_watches_per_principal"].as_u64().unwrap() >= 1,
        "{}",
        status.body
    );
}

/// SPEC W4: a Delta stream's first request carries the client's cache, kept per name; more
/// entries than a stream may subscribe to (10,000) are refused before they are decoded, and
/// the stream holds no names.
#[tokio::test]
async fn a_delta_cache_larger_than_a_stream_may_hold_is_refused() {
    let server = xds_server().await;
    let mut delta = Delta::connect(server.xds_addr(), node("cache", None, None)).await;
    let cache: Vec<(String, String)> = (0..10_001).map(|i| (format!("s{i}.prod"), "7".to_owned())).collect();
    let cache: Vec<(&str, &str)> = cache.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    delta.subscribe(ENDPOINT, &[API], &cache);
    let refused = tokio::time::timeout(STEP, delta.responses.message())
        .await
        .expect("an answer in time")
        .expect_err("10,001 cached names are refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("more than 10000"), "{refused:?}");
    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(status.body["admission"]["xds_names"], 0, "{}", status.body);
}

/// SPEC S6: an xDS connection that has not sent HTTP/2's preface and SETTINGS within the
/// header read timeout is closed, as an HTTP request head that does not come is; one that
/// sends them in time is served.
#[tokio::test]
async fn an_xds_connection_that_trickles_its_preface_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = xds_server_with(|config| config.limits.http.header_read_timeout_ms = 300).await;
    let mut slow = tokio::net::TcpStream::connect(server.xds_addr()).await.unwrap();
    slow.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let mut buf = [0_u8; 64];
    let closed = tokio::time::timeout(STEP, slow.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "the server closes a connection whose preface does not come: {closed:?}"
    );
    // A real client on a fresh connection is served.
    let mut ads = Sotw::connect(server.xds_addr(), node("after", None, None)).await;
    ads.fetch(ENDPOINT, &[API]).await;
}
