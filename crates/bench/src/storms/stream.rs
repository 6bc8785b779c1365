//! Raw watch streams for the storm workloads: one HTTP/1.1 connection per stream (hyper's
//! `client::conn`, no pool), as [`crate::watch`] opens them, read line by line into the few
//! frame fields a workload needs. No muster-client resolver: a resolver keeps a view and a
//! report connection, which would cost the load generator more than the server under test.
//!
//! ```text
//!  connect ─▶ GET /v1/watch/...[?from_revision=R] ─▶ NDJSON lines ─▶ F (serde) ─▶ on_frame(F, at)
//!                                                       └─ until the stream ends
//! ```

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc};

use tokio::task::JoinSet;

use crate::clock::{now, tokio_now};
use crate::codec::Lines;
use crate::watch::{OPEN_CONCURRENCY, OPEN_TIMEOUT, Opened};

pub(crate) use crate::watch::Target;

/// A frame's kind (`type`), as [`muster_core::api::Frame`] names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A service's complete set.
    Snapshot,
    /// One revision's events of one service.
    Update,
    /// Everything up to its revision was sent.
    Progress,
    /// The watch cannot continue (e.g. `compacted`).
    Error,
    /// The consumer fell behind: snapshot and watch again.
    Resync,
    /// The server is stopping.
    Closing,
    /// A kind this bench does not know (the contract may grow).
    #[serde(other)]
    Other,
}

/// The head of a frame: kind, revision and, for an error frame, its code.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct Head {
    /// The kind.
    #[serde(rename = "type")]
    pub(crate) kind: Kind,
    /// The frame's revision.
    #[serde(default)]
    pub(crate) revision: Option<u64>,
    /// An error frame's error.
    #[serde(default)]
    pub(crate) error: Option<ErrorHead>,
}

/// An error frame's stable code.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct ErrorHead {
    /// E.g. `compacted`.
    pub(crate) code: String,
}

/// A frame with its events' kinds, instances and delete reasons (the expiry workload's
/// namespace watcher counts `lease_expired` deletes).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct WithEvents {
    /// The kind.
    #[serde(rename = "type")]
    pub(crate) kind: Kind,
    /// The frame's revision.
    #[serde(default)]
    pub(crate) revision: Option<u64>,
    /// An update's events.
    #[serde(default)]
    pub(crate) events: Vec<EventHead>,
}

/// One event of an update: a delete names its instance and reason; a put neither (its
/// instance is inside the endpoint, which is not read).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct EventHead {
    /// `put` or `delete`.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// A delete's instance.
    #[serde(default)]
    pub(crate) instance: Option<String>,
    /// A delete's reason, e.g. `lease_expired`.
    #[serde(default)]
    pub(crate) reason: Option<String>,
}

/// Connects and sends `GET path` ([`crate::watch::open`]).
async fn open(target: &Target, path: &str, on_connect: impl FnOnce(Instant)) -> Result<Opened, String> {
    crate::watch::open(target, hyper::Method::GET, path, Bytes::new(), on_connect).await
}

/// Watches `path` and hands every frame, parsed as `F`, to `on_frame` with the instant its
/// bytes arrived. `Ok` when the stream ends (the server went); `Err` when it could not be
/// opened or a line did not parse.
pub(crate) async fn watch<F, H>(target: &Target, path: &str, on_frame: H) -> Result<(), String>
where
    F: DeserializeOwned,
    H: FnMut(F, Instant),
{
    watch_timed(target, path, |_| {}, on_frame).await
}

/// [`watch`], calling `on_connect` with the instant the TCP connection was established.
pub(crate) async fn watch_timed<F, H>(
    target: &Target,
    path: &str,
    on_connect: impl FnOnce(Instant),
    mut on_frame: H,
) -> Result<(), String>
where
    F: DeserializeOwned,
    H: FnMut(F, Instant),
{
    let (mut body, mut connection) = open(target, path, on_connect).await?;
    let mut lines = Lines::default();
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = &mut connection => return Ok(()),
        };
        let Some(Ok(frame)) = frame else { return Ok(()) };
        let at = now();
        let Ok(data) = frame.into_data() else { continue };
        lines.push(&data, |line| {
            let frame: F = serde_json::from_slice(line).map_err(|err| format!("frame: {err}"))?;
            on_frame(frame, at);
            Ok::<(), String>(())
        })?;
    }
}

/// Watches `path` and throws every byte away: a watcher that keeps the server's fan-out
/// busy (the hot service's) without spending the load generator's CPU on parsing.
pub(crate) async fn discard(target: &Target, path: &str) -> Result<(), String> {
    let (mut body, mut connection) = open(target, path, |_| {}).await?;
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = &mut connection => return Ok(()),
        };
        if !matches!(frame, Some(Ok(_))) {
            return Ok(());
        }
    }
}

