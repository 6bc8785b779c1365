//! Muster's vocabulary: the types every other crate speaks.
//!
//! A caller asks for a [`ServiceKey`] (tenant / namespace / service, never one string) and gets
//! back a [`ServiceSnapshot`]: the complete set of [`Endpoint`]s at a [`Revision`], with a
//! [`Digest`] that proves which set it is. Changes travel as [`ServiceUpdate`]s, each naming the
//! service's previous revision, so a receiver can tell a contiguous history from a gap:
//!
//! ```text
//!  snapshot(rev 20, digest d20) ──update(rev 21, prev 20, d21)──▶ (rev 21, d21)
//!                                 ──update(rev 24, prev 21, d24)──▶ (rev 24, d24)
//!  an update whose prev_revision is not the receiver's revision, or whose digest the
//!  receiver cannot reproduce, means something was missed: resnapshot.
//! ```
//!
//! # Layout
//! - [`name`]: DNS-label names and the typed keys built from them.
//! - [`address`]: canonical addresses and the permitted-network policy.
//! - [`labels`]: bounded metadata labels.
//! - [`endpoint`]: the endpoint record and its serving state.
//! - [`spec`]: what a registrar submits, and its validation into typed attributes.
//! - [`check`]: the health checks a registration carries (the checker runs them).
//! - [`ids`]: revisions, incarnations, lease ids, digests.
//! - [`event`]: events, per-service updates and snapshots.
//! - [`error`]: [`Rejection`], every refusal with its stable code.
//! - [`secret`]: [`Secret`], a secret's text that shows itself as `<redacted>`.
//! - [`api`]: the HTTP/JSON bodies and watch frames; [`xds_view`]: `GET /v1/xds/clients`'s.
//! - `schema` (feature `openapi`): the OpenAPI schemas of the types with hand-written serde.
//!
//! Nothing here does I/O, reads a clock or draws a random number.

#![forbid(unsafe_code)]

pub mod address;
pub mod api;
pub mod check;
pub mod code;
pub mod convergence;
pub mod endpoint;
pub mod error;
pub mod event;
pub mod federation;
pub mod ids;
pub mod labels;
pub mod limits;
pub mod name;
#[cfg(feature = "openapi")]
pub mod schema;
pub mod secret;
pub mod spec;
pub mod xds_view;

pub use address::{Address, Cidr, NetworkPolicy};
pub use check::{Check, CheckKind, CheckSpec, Signal};
pub use code::{ErrorCode, UnknownCode};
pub use endpoint::{Actor, Endpoint, Locality, NamedPort, Observation, Protocol, Provenance, ServingState};
pub use error::{Quota, Rejection};
pub use event::{DeleteReason, Event, GapError, ServiceSnapshot, ServiceUpdate};
pub use ids::{Digest, Incarnation, LeaseId, Revision};
pub use labels::Labels;
pub use limits::Limits;

/// The registry format this build writes and applies (architecture.md "Formats and versions"). A
/// cluster runs at the format its registry records; the leader raises it only once every
/// member reports this build's format or newer, so no member is ever asked to apply a
/// command it does not know. Until then the old behaviour stays, and a downgrade is possible.
///
/// - 1: the second wave's registry (no format recorded).
/// - 2: tokens carry a role (SPEC L5); leases may be bound to one service, and a lease
///   granted with a registration is bound to its service (SPEC L4); an app or checker may
///   lift a drain it set itself, never the owner's (SPEC L5).
/// - 3: the checker records a new reason for a state it holds (a TTL report's note, SPEC
///   H4), and a TTL report may carry a note.
pub const FORMAT: u32 = 3;

/// The format of a registry that records none: the second wave's.
pub const FIRST_FORMAT: u32 = 1;

pub use name::{DEFAULT_TENANT, InstanceId, Label, NamespaceKey, Principal, ServiceKey};
pub use secret::Secret;
pub use spec::{AddressSpec, Attributes, EndpointSpec, LocalitySpec, PortSpec};
