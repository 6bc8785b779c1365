//! Who may do what (SPEC L4, L5, S2, S4): a caller's role is its token's, not its header's;
//! a lease belongs to the service it was granted for; `/v1/metrics` needs the `metrics`
//! right. Each test replays a trace of a registrar that held only its own service's rights.

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Reply, TestServer, as_token, bootstrap, endpoint};

async fn secured() -> TestServer {
    TestServer::start_with(|config| config.auth.enabled = true).await
}

use crate::support::mint_token as mint;

/// A request as `secret` with extra headers.
async fn with_headers(
    server: &TestServer,
    secret: &str,
    method: Method,
    path: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> Reply {
    let auth = format!("Bearer {secret}");
    let mut all = vec![("authorization", auth.as_str())];
    all.extend_from_slice(headers);
    server
        .send(method, path, Some(serde_json::to_vec(&body).unwrap()), &all)
        .await
}

const API_0: &str = "/v1/registry/acme/prod/api/api-0";

async fn register_api_0(server: &TestServer, operator: &str) {
    as_token(
        server,
        operator,
        Method::PUT,
        API_0,
        Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")})),
    )
    .await
    .expect(StatusCode::OK);
}

async fn serving_of(server: &TestServer, operator: &str) -> (String, String) {
    let reply = as_token(server, operator, Method::GET, "/v1/registry/acme/prod/api", None)
        .await
        .expect(StatusCode::OK);
    let endpoint = &reply.body["endpoints"][0];
    (
        endpoint["serving"].as_str().unwrap().to_owned(),
        endpoint["observation"]["actor"].as_str().unwrap().to_owned(),
    )
}

/// Trace (who may do what): `PUT .../api-0/serving {"state":"ready"}` with
/// `X-Muster-Actor: owner` from an app token lifted the drain the operator had set. Now the
/// header may not widen the token's role: 403, audited, and the owner's drain holds.
#[tokio::test]
async fn an_app_token_cannot_speak_as_the_owner_nor_lift_the_owners_drain() {
    let server = secured().await;
    let operator = bootstrap(&server).await;
    register_api_0(&server, &operator).await;
    let rules = json!(["prod/api=read,set_state"]);
    let (_, owner) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": rules, "role": "owner"}),
    )
    .await;
    let (_, app) = mint(&server, &operator, json!({"tenant": "acme", "allow": rules})).await;
    with_headers(
        &server,
        &owner,
        Method::POST,
        &format!("{API_0}/drain"),
        json!({"incarnation": 1, "reason": "maintenance"}),
        &[],
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(
        serving_of(&server, &operator).await,
        ("draining".into(), "owner".into())
    );
    let revision = server.revision().await;

    let ready = json!({"incarnation": 1, "state": "ready", "reason": "up"});
    let widened = with_headers(
        &server,
        &app,
        Method::PUT,
        &format!("{API_0}/serving"),
        ready.clone(),
        &[("x-muster-actor", "owner")],
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    assert_eq!(widened.code(), "permission_denied");
    assert!(widened.message().contains("widens"), "{}", widened.message());
    // As itself, the app's report does not lift the owner's drain.
    let held = with_headers(&server, &app, Method::PUT, &format!("{API_0}/serving"), ready, &[])
        .await
        .expect(StatusCode::OK);
    assert_eq!(held.body["unchanged"], "drain_held", "{}", held.body);
    assert_eq!(server.revision().await, revision, "nothing changed");
    assert_eq!(
        serving_of(&server, &operator).await,
        ("draining".into(), "owner".into())
    );

    // The refusal is on the audit trail.
    let audit = as_token(&server, &operator, Method::GET, "/v1/audit?outcome=denied", None)
        .await
        .expect(StatusCode::OK);
    let records = audit.body["records"].as_array().unwrap();
    assert!(
        records
            .iter()
            .any(|r| r["verb"] == "speak as owner" && r["outcome"] == "denied:permission_denied"),
        "{records:?}"
    );
}

/// An application draining itself on shutdown (a drain defaults to the owner's authority,
/// capped at the caller's role) makes an app drain, which it may lift; an owner token may
/// still speak as the app.
#[tokio::test]
async fn an_apps_own_drain_is_an_app_drain_it_may_lift() {
    let server = secured().await;
    let operator = bootstrap(&server).await;
    register_api_0(&server, &operator).await;
    let rules = json!(["prod/api=read,set_state"]);
    let (_, app) = mint(&server, &operator, json!({"tenant": "acme", "allow": rules})).await;
    with_headers(
        &server,
        &app,
        Method::POST,
        &format!("{API_0}/drain"),
        json!({"incarnation": 1, "reason": "shutting down"}),
        &[],
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(serving_of(&server, &operator).await, ("draining".into(), "app".into()));
    let ready = json!({"incarnation": 1, "state": "ready", "reason": "back"});
    let lifted = with_headers(&server, &app, Method::PUT, &format!("{API_0}/serving"), ready, &[])
        .await
        .expect(StatusCode::OK);
    assert!(lifted.body.get("unchanged").is_none(), "{}", lifted.body);
    assert_eq!(serving_of(&server, &operator).await, ("ready".into(), "app".into()));

    let (_, owner) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": rules, "role": "owner"}),
    )
    .await;
    with_headers(
        &server,
        &owner,
        Method::POST,
        &format!("{API_0}/drain"),
        json!({"incarnation": 1, "reason": "as the app"}),
        &[("x-muster-actor", "app")],
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(serving_of(&server, &operator).await, ("draining".into(), "app".into()));
}

/// Roles are shown by the token list and `acl self`; no token mints a role wider than its
/// own, and an operator token takes no role but the owner's it already has.
#[tokio::test]
async fn roles_are_shown_and_never_minted_wider() {
    let server = secured().await;
    let operator = bootstrap(&server).await;
    let (accessor, checker) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["prod/*=read"], "role": "checker"}),
    )
    .await;
    let me = as_token(&server, &checker, Method::GET, "/v1/acl/self", None)
        .await
        .expect(StatusCode::OK);
    assert_eq!(me.body["role"], "checker");
    let list = as_token(&server, &operator, Method::GET, "/v1/acl/tokens", None)
        .await
        .expect(StatusCode::OK);
    let tokens = list.body["tokens"].as_array().unwrap();
    let listed = tokens.iter().find(|t| t["accessor"] == accessor.as_str()).unwrap();
    assert_eq!(listed["role"], "checker");
    assert!(
        tokens.iter().any(|t| t.get("tenant").is_none() && t["role"] == "owner"),
        "the operator token speaks as the owner: {tokens:?}"
    );

    let (_, admin) = mint(&server, &operator, json!({"tenant": "acme", "allow": ["*/*=*"]})).await;
    let revision = server.revision().await;
    let wider = as_token(
        &server,
        &admin,
        Method::POST,
        "/v1/acl/tokens",
        Some(json!({"tenant": "acme", "allow": ["prod/*=read"], "role": "owner"})),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    assert_eq!(wider.code(), "permission_denied");
    assert!(wider.message().contains("speaks as app"), "{}", wider.message());
    let operator_role = as_token(
        &server,
        &operator,
        Method::POST,
        "/v1/acl/tokens",
        Some(json!({"allow": ["*/*=read"], "role": "checker"})),
    )
    .await
    .expect(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(operator_role.code(), "invalid_field");
    assert_eq!(server.revision().await, revision, "nothing was created");
}

async fn grant(server: &TestServer, secret: &str, body: Value) -> Reply {
    as_token(server, secret, Method::POST, "/v1/leases/acme", Some(body)).await
}

fn lease_of(reply: &Reply) -> u64 {
    reply.body["lease"]["id"].as_u64().unwrap()
}

/// Trace (who may do what): a token allowed only `prod/api=renew` kept `prod/payments`' lease
/// alive (renew was judged tenant-wide, lease ids are sequential), and a token allowed
/// `register` on `prod/api` attached `api-9` to payments' lease. Now a lease is its
/// service's: renewing, revoking and attaching are judged on that service.
#[tokio::test]
async fn a_lease_belongs_to_its_service() {
    let server = secured().await;
    let operator = bootstrap(&server).await;
    let (_, payments) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["prod/payments=register,renew,deregister"]}),
    )
    .await;
    let (_, api) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["prod/api=register,renew,deregister"]}),
    )
    .await;
    let granted = grant(
        &server,
        &payments,
        json!({"ttl_ms": 10_000, "service": "prod/payments"}),
    )
    .await
    .expect(StatusCode::OK);
    let lease = lease_of(&granted);
    let renew = format!("/v1/leases/acme/{lease}/renew");

    let refused = as_token(&server, &api, Method::PUT, &renew, None)
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "permission_denied");
    assert!(
        !refused.message().contains("payments"),
        "the lease's service is not told: {}",
        refused.message()
    );
    let revoke = as_token(&server, &api, Method::DELETE, &format!("/v1/leases/acme/{lease}"), None)
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(revoke.code(), "permission_denied");
    let revision = server.revision().await;
    let attach = as_token(
        &server,
        &api,
        Method::PUT,
        "/v1/registry/acme/prod/api/api-9",
        Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.9"), "lease": {"id": lease}})),
    )
    .await
    .expect(StatusCode::CONFLICT);
    assert_eq!(attach.code(), "lease_scope_mismatch");
    assert_eq!(server.revision().await, revision, "nothing attached");
    // Its own service's token keeps it and ends it.
    as_token(&server, &payments, Method::PUT, &renew, None)
        .await
        .expect(StatusCode::OK);
    as_token(
        &server,
        &payments,
        Method::DELETE,
        &format!("/v1/leases/acme/{lease}"),
        None,
    )
    .await
    .expect(StatusCode::OK);

    // A service's token cannot grant a lease for another service, nor one of the whole tenant.
    for body in [
        json!({"ttl_ms": 10_000, "service": "prod/payments"}),
        json!({"ttl_ms": 10_000}),
    ] {
        let refused = grant(&server, &api, body).await.expect(StatusCode::FORBIDDEN);
        assert_eq!(refused.code(), "permission_denied");
    }
    let bad = grant(&server, &api, json!({"ttl_ms": 10_000, "service": "prod"}))
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(bad.code(), "invalid_name");
}