/// What a receipt watcher (one service's, in evacuation and hotcold) tells its workload.
#[derive(Debug)]
pub(crate) enum Receipt {
    /// Its first frame arrived, or it failed before one.
    Opened(Result<(), String>),
    /// Watcher `watcher` received an update of this revision at this instant.
    Update {
        /// The watcher's number.
        watcher: usize,
        /// The update's revision (a coalesced one carries the last it covers).
        revision: u64,
        /// When its bytes arrived.
        at: Instant,
    },
}

/// Watches `path` as watcher `watcher`: one `Opened` at its first frame (or failure), then
/// an `Update` for each update frame. `opening` bounds connections being opened at once;
/// its permit is held until the first frame.
pub(crate) async fn receipt_watcher(
    target: Target,
    path: String,
    watcher: usize,
    receipts: mpsc::UnboundedSender<Receipt>,
    opening: Arc<Semaphore>,
) {
    let mut permit = Some(opening.acquire_owned().await);
    let result = watch(&target, &path, |head: Head, at| {
        if permit.take().is_some() {
            let _ = receipts.send(Receipt::Opened(Ok(())));
        }
        if let (Kind::Update, Some(revision)) = (head.kind, head.revision) {
            let _ = receipts.send(Receipt::Update { watcher, revision, at });
        }
    })
    .await;
    if permit.is_some() {
        let why = result
            .err()
            .unwrap_or_else(|| "the stream ended before its first frame".into());
        let _ = receipts.send(Receipt::Opened(Err(why)));
    }
}

/// Opens a receipt watcher on each of `paths` (watcher `i` on the `i`th) as tasks of
/// `tasks`, at most [`OPEN_CONCURRENCY`] connecting at once, and waits until every one has
/// opened or failed, or [`OPEN_TIMEOUT`]. Returns the receipts' inbox and how many opened;
/// updates that arrive while the others are still opening are not kept.
pub(crate) async fn open_receipt_watchers(
    target: &Target,
    paths: impl IntoIterator<Item = String>,
    tasks: &mut JoinSet<()>,
) -> (mpsc::UnboundedReceiver<Receipt>, u64) {
    let (receipts, mut inbox) = mpsc::unbounded_channel();
    let opening = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut watchers = 0;
    for (watcher, path) in paths.into_iter().enumerate() {
        tasks.spawn(receipt_watcher(
            target.clone(),
            path,
            watcher,
            receipts.clone(),
            Arc::clone(&opening),
        ));
        watchers += 1;
    }
    drop(receipts);
    let (mut answered, mut opened) = (0, 0u64);
    let deadline = tokio_now() + OPEN_TIMEOUT;
    while answered < watchers {
        match tokio::time::timeout_at(deadline, inbox.recv()).await {
            Ok(Some(Receipt::Opened(result))) => {
                answered += 1;
                opened += u64::from(result.is_ok());
            }
            Ok(Some(Receipt::Update { .. })) => {}
            _ => break,
        }
    }
    (inbox, opened)
}

#[cfg(test)]
mod tests {
    use muster_core::api::Frame;
    use muster_core::{DeleteReason, Digest, Event, Incarnation, InstanceId, Revision, ServiceKey, ServiceUpdate};

    use super::*;

    #[test]
    fn heads_read_every_kind_of_the_contract_and_an_error_frames_code() {
        let progress = serde_json::to_string(&Frame::Progress { revision: Revision(9) }).unwrap();
        let head: Head = serde_json::from_str(&progress).unwrap();
        assert_eq!((head.kind, head.revision), (Kind::Progress, Some(9)));
        let compacted = serde_json::to_string(&Frame::Error {
            error: muster_core::api::ErrorDetail {
                code: "compacted".into(),
                message: "gone".into(),
            },
            revision: Revision(40),
        })
        .unwrap();
        let head: Head = serde_json::from_str(&compacted).unwrap();
        assert_eq!(head.kind, Kind::Error);
        assert_eq!(head.error.map(|e| e.code).as_deref(), Some("compacted"));
        let unknown: Head = serde_json::from_str(r#"{"type":"bookmark","revision":3}"#).unwrap();
        assert_eq!(unknown.kind, Kind::Other);
    }

    #[test]
    fn an_update_names_its_deleted_instances_and_why() {
        let update = Frame::Update(ServiceUpdate {
            key: ServiceKey::new("acme", "prod", "api").unwrap(),
            revision: Revision(12),
            prev_revision: Revision(11),
            digest: Digest(1),
            events: vec![Event::Delete {
                instance: InstanceId::new("l-7").unwrap(),
                incarnation: Incarnation(1),
                reason: DeleteReason::LeaseExpired,
            }],
        });
        let frame: WithEvents = serde_json::from_str(&serde_json::to_string(&update).unwrap()).unwrap();
        assert_eq!((frame.kind, frame.revision), (Kind::Update, Some(12)));
        assert_eq!(frame.events[0].instance.as_deref(), Some("l-7"));
        assert_eq!(frame.events[0].reason.as_deref(), Some("lease_expired"));
    }
}
