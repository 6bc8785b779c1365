//! Reads: a service's snapshot (paged at one revision, at a past revision, or as a blocking
//! query) and a namespace's service listing (SPEC W2).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use muster_auth::Verb;
use muster_core::api::{ServiceSummary, ServicesReply};
use muster_core::{Digest, Endpoint, Revision, ServiceKey};
use muster_registry::Page;
use serde::{Deserialize, Serialize};

use crate::Native;
use crate::page_token::PageToken;
use crate::read_cache::{ReplyHead, reply_body};
use crate::wait::{DEFAULT_WAIT, parse_wait};
use muster_gate::Caller;
use muster_gate::consistency::Consistency;
use muster_gate::parked::Woken;
use muster_http::error::ApiError;
use muster_http::extract::{INDEX_HEADER, QueryParams, Segments};

/// The query of `GET /v1/registry/{tenant}/{namespace}/{service}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SnapshotQuery {
    /// Read at this past revision (within retained history).
    #[serde(default)]
    revision: Option<Revision>,
    /// At most this many endpoints per page.
    #[serde(default)]
    #[param(minimum = 1)]
    limit: Option<usize>,
    /// Continue after the previous page (same revision).
    #[serde(default)]
    page_token: Option<String>,
    /// Blocking query: answer once the service's revision is above this.
    #[serde(default)]
    index: Option<Revision>,
    /// Blocking query: the longest wait (`30s`, `500ms`, `5m`, or bare seconds; at most 5m).
    #[serde(default)]
    #[param(pattern = r"^[0-9]{1,19}(ms|s|m)?$")]
    wait: Option<String>,
    /// `stale`, `default` or `consistent` (see the `consistency` module).
    #[serde(default)]
    consistency: Consistency,
    /// In a federated region: add the service's sets mirrored from peer regions and its
    /// failover decision to the first page (SPEC G1, G2). A service only mirrored here, not
    /// registered locally, then reads as an empty local set.
    #[serde(default)]
    federation: bool,
}

/// The query of `GET /v1/registry/{tenant}/{namespace}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ServicesQuery {
    /// `stale`, `default` or `consistent`.
    #[serde(default)]
    consistency: Consistency,
}

/// A [`SnapshotReply`](muster_core::api::SnapshotReply) borrowing the page's endpoints, so a
/// read copies no record. Serialises exactly as `SnapshotReply`.
#[derive(Serialize)]
struct SnapshotReplyRef<'a> {
    revision: Revision,
    service_revision: Revision,
    digest: Digest,
    total: usize,
    endpoints: &'a [Arc<Endpoint>],
    #[serde(skip_serializing_if = "Option::is_none")]
    next_page_token: Option<String>,
    protection_active: bool,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    mirrors: &'a [muster_core::federation::MirroredSet],
    #[serde(skip_serializing_if = "Option::is_none")]
    failover: Option<&'a muster_core::federation::FailoverDecision>,
}

/// Where a read starts: its revision and the instance to continue after.
struct ReadAt {
    at: Option<Revision>,
    after: Option<muster_core::InstanceId>,
}

fn read_at(query: &SnapshotQuery) -> Result<ReadAt, ApiError> {
    let token = match &query.page_token {
        None => None,
        Some(text) => Some(PageToken::decode(text).ok_or_else(|| {
            ApiError::bad_request(format!(
                "page_token: '{}' is not a page token from this server",
                text.escape_debug()
            ))
        })?),
    };
    if let (Some(token), Some(revision)) = (&token, query.revision)
        && token.at != revision
    {
        return Err(ApiError::bad_request(format!(
            "revision: {revision} differs from the page token's revision {}",
            token.at
        )));
    }
    if query.limit == Some(0) {
        return Err(ApiError::bad_request("limit: must be at least 1"));
    }
    Ok(match token {
        Some(token) => ReadAt {
            at: Some(token.at),
            after: Some(token.after),
        },
        None => ReadAt {
            at: query.revision,
            after: None,
        },
    })
}