/// A lease of the whole tenant (granted without a service, as every lease was before) is
/// judged on what hangs on it: a token with the right on every service of the tenant, or on
/// every service whose endpoints it holds, may keep it; an empty one, as before.
#[tokio::test]
async fn a_lease_of_the_whole_tenant_is_judged_on_what_hangs_on_it() {
    let server = secured().await;
    let operator = bootstrap(&server).await;
    let (_, api) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["prod/api=renew,register"]}),
    )
    .await;
    let (_, all) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["*/*=renew,register"]}),
    )
    .await;
    let (_, all_but) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["*/*=renew"], "deny": ["prod/payments=renew"]}),
    )
    .await;
    let (_, payments) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["prod/payments=renew"]}),
    )
    .await;
    let lease = lease_of(
        &grant(&server, &operator, json!({"ttl_ms": 10_000}))
            .await
            .expect(StatusCode::OK),
    );
    let renew = format!("/v1/leases/acme/{lease}/renew");
    // Empty, as before: some service's right.
    as_token(&server, &api, Method::PUT, &renew, None)
        .await
        .expect(StatusCode::OK);
    as_token(
        &server,
        &operator,
        Method::PUT,
        "/v1/registry/acme/prod/payments/pay-0",
        Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.5"), "lease": {"id": lease}})),
    )
    .await
    .expect(StatusCode::OK);
    for narrow in [&api, &all_but] {
        let refused = as_token(&server, narrow, Method::PUT, &renew, None)
            .await
            .expect(StatusCode::FORBIDDEN);
        assert_eq!(refused.code(), "permission_denied");
    }
    for allowed in [&all, &payments] {
        as_token(&server, allowed, Method::PUT, &renew, None)
            .await
            .expect(StatusCode::OK);
    }
    let revision = server.revision().await;
    let attach = as_token(
        &server,
        &api,
        Method::PUT,
        "/v1/registry/acme/prod/api/api-1",
        Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"id": lease}})),
    )
    .await
    .expect(StatusCode::FORBIDDEN);
    assert_eq!(attach.code(), "permission_denied");
    assert_eq!(server.revision().await, revision, "nothing attached");
    // A lease of the whole tenant is granted only with the right on every service.
    let refused = grant(&server, &api, json!({"ttl_ms": 10_000}))
        .await
        .expect(StatusCode::FORBIDDEN);
    assert_eq!(refused.code(), "permission_denied");
    // An unknown lease is not found, whoever asks.
    let missing = as_token(&server, &api, Method::PUT, "/v1/leases/acme/999/renew", None)
        .await
        .expect(StatusCode::NOT_FOUND);
    assert_eq!(missing.code(), "lease_not_found");
}

