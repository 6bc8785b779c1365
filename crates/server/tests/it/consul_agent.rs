//! The Consul agent API over real HTTP on the test server's Consul listener (SPEC E1):
//! registrations in either casing, TTL checks through pass / silence /
//! `DeregisterCriticalServiceAfter`, maintenance, server-assigned incarnations that fence the
//! previous one, Consul-style errors that change nothing, and tokens.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::support::{STEP, TestServer, poll};

/// A Consul reply: status and body text (errors are plain text, successes JSON or empty).
struct ConsulReply {
    status: StatusCode,
    text: String,
}

impl ConsulReply {
    #[track_caller]
    fn expect(self, status: StatusCode) -> ConsulReply {
        assert_eq!(self.status, status, "body: {}", self.text);
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

/// A request to the Consul listener, without a content type (as py-consul sends it).
async fn consul(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> ConsulReply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", server.consul_addr()));
    if let Some(token) = token {
        request = request.header("x-consul-token", token);
    }
    let request = request
        .body(Full::new(Bytes::from(body.unwrap_or_default().to_owned())))
        .unwrap();
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .expect("a reply in time")
        .expect("a reply");
    let status = response.status();
    let bytes = response.into_body().collect().await.expect("the body").to_bytes();
    ConsulReply {
        status,
        text: String::from_utf8(bytes.to_vec()).expect("UTF-8"),
    }
}

async fn put(server: &TestServer, path: &str, body: Option<&str>) -> ConsulReply {
    consul(server, Method::PUT, path, body, None).await
}

/// The native record of `web/<instance>` in the default tenant and namespace, if any.
async fn record(server: &TestServer, instance: &str) -> Option<Value> {
    let reply = server.get("/v1/registry/default/default/web").await;
    if reply.status == StatusCode::NOT_FOUND {
        return None;
    }
    reply.body["endpoints"]
        .as_array()?
        .iter()
        .find(|e| e["instance"] == instance)
        .cloned()
}

async fn serving(server: &TestServer, instance: &str) -> Option<String> {
    record(server, instance)
        .await
        .map(|e| e["serving"].as_str().unwrap().to_owned())
}

/// Waits until `instance` is in `state`.
async fn wait_for_state(server: &TestServer, instance: &str, state: &str) {
    let reached = poll(Duration::from_millis(50), || async {
        (serving(server, instance).await.as_deref() == Some(state)).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "{instance} never became {state}: {:?}",
        record(server, instance).await
    );
}

const GO_BODY: &str = r#"{"ID": "web-1", "Name": "web", "Tags": ["v1"], "Port": 8080, "Address": "10.0.0.5",
    "Meta": {"version": "1.2"}, "Weights": {"Passing": 5, "Warning": 1}, "EnableTagOverride": false,
    "Check": {"TTL": "30s", "DeregisterCriticalServiceAfter": "1m"}, "Checks": null}"#;
const PY_BODY: &str = r#"{"name": "web", "id": "web-1", "tags": ["v1"], "port": 8080, "address": "10.0.0.5",
    "meta": {"version": "1.2"}, "weights": {"passing": 5, "warning": 1},
    "checks": [{"ttl": "30s", "DeregisterCriticalServiceAfter": "1m"}]}"#;

/// What a registration decides about a record (not who wrote it when).
fn content(record: &Value) -> Value {
    json!([
        record["addresses"],
        record["ports"],
        record["weight"],
        record["labels"],
        record["checks"]
    ])
}

#[tokio::test]
async fn pascal_case_and_snake_case_registrations_give_the_same_record() {
    let server = TestServer::start().await;
    put(&server, "/v1/agent/service/register", Some(GO_BODY))
        .await
        .expect(StatusCode::OK);
    let go = record(&server, "web-1").await.expect("registered");
    put(&server, "/v1/agent/service/deregister/web-1", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(record(&server, "web-1").await, None);
    put(&server, "/v1/agent/service/register", Some(PY_BODY))
        .await
        .expect(StatusCode::OK);
    let py = record(&server, "web-1").await.expect("registered");
    assert_eq!(content(&go), content(&py));
    assert_eq!(go["labels"]["consul.tag.0"], "v1");
    assert_eq!(go["labels"]["version"], "1.2");
    assert_eq!(go["weight"], 5);
    // The agent's view renders it back as Go's api decodes it.
    let services = consul(&server, Method::GET, "/v1/agent/services", None, None)
        .await
        .expect(StatusCode::OK)
        .json();
    let web = &services["web-1"];
    assert_eq!(
        (&web["ID"], &web["Service"], &web["Port"], &web["Address"]),
        (&json!("web-1"), &json!("web"), &json!(8080), &json!("10.0.0.5"))
    );
    assert_eq!(
        (&web["Tags"], &web["Meta"]),
        (&json!(["v1"]), &json!({"version": "1.2"}))
    );
    assert_eq!(web["Weights"], json!({"Passing": 5, "Warning": 1}));
}

#[tokio::test]
async fn a_ttl_check_passes_turns_critical_when_silent_and_is_deregistered_after_its_threshold() {
    let server = TestServer::start().await;
    let body = r#"{"Name": "web", "ID": "web-1", "Address": "10.0.0.5",
        "Check": {"TTL": "1s", "DeregisterCriticalServiceAfter": "2s"}}"#;
    put(&server, "/v1/agent/service/register", Some(body))
        .await
        .expect(StatusCode::OK);
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("starting"));
    put(&server, "/v1/agent/check/pass/service:web-1?note=ok", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("ready"));
    let checks = consul(&server, Method::GET, "/v1/agent/checks", None, None)
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(checks["service:web-1"]["Status"], "passing");
    assert_eq!(checks["service:web-1"]["Type"], "ttl");
    // Silence: the TTL passes, the check is critical, and two seconds later it is gone.
    wait_for_state(&server, "web-1", "not_serving").await;
    let gone = poll(Duration::from_millis(100), || async {
        record(&server, "web-1").await.is_none().then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "never deregistered: {:?}",
        record(&server, "web-1").await
    );
}

/// A TTL report's note is the check's `Output` (SPEC H4), on the agent's and the health
/// endpoints, as py-consul's `check.ttl_pass(check_id, notes)` and Go's `UpdateTTL` send it.
#[tokio::test]
async fn a_ttl_note_and_an_update_s_output_are_the_check_s_output() {
    let server = TestServer::start().await;
    let body = r#"{"Name": "web", "ID": "web-1", "Address": "10.0.0.5", "Check": {"TTL": "30s"}}"#;
    put(&server, "/v1/agent/service/register", Some(body))
        .await
        .expect(StatusCode::OK);
    put(&server, "/v1/agent/check/pass/service:web-1?note=all%20good", None)
        .await
        .expect(StatusCode::OK);
    let outputs = |path: &'static str| {
        let server = &server;
        async move {
            let body = consul(server, Method::GET, path, None, None)
                .await
                .expect(StatusCode::OK)
                .json();
            match path {
                "/v1/agent/checks" => vec![body["service:web-1"]["Output"].clone()],
                "/v1/health/checks/web" => body.as_array().unwrap().iter().map(|c| c["Output"].clone()).collect(),
                _ => body[0]["Checks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|c| c["CheckID"] == "service:web-1")
                    .map(|c| c["Output"].clone())
                    .collect(),
            }
        }
    };
    for path in ["/v1/agent/checks", "/v1/health/checks/web", "/v1/health/service/web"] {
        assert_eq!(outputs(path).await, [json!("all good")], "{path}");
    }
    put(
        &server,
        "/v1/agent/check/update/service:web-1",
        Some(r#"{"Status": "warning", "Output": "queue 90% full"}"#),
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(outputs("/v1/agent/checks").await, [json!("queue 90% full")]);
}

#[tokio::test]
async fn check_updates_set_warning_and_critical_and_unknown_checks_are_404() {
    let server = TestServer::start().await;
    let body = r#"{"Name": "web", "ID": "web-1", "Address": "10.0.0.5",
        "Check": {"CheckID": "web-alive", "TTL": "30s"}}"#;
    put(&server, "/v1/agent/service/register", Some(body))
        .await
        .expect(StatusCode::OK);
    put(
        &server,
        "/v1/agent/check/update/web-alive",
        Some(r#"{"Status": "warning", "Output": "slow"}"#),
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("degraded"));
    put(&server, "/v1/agent/check/fail/web-alive", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("not_serving"));
    // The default id is not this check's: it has its own.
    for path in [
        "/v1/agent/check/pass/service:web-1",
        "/v1/agent/check/pass/nope",
        "/v1/agent/service/deregister/nope",
        "/v1/agent/service/maintenance/nope?enable=true",
    ] {
        let reply = put(&server, path, None).await.expect(StatusCode::NOT_FOUND);
        assert!(reply.text.starts_with("Unknown"), "{path}: {}", reply.text);
    }
    consul(&server, Method::GET, "/v1/agent/service/nope", None, None)
        .await
        .expect(StatusCode::NOT_FOUND);
    let bad = put(
        &server,
        "/v1/agent/check/update/web-alive",
        Some(r#"{"Status": "fine"}"#),
    )
    .await
    .expect(StatusCode::BAD_REQUEST);
    assert!(bad.text.contains("Invalid check status"), "{}", bad.text);
}

#[tokio::test]
async fn maintenance_drains_shows_the_maintenance_check_and_lifts() {
    let server = TestServer::start().await;
    put(
        &server,
        "/v1/agent/service/register",
        Some(r#"{"Name": "web", "ID": "web-1", "Address": "10.0.0.5"}"#),
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("ready"));
    put(
        &server,
        "/v1/agent/service/maintenance/web-1?enable=True&reason=deploy",
        None,
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("draining"));
    let checks = consul(&server, Method::GET, "/v1/agent/checks", None, None)
        .await
        .expect(StatusCode::OK)
        .json();
    let maintenance = &checks["_service_maintenance:web-1"];
    assert_eq!(
        (&maintenance["Status"], &maintenance["Notes"]),
        (&json!("critical"), &json!("deploy"))
    );
    put(&server, "/v1/agent/service/maintenance/web-1?enable=false", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("ready"));
    let missing = put(&server, "/v1/agent/service/maintenance/web-1", None)
        .await
        .expect(StatusCode::BAD_REQUEST);
    assert_eq!(missing.text, "Missing value for enable");
}

/// The restart trace: a process re-registers through the Consul API, which carries no
/// incarnation; the server's pick must be higher, and the old incarnation fenced.
#[tokio::test]
async fn a_reregistration_gets_a_higher_incarnation_and_fences_the_old_one() {
    let server = TestServer::start().await;
    put(&server, "/v1/agent/service/register", Some(GO_BODY))
        .await
        .expect(StatusCode::OK);
    let first = record(&server, "web-1").await.unwrap()["incarnation"].as_u64().unwrap();
    put(&server, "/v1/agent/check/pass/service:web-1", None)
        .await
        .expect(StatusCode::OK);
    put(&server, "/v1/agent/service/register", Some(GO_BODY))
        .await
        .expect(StatusCode::OK);
    let second = record(&server, "web-1").await.unwrap()["incarnation"].as_u64().unwrap();
    assert!(second > first, "{second} after {first}");
    // The same checks keep their verdict, as a Consul agent keeps check status.
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("ready"));
    // Other checks start over.
    let other_checks = GO_BODY.replace("30s", "20s");
    put(&server, "/v1/agent/service/register", Some(&other_checks))
        .await
        .expect(StatusCode::OK);
    assert_eq!(serving(&server, "web-1").await.as_deref(), Some("starting"));
    // The old incarnation's writes are refused.
    let stale = server
        .call(
            Method::PUT,
            "/v1/registry/default/default/web/web-1/serving",
            Some(json!({"incarnation": first, "state": "not_serving"})),
        )
        .await;
    assert_eq!(
        (stale.status, stale.code()),
        (StatusCode::CONFLICT, "stale_incarnation")
    );
    let old_delete = server
        .call(
            Method::DELETE,
            &format!("/v1/registry/default/default/web/web-1?incarnation={first}"),
            None,
        )
        .await;
    assert_eq!(old_delete.code(), "stale_incarnation");
    assert!(record(&server, "web-1").await.is_some());
}

#[tokio::test]
async fn bad_registrations_are_400_in_plain_text_and_change_nothing() {
    let server = TestServer::start().await;
    let before = server.revision().await;
    let five_checks = format!(
        r#"{{"Name": "web", "Address": "10.0.0.5", "Checks": [{}]}}"#,
        [r#"{"TTL": "10s"}"#; 5].join(",")
    );
    for (body, want) in [
        ("{not json", "Request decode failed"),
        (r#"{"ID": "x"}"#, "Missing service name"),
        (r#"{"Name": "Web"}"#, "Invalid service name 'Web'"),
        (r#"{"Name": "web", "Check": {"TTL": "ten"}}"#, "invalid duration"),
        (r#"{"Name": "web", "Address": "db.internal"}"#, "Invalid service:"),
        (
            r#"{"Name": "web", "Check": {"Args": ["true"], "Interval": "1s"}}"#,
            "script checks are not supported",
        ),
        (five_checks.as_str(), "Invalid service: record_too_large"),
    ] {
        let reply = put(&server, "/v1/agent/service/register", Some(body))
            .await
            .expect(StatusCode::BAD_REQUEST);
        assert!(reply.text.contains(want), "{body}: {}", reply.text);
    }
    assert_eq!(server.revision().await, before);
}

/// A Consul agent keys services by ID alone; Muster per service. An ID registered again
/// under another name would leave a second record the agent API cannot address (every
/// lookup by that ID then fails), so it is refused and nothing changes.
#[tokio::test]
async fn an_id_registered_again_under_another_name_is_refused_and_changes_nothing() {
    let server = TestServer::start().await;
    put(
        &server,
        "/v1/agent/service/register",
        Some(r#"{"Name": "web", "ID": "x", "Address": "10.0.0.5"}"#),
    )
    .await
    .expect(StatusCode::OK);
    let before = server.revision().await;
    let reply = put(
        &server,
        "/v1/agent/service/register",
        Some(r#"{"Name": "api", "ID": "x", "Address": "10.0.0.5"}"#),
    )
    .await
    .expect(StatusCode::BAD_REQUEST);
    assert!(reply.text.contains("registered as service \"web\""), "{}", reply.text);
    assert_eq!(server.revision().await, before);
    consul(&server, Method::GET, "/v1/agent/service/x", None, None)
        .await
        .expect(StatusCode::OK);
}

#[tokio::test]
async fn agent_self_is_objects_all_the_way_down_with_the_datacenter() {
    let server = TestServer::start().await;
    let me = consul(&server, Method::GET, "/v1/agent/self", None, None)
        .await
        .expect(StatusCode::OK)
        .json();
    for (name, value) in me.as_object().unwrap() {
        assert!(value.is_object(), "{name} is {value}");
    }
    assert_eq!(me["Config"]["Datacenter"], "dc1");
    assert!(me["Config"]["NodeName"].as_str().unwrap().starts_with("muster-"));
    assert_eq!(me["Member"]["Addr"], "127.0.0.1");
}

#[tokio::test]
async fn with_auth_a_token_without_service_write_gets_403_and_changes_nothing() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let reader = server
        .send(
            Method::POST,
            "/v1/acl/tokens",
            Some(serde_json::to_vec(&json!({"tenant": "default", "allow": ["default/*=read"]})).unwrap()),
            &[("authorization", &format!("Bearer {operator}"))],
        )
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = r#"{"Name": "web", "ID": "web-1", "Address": "10.0.0.5", "Check": {"TTL": "30s"}}"#;
    let denied = consul(
        &server,
        Method::PUT,
        "/v1/agent/service/register",
        Some(body),
        Some(&reader),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    assert_eq!(denied.text, "Permission denied");
    let unknown = consul(
        &server,
        Method::PUT,
        "/v1/agent/service/register",
        Some(body),
        Some("no-such-token"),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    assert_eq!(unknown.text, "ACL not found");
    consul(
        &server,
        Method::PUT,
        "/v1/agent/service/register",
        Some(body),
        Some(&operator),
    )
    .await
    .expect(StatusCode::OK);
    consul(
        &server,
        Method::PUT,
        "/v1/agent/check/pass/service:web-1",
        None,
        Some(&reader),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    consul(
        &server,
        Method::PUT,
        "/v1/agent/service/deregister/web-1",
        None,
        Some(&reader),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    // The reader reads what it may.
    let services = consul(&server, Method::GET, "/v1/agent/services", None, Some(&reader))
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(services["web-1"]["Service"], "web");
    let nobody = consul(&server, Method::GET, "/v1/agent/services", None, None)
        .await
        .expect(StatusCode::OK)
        .json();
    assert_eq!(nobody, json!({}));
}

/// SPEC S1, S2, E1: an agent write is judged before its ID is looked up. With two services
/// of `acme/prod` holding instance `db-0`, a caller without credentials, or with a token
/// without rights on them, is refused with a reply that names neither; a token that may
/// deregister both but read only `billing` is told of `billing` alone; a token that may
/// deregister only `billing` finds its `db-0` and nothing else changes.
#[tokio::test]
async fn agent_writes_are_judged_before_a_lookup_and_name_no_service_the_caller_may_not_read() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let as_operator = format!("Bearer {operator}");
    let token = |allow: &'static [&'static str]| {
        let (server, as_operator) = (&server, &as_operator);
        async move {
            let body = serde_json::to_vec(&json!({"tenant": "acme", "allow": allow})).unwrap();
            server
                .send(
                    Method::POST,
                    "/v1/acl/tokens",
                    Some(body),
                    &[("authorization", as_operator.as_str())],
                )
                .await
                .expect(StatusCode::CREATED)
                .body["secret"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    for service in ["billing", "payroll"] {
        let mut endpoint = crate::support::endpoint("10.0.0.1");
        endpoint["checks"] = json!([{"ttl_ms": 60000}]);
        let body = serde_json::to_vec(&json!({"incarnation": 1, "endpoint": endpoint})).unwrap();
        server
            .send(
                Method::PUT,
                &format!("/v1/registry/acme/prod/{service}/db-0"),
                Some(body),
                &[("authorization", as_operator.as_str())],
            )
            .await
            .expect(StatusCode::OK);
    }
    let one_service = token(&["prod/x=read,watch"]).await;
    let reads_billing = token(&["prod/*=deregister", "prod/billing=read"]).await;
    let billing_only = token(&["prod/billing=deregister"]).await;
    let before = server.revision().await;
    const PLACE: &str = "?partition=acme&ns=prod";
    let writes = [
        format!("/v1/agent/service/deregister/db-0{PLACE}"),
        format!("/v1/agent/service/maintenance/db-0{PLACE}&enable=true"),
        format!("/v1/agent/check/pass/service:db-0{PLACE}"),
    ];
    let names_none = |reply: &ConsulReply| {
        assert!(
            !reply.text.contains("billing") && !reply.text.contains("payroll"),
            "{}",
            reply.text
        );
    };
    for path in &writes {
        for secret in [None, Some(one_service.as_str())] {
            let refused = consul(&server, Method::PUT, path, None, secret)
                .await
                .expect(StatusCode::FORBIDDEN);
            assert_eq!(refused.text, "Permission denied", "{path}");
            names_none(&refused);
        }
    }
    let ambiguous = consul(&server, Method::PUT, &writes[0], None, Some(&reads_billing))
        .await
        .expect(StatusCode::BAD_REQUEST);
    assert!(ambiguous.text.contains("(billing)"), "{}", ambiguous.text);
    assert!(!ambiguous.text.contains("payroll"), "{}", ambiguous.text);
    assert_eq!(server.revision().await, before, "nothing changed");

    consul(&server, Method::PUT, &writes[0], None, Some(&billing_only))
        .await
        .expect(StatusCode::OK);
    let payroll = server
        .send(
            Method::GET,
            "/v1/registry/acme/prod/payroll",
            None,
            &[("authorization", as_operator.as_str())],
        )
        .await
        .expect(StatusCode::OK);
    assert_eq!(payroll.body["endpoints"][0]["instance"], "db-0", "payroll's db-0 stays");
}

/// The py-consul and npm `consul` walk-through: register with a TTL check, pass it, and find
/// the instance among the passing ones of the health endpoint.
#[tokio::test]
async fn a_registered_and_passed_instance_is_found_among_the_passing() {
    let server = TestServer::start().await;
    let body = r#"{"name": "web", "id": "web-1", "address": "10.0.0.5", "port": 8080,
        "checks": [{"ttl": "30s"}]}"#;
    put(&server, "/v1/agent/service/register", Some(body))
        .await
        .expect(StatusCode::OK);
    assert_eq!(passing_web(&server).await, json!([]), "critical until its first pass");
    put(&server, "/v1/agent/check/pass/service:web-1", None)
        .await
        .expect(StatusCode::OK);
    let found = passing_web(&server).await;
    assert_eq!(found[0]["Service"]["ID"], "web-1", "{found}");
    assert_eq!(found[0]["Service"]["Port"], 8080);
}

async fn passing_web(server: &TestServer) -> Value {
    consul(server, Method::GET, "/v1/health/service/web?passing=true", None, None)
        .await
        .expect(StatusCode::OK)
        .json()
}

/// SPEC L5 through the Consul API: maintenance speaks with the token's role. An app's token
/// may take its own maintenance off; an owner's maintenance it may not, and is told so (403)
/// rather than answered 200 with nothing changed.
#[tokio::test]
async fn maintenance_speaks_with_the_tokens_role() {
    let server = TestServer::start_with(|config| config.auth.enabled = true).await;
    let operator = server
        .call(Method::POST, "/v1/acl/bootstrap", None)
        .await
        .expect(StatusCode::CREATED)
        .body["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let mint = |role: &'static str| {
        let body = json!({"tenant": "default", "allow": ["default/web=*"], "role": role});
        let (server, operator) = (&server, operator.clone());
        async move { crate::support::mint_token(server, &operator, body).await.1 }
    };
    let (app, owner) = (mint("app").await, mint("owner").await);
    let serving = |token: String| {
        let server = &server;
        async move {
            let reply = server
                .send(
                    Method::GET,
                    "/v1/registry/default/default/web",
                    None,
                    &[("authorization", &format!("Bearer {token}"))],
                )
                .await
                .expect(StatusCode::OK);
            reply.body["endpoints"][0]["serving"].as_str().unwrap().to_owned()
        }
    };
    let body = r#"{"Name": "web", "ID": "web-1", "Address": "10.0.0.5"}"#;
    consul(
        &server,
        Method::PUT,
        "/v1/agent/service/register",
        Some(body),
        Some(&app),
    )
    .await
    .expect(StatusCode::OK);
    let on = "/v1/agent/service/maintenance/web-1?enable=true";
    let off = "/v1/agent/service/maintenance/web-1?enable=false";
    // The app's own maintenance: it takes it off.
    consul(&server, Method::PUT, on, None, Some(&app))
        .await
        .expect(StatusCode::OK);
    consul(&server, Method::PUT, off, None, Some(&app))
        .await
        .expect(StatusCode::OK);
    assert_eq!(serving(operator.clone()).await, "ready");
    // The owner's: it holds against the app, which hears so.
    consul(&server, Method::PUT, on, None, Some(&owner))
        .await
        .expect(StatusCode::OK);
    let held = consul(&server, Method::PUT, off, None, Some(&app))
        .await
        .expect(StatusCode::FORBIDDEN);
    assert!(held.text.starts_with("Permission denied"), "{}", held.text);
    assert_eq!(serving(operator.clone()).await, "draining");
    consul(&server, Method::PUT, off, None, Some(&owner))
        .await
        .expect(StatusCode::OK);
    assert_eq!(serving(operator.clone()).await, "ready");
}