/// `GET /v1/registry/{tenant}/{namespace}/{service}`.
pub async fn snapshot(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<muster_http::peer::Peer>>,
    segments: Segments,
    QueryParams(query): QueryParams<SnapshotQuery>,
) -> Result<Response, ApiError> {
    let key = segments.service()?;
    let start = read_at(&query)?;
    app.gate.ready_for(query.consistency).await?;
    match (query.index, &query.wait) {
        (Some(index), wait) => {
            if start.at.is_some() {
                return Err(ApiError::bad_request(
                    "index: a blocking query reads the current set; drop revision and page_token",
                ));
            }
            let wait = match wait {
                None => DEFAULT_WAIT,
                Some(text) => parse_wait(text).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "wait: '{}' is not a duration like 30s, 500ms or 5m",
                        text.escape_debug()
                    ))
                })?,
            };
            // Parked, it holds a slot of its principal's budget in the tenant (SPEC W4).
            let source = peer.map(|peer| peer.addr);
            let resource = || format!("GET /v1/registry/{key}?index={index}");
            let _permit = app
                .gate
                .admit(&caller, Some(&key.tenant), muster_gate::Hold::Parked, source, resource)?;
            // A revoked token ends the wait with 401 (SPEC S1), as it ends a watch.
            app.gate
                .unless_revoked(
                    &caller,
                    muster_auth::Verb::Read,
                    source,
                    resource,
                    wait_for_change(&app, &key, index, wait),
                )
                .await?;
        }
        (None, Some(_)) => return Err(ApiError::bad_request("wait: only meaningful with index")),
        (None, None) => {}
    }
    if query.federation
        && let Some(federation) = &app.federation
    {
        let mut response = federated_page(
            &app,
            federation.as_ref(),
            &key,
            &start,
            query.limit.unwrap_or(usize::MAX),
        )?;
        app.gate.annotate(&mut response);
        return Ok(response);
    }
    if start.at.is_none() && start.after.is_none() && query.limit.is_none() {
        let mut response = whole_set(&app, &key)?;
        app.gate.annotate(&mut response);
        return Ok(response);
    }
    let limit = query.limit.unwrap_or(usize::MAX);
    // Take the page (shared records) under the read lock; encode it after releasing it, so a
    // large set never holds up a write.
    let page = app
        .gate
        .read(|registry| {
            let page = registry.page(&key, start.at, start.after.as_ref(), limit)?;
            // A released service whose removals are still fenced is known, and empty (W5).
            let known_empty = page.is_none() && start.at.is_none() && registry.known_snapshot(&key).is_some();
            Ok::<_, muster_registry::ReadError>(page.or_else(|| known_empty.then(|| Page::empty(registry.revision()))))
        })?
        .ok_or_else(|| match start.at {
            Some(at) => ApiError::not_found(format!("service {key} did not exist at revision {at}")),
            None => ApiError::not_found(format!("service {key} is not registered")),
        })?;
    let mut response = page_response(&page, app.gate.protection_active(&key), &[], None);
    app.gate.annotate(&mut response);
    Ok(response)
}

/// A page with the service's mirrored sets and failover decision (on the first page of a
/// current read only: a mirror has no past revisions here).
fn federated_page(
    app: &Native,
    federation: &dyn crate::Federated,
    key: &ServiceKey,
    start: &ReadAt,
    limit: usize,
) -> Result<Response, ApiError> {
    let now_ms = app.gate.clock.unix_now_ms();
    let first_current = start.at.is_none() && start.after.is_none();
    let (page, at, (mirrors, failover), known) = app.gate.read(|registry| {
        let page = registry.page(key, start.at, start.after.as_ref(), limit)?;
        let parts = if first_current {
            let local = registry.snapshot(key);
            federation.parts(registry, key, local.as_deref(), now_ms)
        } else {
            (Vec::new(), None)
        };
        let known = registry.known_snapshot(key).is_some();
        Ok::<_, muster_registry::ReadError>((page, registry.revision(), parts, known))
    })?;
    let page = match page {
        Some(page) => page,
        None if first_current && (known || !mirrors.is_empty()) => Page::empty(at),
        None => return Err(ApiError::not_found(format!("service {key} is not registered"))),
    };
    Ok(page_response(
        &page,
        app.gate.protection_active(key),
        &mirrors,
        failover.as_ref(),
    ))
}