/// A lease granted with a registration is its service's, so a registrar holding only its
/// own service's rights keeps its registration alive.
#[tokio::test]
async fn a_registrations_lease_is_its_services() {
    let server = secured().await;
    let operator = bootstrap(&server).await;
    let (_, api) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["prod/api=register,renew"]}),
    )
    .await;
    let registered = as_token(
        &server,
        &api,
        Method::PUT,
        API_0,
        Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"ttl_ms": 10_000}})),
    )
    .await
    .expect(StatusCode::OK);
    let lease = lease_of(&registered);
    as_token(
        &server,
        &api,
        Method::PUT,
        &format!("/v1/leases/acme/{lease}/renew"),
        None,
    )
    .await
    .expect(StatusCode::OK);
    // And no other service's endpoint joins it.
    let attach = as_token(
        &server,
        &operator,
        Method::PUT,
        "/v1/registry/acme/prod/web/web-0",
        Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.2"), "lease": {"id": lease}})),
    )
    .await
    .expect(StatusCode::CONFLICT);
    assert_eq!(attach.code(), "lease_scope_mismatch");
}

/// `/v1/metrics` needs the `metrics` right (DECISIONS "Metrics and tenant-wide views"): an
/// operator sees every series, a tenant's `*/*=metrics` token its tenant's only, any other
/// token is refused.
#[tokio::test]
async fn metrics_need_the_metrics_right_and_show_a_tenant_its_own_series() {
    let server = secured().await;
    let operator = bootstrap(&server).await;
    for tenant in ["acme", "globex"] {
        as_token(
            &server,
            &operator,
            Method::PUT,
            &format!("/v1/registry/{tenant}/prod/api/api-0"),
            Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1")})),
        )
        .await
        .expect(StatusCode::OK);
    }
    let scrape = |secret: String| {
        let auth = format!("Bearer {secret}");
        let server = &server;
        async move {
            server
                .get_text_with("/v1/metrics", &[("authorization", auth.as_str())])
                .await
        }
    };
    let (status, all) = scrape(operator.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        all.contains("tenant=\"acme\"") && all.contains("tenant=\"globex\""),
        "{all}"
    );

    let (_, reader) = mint(
        &server,
        &operator,
        json!({"tenant": "acme", "allow": ["*/*=read,watch"]}),
    )
    .await;
    let (status, refused) = scrape(reader).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(refused.contains("permission_denied"), "{refused}");

    let (_, metrics) = mint(&server, &operator, json!({"tenant": "acme", "allow": ["*/*=metrics"]})).await;
    let (status, own) = scrape(metrics).await;
    assert_eq!(status, StatusCode::OK);
    assert!(own.contains("tenant=\"acme\""), "{own}");
    assert!(!own.contains("globex"), "another tenant's series: {own}");
}

