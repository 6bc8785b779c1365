//! What the stream machines' tests share.

use std::sync::Arc;

use muster_core::Revision;

use crate::kind::Kind;
use crate::resources::Versioned;

/// A stand-in resource: its bytes are its revision.
pub(crate) fn resource(kind: Kind, name: &str, revision: u64) -> Arc<Versioned> {
    Arc::new(Versioned {
        kind,
        name: name.to_owned(),
        revision: Revision(revision),
        any: envoy_types::pb::google::protobuf::Any {
            type_url: kind.type_url().to_owned(),
            value: revision.to_le_bytes().to_vec(),
        },
    })
}