/// The whole current set, its endpoints encoded once per service revision (`read_cache`).
/// Only the snapshot's `Arc` is taken under the read lock; the encoding happens after.
fn whole_set(app: &Native, key: &ServiceKey) -> Result<Response, ApiError> {
    let (at, snapshot) = app
        .gate
        .read(|registry| (registry.revision(), registry.known_snapshot(key)));
    let snapshot = snapshot.ok_or_else(|| ApiError::not_found(format!("service {key} is not registered")))?;
    let endpoints = match app.read_cache.get(key, snapshot.revision()) {
        Some(json) => json,
        None => {
            let (endpoints, _) = snapshot.page(None, usize::MAX);
            let json = Bytes::from(
                serde_json::to_vec(&endpoints)
                    .map_err(|err| ApiError::new(muster_core::ErrorCode::Internal, err.to_string()))?,
            );
            app.read_cache.put(key, snapshot.revision(), json.clone());
            json
        }
    };
    let head = ReplyHead {
        at,
        service_revision: snapshot.revision(),
        digest: snapshot.digest(),
        total: snapshot.len(),
        protection_active: app.gate.protection_active(key),
    };
    let mut response = (
        [(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        reply_body(&head, &endpoints),
    )
        .into_response();
    response.headers_mut().insert(INDEX_HEADER, HeaderValue::from(at.0));
    Ok(response)
}

fn page_response(
    page: &Page,
    protection_active: bool,
    mirrors: &[muster_core::federation::MirroredSet],
    failover: Option<&muster_core::federation::FailoverDecision>,
) -> Response {
    let reply = SnapshotReplyRef {
        revision: page.at,
        service_revision: page.revision,
        digest: page.digest,
        total: page.total,
        endpoints: &page.endpoints,
        next_page_token: page.next.clone().map(|after| PageToken { at: page.at, after }.encode()),
        protection_active,
        mirrors,
        failover,
    };
    let mut response = Json(reply).into_response();
    response
        .headers_mut()
        .insert(INDEX_HEADER, HeaderValue::from(page.at.0));
    response
}

/// Waits until the service's last change is after `index`, `wait` passes, or the server
/// starts stopping. An unknown service counts as revision 0.
async fn wait_for_change(app: &Native, key: &ServiceKey, index: Revision, wait: Duration) {
    let waiting = app.blocking.begin();
    waiting.end(wait_for_change_inner(app, key, index, wait).await);
}

async fn wait_for_change_inner(app: &Native, key: &ServiceKey, index: Revision, wait: Duration) -> Woken {
    let deadline = tokio::time::Instant::now() + wait;
    let mut revisions = app.gate.revisions();
    let mut stopping = app.gate.stopping();
    loop {
        revisions.borrow_and_update();
        let service_revision = app
            .gate
            .read(|registry| registry.snapshot(key).map_or(Revision::ZERO, |s| s.revision()));
        if service_revision > index {
            return Woken::Changed;
        }
        if *stopping.borrow_and_update() {
            return Woken::Stopped;
        }
        tokio::select! {
            changed = revisions.changed() => if changed.is_err() { return Woken::Stopped },
            _ = stopping.changed() => return Woken::Stopped,
            () = tokio::time::sleep_until(deadline) => return Woken::TimedOut,
        }
    }
}

/// `GET /v1/registry/{tenant}/{namespace}`: the namespace's services, sorted by name.
pub async fn services(
    State(app): State<Arc<Native>>,
    caller: Caller,
    segments: Segments,
    QueryParams(query): QueryParams<ServicesQuery>,
) -> Result<Response, ApiError> {
    let namespace = segments.namespace()?;
    app.gate.ready_for(query.consistency).await?;
    let now_ms = app.gate.clock.unix_now_ms();
    let (revision, snapshots) = app
        .gate
        .read(|registry| (registry.revision(), registry.listed_services(&namespace, now_ms)));
    // Only the services the caller may read (SPEC S3): the route's gate let it into the
    // namespace, each service is judged on its own.
    let services = snapshots
        .iter()
        .filter(|snapshot| caller.may(snapshot.key(), Verb::Read))
        .map(|snapshot| ServiceSummary {
            service: snapshot.key().service.clone(),
            revision: snapshot.revision(),
            digest: snapshot.digest(),
            endpoints: snapshot.len(),
            protection_active: app.gate.protection_active(snapshot.key()),
        })
        .collect();
    let mut response = Json(ServicesReply { revision, services }).into_response();
    response
        .headers_mut()
        .insert(INDEX_HEADER, HeaderValue::from(revision.0));
    app.gate.annotate(&mut response);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use muster_core::api::SnapshotReply;

    use super::*;

    #[test]
    fn the_borrowed_reply_encodes_like_the_contract() {
        use muster_core::{Actor, Incarnation, InstanceId, Principal};
        use muster_registry::{CommandMeta, LeaseSpec, Register, Registry, RegistryConfig, Target};

        let mut registry = Registry::new(RegistryConfig::default());
        let key = ServiceKey::new("acme", "prod", "api").unwrap();
        let command = Register {
            target: Target {
                key: key.clone(),
                instance: InstanceId::new("a").unwrap(),
                incarnation: Incarnation(1),
            },
            spec: serde_json::from_str(r#"{"addresses":[{"ip":"10.0.0.1"}]}"#).unwrap(),
            lease: LeaseSpec::None,
            expected_revision: None,
        };
        let meta = CommandMeta {
            at_ms: 0,
            principal: Principal::new("test").unwrap(),
            actor: Actor::App,
        };
        registry.apply(&command.into(), &meta).unwrap();
        let endpoints: Vec<Arc<Endpoint>> = registry.snapshot(&key).unwrap().iter().cloned().collect();
        let owned = SnapshotReply {
            revision: Revision(20),
            service_revision: Revision(19),
            digest: Digest(5),
            total: 3,
            endpoints: endpoints.iter().map(|e| Endpoint::clone(e)).collect(),
            next_page_token: Some("20.a".into()),
            protection_active: true,
            mirrors: Vec::new(),
            failover: None,
        };
        let borrowed = SnapshotReplyRef {
            revision: Revision(20),
            service_revision: Revision(19),
            digest: Digest(5),
            total: 3,
            endpoints: &endpoints,
            next_page_token: Some("20.a".into()),
            protection_active: true,
            mirrors: &[],
            failover: None,
        };
        assert_eq!(
            serde_json::to_string(&borrowed).unwrap(),
            serde_json::to_string(&owned).unwrap()
        );
    }
}