/// A fresh server raises its registry to this build's format before it serves, and says so;
/// so does a one-member cluster (it runs the cluster listener: the hostile matrix's setup
/// once met `upgrade_pending` in its first second).
#[tokio::test]
async fn a_fresh_server_runs_this_builds_format() {
    let port = muster_testkit::fixed_tcp_port();
    let one_member = TestServer::start_with(move |config| {
        config.node_id = 1;
        config.cluster_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
        config.peers = std::collections::BTreeMap::from([(1, format!("127.0.0.1:{port}"))]);
        config.cluster_secret = Some("a-cluster-secret-of-some-length".into());
    })
    .await;
    for server in [TestServer::start().await, one_member] {
        let status = server.get("/v1/status").await.expect(StatusCode::OK);
        assert_eq!(status.body["format"]["cluster"], muster_core::FORMAT);
        assert_eq!(status.body["format"]["node"], muster_core::FORMAT);
    }
}

/// architecture.md "Formats and versions": while a member is silent (it may run the older
/// build) the leader does not raise the format, and until then the old behaviour stays:
/// what format 2 adds is refused `409 upgrade_pending`, a lease of the whole tenant is
/// granted and kept as before, and the app cannot lift even its own drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_silent_member_the_format_stays_1_and_so_does_the_old_behaviour() {
    let ports: Vec<u16> = (0..3).map(|_| muster_testkit::fixed_tcp_port()).collect();
    let peers: std::collections::BTreeMap<u64, String> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| (i as u64 + 1, format!("127.0.0.1:{port}")))
        .collect();
    // Nodes 1 and 2 form a quorum; node 3 never starts.
    let mut nodes = Vec::new();
    for (i, &port) in ports.iter().enumerate().take(2) {
        let peers = peers.clone();
        nodes.push(
            TestServer::start_with(move |config| {
                config.auth.enabled = true;
                config.node_id = i as u64 + 1;
                config.cluster_addr = Some(format!("127.0.0.1:{port}").parse().unwrap());
                config.peers = peers;
                config.cluster_secret = Some("a-cluster-secret-of-some-length".into());
            })
            .await,
        );
    }
    let server = &nodes[0];
    let ready = crate::support::poll(std::time::Duration::from_millis(50), || async {
        let reply = server.call(Method::POST, "/v1/acl/bootstrap", None).await;
        (reply.status == StatusCode::CREATED).then(|| reply.body["secret"].as_str().unwrap().to_owned())
    })
    .await;
    let operator = ready.expect("the two-node quorum took the bootstrap");
    // Longer than the leader's look (every 2 s): it still has not raised the format.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let status = server.get("/v1/status").await.expect(StatusCode::OK);
    assert_eq!(status.body["format"]["cluster"], 1, "{}", status.body);

    for body in [
        json!({"tenant": "acme", "allow": ["prod/api=read"], "role": "owner"}),
        json!({"tenant": "acme", "allow": ["*/*=metrics"]}),
    ] {
        let refused = as_token(server, &operator, Method::POST, "/v1/acl/tokens", Some(body))
            .await
            .expect(StatusCode::CONFLICT);
        assert_eq!(refused.code(), "upgrade_pending");
    }
    let refused = grant(server, &operator, json!({"ttl_ms": 10_000, "service": "prod/api"}))
        .await
        .expect(StatusCode::CONFLICT);
    assert_eq!(refused.code(), "upgrade_pending");

    // As before: a one-service registrar gets a lease of the tenant and keeps it.
    let (_, api) = mint(
        server,
        &operator,
        json!({"tenant": "acme", "allow": ["prod/api=register,renew,set_state,read"]}),
    )
    .await;
    grant(server, &api, json!({"ttl_ms": 10_000}))
        .await
        .expect(StatusCode::OK);
    let registered = as_token(
        server,
        &api,
        Method::PUT,
        API_0,
        Some(json!({"incarnation": 1, "endpoint": endpoint("10.0.0.1"), "lease": {"ttl_ms": 10_000}})),
    )
    .await
    .expect(StatusCode::OK);
    let lease = lease_of(&registered);
    as_token(
        server,
        &api,
        Method::PUT,
        &format!("/v1/leases/acme/{lease}/renew"),
        None,
    )
    .await
    .expect(StatusCode::OK);
    // The app's own drain holds against it at format 1.
    with_headers(
        server,
        &api,
        Method::POST,
        &format!("{API_0}/drain"),
        json!({"incarnation": 1, "reason": "shutting down"}),
        &[],
    )
    .await
    .expect(StatusCode::OK);
    let held = with_headers(
        server,
        &api,
        Method::PUT,
        &format!("{API_0}/serving"),
        json!({"incarnation": 1, "state": "ready", "reason": "back"}),
        &[],
    )
    .await
    .expect(StatusCode::OK);
    assert_eq!(held.body["unchanged"], "drain_held", "{}", held.body);
    for node in &mut nodes {
        node.stop().await;
    }
}
