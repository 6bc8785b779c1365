//! Muster's xDS adapter (SPEC D5): the registry as an xDS control plane, so proxyless gRPC
//! clients (`xds:///api.prod`) and Envoy discover services with no Muster code.
//!
//! ```text
//!  ServiceSnapshot ──assignment()──▶ ClusterLoadAssignment ─┐ packed once per revision and
//!  name api.prod ──listener/route/cluster()─────────────────┴▶ cohort: Arc<Versioned>
//!                                                                   │ shared by every stream
//!  DiscoveryRequest ──▶ SotwStream / DeltaStream ──respond()──▶ DiscoveryResponse (version = revision)
//!                              └──▶ Ledger: per resource sent / acked revision, last NACK
//! ```
//!
//! Pure: no I/O, no clock (times come in as milliseconds). The `server` module (feature
//! `server`) runs the gRPC service over the gate, watches the registry and feeds these
//! machines.

#![forbid(unsafe_code)]

pub mod assignment;
pub mod delta;
pub mod heard;
pub mod kind;
pub mod ledger;
pub mod name;
pub mod resources;
#[cfg(feature = "server")]
pub mod server;
pub mod sotw;
pub mod subscription;
#[cfg(test)]
mod test_support;
pub mod wire;

pub use assignment::Cohort;
pub use delta::DeltaStream;
/// The generated protobuf types and ADS service stubs (envoy-types).
pub use envoy_types::pb;
pub use heard::{Answer, Heard, UnknownType};
pub use kind::Kind;
pub use ledger::{Ledger, Nack, ResourceState};
pub use name::ServiceName;
pub use resources::Versioned;
pub use sotw::SotwStream;
pub use subscription::Subscription;

use muster_core::{Revision, ServiceSnapshot};

/// Resource `kind` named `name` at `revision`: the listener, route configuration or cluster
/// from the name alone, the assignment from `snapshot` as `cohort` sees it.
pub fn build(kind: Kind, name: &str, revision: Revision, snapshot: &ServiceSnapshot, cohort: &Cohort) -> Versioned {
    use envoy_types::util::pack_any;
    let any = match kind {
        Kind::Listener => pack_any(resources::listener(name)),
        Kind::Route => pack_any(resources::route(name)),
        Kind::Cluster => pack_any(resources::cluster(name)),
        Kind::Endpoint => pack_any(assignment::assignment(name, snapshot, cohort)),
    };
    Versioned {
        kind,
        name: name.to_owned(),
        revision,
        any,
    }
}
