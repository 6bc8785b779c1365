//! Watch routes (SPEC W3, W4): a service's or a namespace's changes as newline-delimited JSON
//! [`Frame`]s.
//!
//! ```text
//!  no from_revision:   snapshot* progress(R) | update* progress* ... [resync | closing]
//!  from_revision=F:    update(>F)* progress(R) | update* progress* ... [resync | closing]
//!  F compacted:        error{compacted, current revision}            (stream ends)
//! ```
//!
//! The initial frames and the subscription come from one `Gate::read` (see `muster_hub`);
//! they are encoded after the registry lock is released, so a large snapshot never holds up
//! a write.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use muster_auth::Verb;
use muster_core::api::Frame;
use muster_core::{ErrorCode, Revision, ServiceKey, ServiceSnapshot, ServiceUpdate};
use muster_registry::{ReadError, Scope};
use serde::Deserialize;

use crate::{Native, WatchBegan};
use muster_gate::Caller;
use muster_http::error::ApiError;
use muster_http::extract::{INDEX_HEADER, QueryParams, Segments};
use muster_http::peer::Peer;
use muster_hub::frames;

/// The query of a watch.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    /// Replay every update after this revision instead of starting with snapshots.
    #[serde(default)]
    from_revision: Option<Revision>,
}

/// `GET /v1/watch/{tenant}/{namespace}/{service}`.
pub async fn watch_service(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<Extension<Peer>>,
    segments: Segments,
    QueryParams(query): QueryParams<WatchQuery>,
) -> Result<Response, ApiError> {
    let key = segments.service()?;
    let source = peer.map(|peer| peer.addr);
    start(&app, &caller, source, Scope::Service(key), query.from_revision)
}

/// `GET /v1/watch/{tenant}/{namespace}`.
pub async fn watch_namespace(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<Extension<Peer>>,
    segments: Segments,
    QueryParams(query): QueryParams<WatchQuery>,
) -> Result<Response, ApiError> {
    let namespace = segments.namespace()?;
    let source = peer.map(|peer| peer.addr);
    start(&app, &caller, source, Scope::Namespace(namespace), query.from_revision)
}

/// How a watch begins, read together with its subscription.
enum Beginning {
    Snapshots(Vec<Arc<ServiceSnapshot>>),
    Replay(Vec<Arc<ServiceUpdate>>),
    Refused(ReadError),
}

fn start(
    app: &Arc<Native>,
    caller: &Caller,
    source: Option<SocketAddr>,
    scope: Scope,
    from: Option<Revision>,
) -> Result<Response, ApiError> {
    // The slot is taken before anything is read and held by the stream (SPEC W4).
    let (tenant, resource) = match &scope {
        Scope::Service(key) => (key.tenant.clone(), format!("GET /v1/watch/{key}")),
        Scope::Namespace(namespace) => (namespace.tenant.clone(), format!("GET /v1/watch/{namespace}")),
    };
    let permit = app
        .gate
        .admit(caller, Some(&tenant), muster_gate::Hold::Watch, source, || {
            resource.clone()
        })?;
    // A namespace watch shows only the services the caller may watch (SPEC S3); the route's
    // gate judged only the namespace.
    let filtered = matches!(scope, Scope::Namespace(_)) && caller.token_ref().is_some();
    let visible = |key: &ServiceKey| !filtered || caller.may(key, Verb::Watch);
    let (at, beginning, subscription) = app.gate.read(|registry| {
        // Judged at the same read as the first frames: a token revoked since the auth layer
        // saw it gets nothing.
        if let Some(token) = caller.token_ref()
            && registry.acl().get(token.accessor()).is_none()
        {
            app.gate.record_revoked(token, Verb::Watch, source, resource.clone());
            return Err(ApiError::new(ErrorCode::Unauthenticated, muster_gate::REVOKED));
        }
        let at = registry.revision();
        let beginning = match from {
            Some(from) if from > at => {
                return Err(ApiError::from(ReadError::FutureRevision {
                    requested: from,
                    current: at,
                }));
            }
            Some(from) => match registry.changes_since(&scope, from) {
                Ok(mut updates) => {
                    updates.retain(|update| visible(&update.key));
                    Beginning::Replay(updates)
                }
                Err(error) => return Ok((at, Beginning::Refused(error), None)),
            },
            None => Beginning::Snapshots(match &scope {
                Scope::Service(key) => registry.known_snapshot(key).into_iter().collect(),
                Scope::Namespace(namespace) => {
                    let mut services = registry.services(namespace);
                    services.retain(|snapshot| visible(snapshot.key()));
                    services
                }
            }),
        };
        Ok((at, beginning, app.gate.subscribe(scope)))
    })?;

    match &beginning {
        Beginning::Refused(ReadError::Compacted { .. }) => app.meter.watch_began(WatchBegan::Compacted),
        Beginning::Refused(_) => {}
        Beginning::Replay(_) => app.meter.watch_began(WatchBegan::Resumed),
        Beginning::Snapshots(_) => app.meter.watch_began(WatchBegan::Connected),
    }
    let initial = initial_frames(at, beginning, subscription.is_some());
    let live = futures_util::stream::iter(subscription).flatten();
    let live = match caller.token_ref() {
        None => live.boxed(),
        Some(token) => {
            let caller = caller.clone();
            let live = live.filter(move |frame| {
                futures_util::future::ready(
                    !filtered || frame_key(frame).is_none_or(|key| caller.may(&key, Verb::Watch)),
                )
            });
            // The revocation that ends the stream is on record (SPEC S4).
            let revoked =
                muster_gate::revoked_recorded(Arc::clone(&app.gate), Arc::clone(token), Verb::Watch, source, resource);
            Revocable::new(live, Box::pin(revoked), Arc::clone(&app.gate)).boxed()
        }
    };
    Ok(stream_response(at, initial, live, permit))
}

