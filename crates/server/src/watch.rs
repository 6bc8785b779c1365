//! Watch routes (SPEC W3, W4): a service's or a namespace's changes as newline-delimited JSON
//! [`Frame`](muster_core::api::Frame)s.
//!
//! ```text
//!  no from_revision:   snapshot* progress(R) | update* progress* ... [resync | closing]
//!  from_revision=F:    update(>F)* progress(R) | update* progress* ... [resync | closing]
//!  F compacted:        error{compacted, current revision}            (stream ends)
//! ```
//!
//! The initial frames and the subscription come from one `Node::read` (see [`crate::hub`]);
//! they are encoded after the registry lock is released, so a large snapshot never holds up
//! a write.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use muster_core::api::Frame;
use muster_core::{Revision, ServiceSnapshot, ServiceUpdate};
use muster_registry::{ReadError, Scope};
use serde::Deserialize;

use crate::app::App;
use crate::error::ApiError;
use crate::extract::{INDEX_HEADER, QueryParams, Segments};
use crate::frames;
use crate::subscription::Subscription;

/// The query of a watch.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WatchQuery {
    /// Replay every update after this revision instead of starting with snapshots.
    #[serde(default)]
    from_revision: Option<Revision>,
}

/// `GET /v1/watch/{tenant}/{namespace}/{service}`.
pub(crate) async fn watch_service(
    State(app): State<Arc<App>>,
    segments: Segments,
    QueryParams(query): QueryParams<WatchQuery>,
) -> Result<Response, ApiError> {
    let key = segments.service()?;
    start(&app, Scope::Service(key), query.from_revision)
}

/// `GET /v1/watch/{tenant}/{namespace}`.
pub(crate) async fn watch_namespace(
    State(app): State<Arc<App>>,
    segments: Segments,
    QueryParams(query): QueryParams<WatchQuery>,
) -> Result<Response, ApiError> {
    let namespace = segments.namespace()?;
    start(&app, Scope::Namespace(namespace), query.from_revision)
}

/// How a watch begins, read together with its subscription.
enum Beginning {
    Snapshots(Vec<Arc<ServiceSnapshot>>),
    Replay(Vec<Arc<ServiceUpdate>>),
    Refused(ReadError),
}

fn start(app: &Arc<App>, scope: Scope, from: Option<Revision>) -> Result<Response, ApiError> {
    let (at, beginning, subscription) = app.node.read(|registry| {
        let at = registry.revision();
        let beginning = match from {
            Some(from) if from > at => {
                return Err(ApiError::from(ReadError::FutureRevision {
                    requested: from,
                    current: at,
                }));
            }
            Some(from) => match registry.changes_since(&scope, from) {
                Ok(updates) => Beginning::Replay(updates),
                Err(error) => return Ok((at, Beginning::Refused(error), None)),
            },
            None => Beginning::Snapshots(match &scope {
                Scope::Service(key) => registry.snapshot(key).into_iter().collect(),
                Scope::Namespace(namespace) => registry.services(namespace),
            }),
        };
        Ok((at, beginning, app.hub.subscribe(scope)))
    })?;

    let mut initial: Vec<Bytes> = Vec::new();
    match beginning {
        Beginning::Refused(error) => {
            let current = match &error {
                ReadError::Compacted { current, .. } => *current,
                _ => at,
            };
            initial.push(frames::error(error.code(), error.to_string(), current));
        }
        _ if subscription.is_none() => initial.push(frames::closing(at)),
        Beginning::Snapshots(snapshots) => {
            initial.extend(snapshots.iter().map(|snapshot| {
                frames::encode(&Frame::Snapshot {
                    revision: at,
                    snapshot: ServiceSnapshot::clone(snapshot),
                })
            }));
            initial.push(frames::progress(at));
        }
        Beginning::Replay(updates) => {
            initial.extend(updates.iter().map(|update| frames::encode_update(update)));
            initial.push(frames::progress(at));
        }
    }
    Ok(stream_response(at, initial, subscription))
}

fn stream_response(at: Revision, initial: Vec<Bytes>, subscription: Option<Subscription>) -> Response {
    let live = futures_util::stream::iter(subscription).flatten();
    let frames = futures_util::stream::iter(initial)
        .chain(live)
        .map(Ok::<Bytes, Infallible>);
    let mut response = Response::new(Body::from_stream(frames));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(INDEX_HEADER, HeaderValue::from(at.0));
    response
}
