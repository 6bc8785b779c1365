//! Encoding watch frames as newline-delimited JSON, once per frame.

use bytes::Bytes;
use muster_core::api::{ErrorDetail, Frame};
use muster_core::{Revision, ServiceUpdate};
use serde::Serialize;

/// An `update` frame borrowing the update, so the hub encodes it without copying its events.
/// Serialises exactly as [`Frame::Update`].
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum UpdateFrame<'a> {
    Update(&'a ServiceUpdate),
}

/// One frame as an NDJSON line.
pub fn encode(frame: &Frame) -> Bytes {
    line(frame)
}

/// An `update` frame as an NDJSON line.
pub fn encode_update(update: &ServiceUpdate) -> Bytes {
    line(&UpdateFrame::Update(update))
}

/// A `progress` frame.
pub fn progress(revision: Revision) -> Bytes {
    encode(&Frame::Progress { revision })
}

/// A `resync` frame.
pub fn resync(revision: Revision) -> Bytes {
    encode(&Frame::Resync { revision })
}

/// A `closing` frame.
pub fn closing(revision: Revision) -> Bytes {
    encode(&Frame::Closing { revision })
}

/// An `error` frame.
pub fn error(code: &str, message: String, revision: Revision) -> Bytes {
    encode(&Frame::Error {
        error: ErrorDetail {
            code: code.to_owned(),
            message,
        },
        revision,
    })
}

fn line(value: &impl Serialize) -> Bytes {
    let mut bytes = serde_json::to_vec(value).expect("frames always serialise");
    bytes.push(b'\n');
    Bytes::from(bytes)
}

#[cfg(test)]
mod tests {
    use muster_core::{Digest, Event, Incarnation, InstanceId, ServiceKey};

    use super::*;

    #[test]
    fn a_borrowed_update_encodes_like_the_frame() {
        let update = ServiceUpdate {
            key: ServiceKey::new("acme", "prod", "api").unwrap(),
            revision: Revision(21),
            prev_revision: Revision(20),
            digest: Digest(7),
            events: vec![Event::Delete {
                instance: InstanceId::new("a").unwrap(),
                incarnation: Incarnation(1),
                reason: muster_core::DeleteReason::Deregistered,
            }],
        };
        let owned = encode(&Frame::Update(update.clone()));
        assert_eq!(encode_update(&update), owned);
        assert!(owned.ends_with(b"\n"));
        let back: Frame = serde_json::from_slice(&owned).unwrap();
        assert_eq!(back, Frame::Update(update));
    }
}