/// The service a live frame is about (updates); `None` for progress and the last frames.
fn frame_key(frame: &Bytes) -> Option<ServiceKey> {
    #[derive(Deserialize)]
    struct Keyed {
        key: Option<ServiceKey>,
    }
    serde_json::from_slice::<Keyed>(frame).ok().and_then(|keyed| keyed.key)
}

/// A token's live frames until the token is revoked: then an `unauthenticated` error frame,
/// and the stream ends (SPEC S1).
struct Revocable<S> {
    frames: S,
    revoked: Pin<Box<dyn Future<Output = ()> + Send>>,
    gate: Arc<muster_gate::Gate>,
    done: bool,
}

impl<S> Revocable<S> {
    fn new(frames: S, revoked: Pin<Box<dyn Future<Output = ()> + Send>>, gate: Arc<muster_gate::Gate>) -> Self {
        Revocable {
            frames,
            revoked,
            gate,
            done: false,
        }
    }
}

impl<S: Stream<Item = Bytes> + Unpin> Stream for Revocable<S> {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.revoked.as_mut().poll(cx).is_ready() {
            self.done = true;
            let revision = self.gate.revision();
            return Poll::Ready(Some(frames::error(
                ErrorCode::Unauthenticated.as_str(),
                muster_gate::REVOKED.to_owned(),
                revision,
            )));
        }
        let next = Pin::new(&mut self.frames).poll_next(cx);
        if let Poll::Ready(None) = next {
            self.done = true;
        }
        next
    }
}

/// The frames a watch begins with, read at `at`. Without a subscription (the hub is closed:
/// the server is stopping) they end with `closing` instead of `progress`, still after the
/// snapshots or the replay: `closing` says everything up to `at` was sent, so it must have
/// been, or a client resuming from it would skip the replay.
fn initial_frames(at: Revision, beginning: Beginning, subscribed: bool) -> Vec<Bytes> {
    let mut initial: Vec<Bytes> = match beginning {
        Beginning::Refused(error) => {
            let current = match &error {
                ReadError::Compacted { current, .. } => *current,
                _ => at,
            };
            return vec![frames::error(error.code(), error.to_string(), current)];
        }
        Beginning::Snapshots(snapshots) => snapshots
            .iter()
            .map(|snapshot| {
                frames::encode(&Frame::Snapshot {
                    revision: at,
                    snapshot: ServiceSnapshot::clone(snapshot),
                })
            })
            .collect(),
        Beginning::Replay(updates) => updates.iter().map(|update| frames::encode_update(update)).collect(),
    };
    initial.push(if subscribed {
        frames::progress(at)
    } else {
        frames::closing(at)
    });
    initial
}

/// The stream owns `permit`: its slot returns when the stream ends or the client goes.
fn stream_response(
    at: Revision,
    initial: Vec<Bytes>,
    live: impl Stream<Item = Bytes> + Send + 'static,
    permit: muster_gate::Permit,
) -> Response {
    let frames = futures_util::stream::iter(initial).chain(live).map(move |frame| {
        let _held = &permit;
        Ok::<Bytes, Infallible>(frame)
    });
    let mut response = Response::new(Body::from_stream(frames));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(INDEX_HEADER, HeaderValue::from(at.0));
    response
}

#[cfg(test)]
mod tests {
    use muster_core::{Digest, Event, Incarnation, InstanceId, ServiceKey};

    use super::*;

    fn decode(frames: &[Bytes]) -> Vec<Frame> {
        frames.iter().map(|f| serde_json::from_slice(f).unwrap()).collect()
    }

    #[test]
    fn a_replay_refused_a_subscription_by_a_closing_hub_is_still_sent_before_closing() {
        // Trace: `from_revision=20` while the server stops; the hub refuses the subscription.
        // `closing{22}` alone would tell the client it had everything up to 22 and it would
        // resume from there, skipping the delete at 21 and the add at 22.
        let update = |revision: u64| {
            Arc::new(ServiceUpdate {
                key: ServiceKey::new("acme", "prod", "api").unwrap(),
                revision: Revision(revision),
                prev_revision: Revision(revision - 1),
                digest: Digest(revision),
                events: vec![Event::Delete {
                    instance: InstanceId::new("a").unwrap(),
                    incarnation: Incarnation(1),
                    reason: muster_core::DeleteReason::Deregistered,
                }],
            })
        };
        let replay = || Beginning::Replay(vec![update(21), update(22)]);
        let revisions = |frames: Vec<Frame>| {
            frames
                .into_iter()
                .map(|frame| match frame {
                    Frame::Update(update) => format!("update {}", update.revision),
                    Frame::Progress { revision } => format!("progress {revision}"),
                    Frame::Closing { revision } => format!("closing {revision}"),
                    other => panic!("unexpected {other:?}"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            revisions(decode(&initial_frames(Revision(22), replay(), false))),
            ["update 21", "update 22", "closing 22"]
        );
        assert_eq!(
            revisions(decode(&initial_frames(Revision(22), replay(), true))),
            ["update 21", "update 22", "progress 22"]
        );
    }
}
