//! Muster's DNS interface (SPEC D2, S3; DESIGN "Interfaces"): one tenant's view of the
//! registry as A/AAAA, SRV and DNS-SD answers, served over UDP and TCP.
//!
//! ```text
//!  registry apply ──(key, Arc<ServiceSnapshot>)──▶ LiveZone::stage   (O(1), under the lock)
//!                                                      │ next query folds it in
//!                                                      ▼
//!                                Zone: names ──▶ precomputed wire answers (per name, type)
//!                                                      ▲ answer(packet, transport, rotation)
//!  DnsListener: UDP loops + TCP connections ───────────┘ copy (whole, or a rotating window),
//!                                                        patch ID/flags/question case
//! ```
//!
//! # Names (domain default `muster.`, one tenant per listener)
//! - `<service>.<ns>.<d>` A/AAAA: every eligible endpoint's reachable addresses.
//! - `_<port>._<tcp|udp>.<service>.<ns>.<d>` SRV: priority = the endpoint's failover tier
//!   (`locality.priority`), weight = its weight, its port, target
//!   `<instance>.<service>.<ns>.<d>`, whose A/AAAA travel in the additional section.
//! - DNS-SD (RFC 6763) with `<ns>.<d>` as the browsing domain: `_services._dns-sd._udp.<ns>.<d>`
//!   PTR lists `_<service>._<tcp|udp>.<ns>.<d>`, whose PTRs list instances
//!   `<instance>._<service>._<tcp|udp>.<ns>.<d>` with SRV and TXT (labels as `key=value`).
//!
//! *Eligible* is the client library's rule without local state (SPEC C3): serving state
//! `ready` (or `degraded` when configured), and at least one address reachable from the
//! view's scopes (unscoped addresses always are). A known service with nothing eligible
//! answers NODATA, never the old addresses.
//!
//! # Protocol
//! NXDOMAIN for unknown names, NODATA for known names without that type, both with the SOA
//! (serial = revision, minimum = negative TTL) in authority (RFC 2308); EDNS(0) with BADVERS
//! above version 0; an RRset larger than a UDP answer's limit (the client's buffer, 512
//! without EDNS, at most `max_udp_payload`) sets TC with the records that fit, so the
//! resolver retries over TCP (RFC 2181 section 9), or, with `large_rrsets = "rotate"`, is
//! answered with a rotating window of the RRset, TC clear; an RRset over `max_answers`
//! records gets such a window over UDP whatever the setting; additional records travel as
//! space allows and never set TC (why: `zone.rs`, "Large RRsets"); the same query over TCP
//! gets everything that fits 64 KiB; the question is echoed as sent (0x20 case);
//! REFUSED outside the domain, for other classes and for zone transfers; FORMERR or silence
//! for malformed packets, never a panic.
//!
//! # Why precomputed bytes
//! A query costs a hash lookup and one copy: the answer was encoded (with hickory-proto)
//! when the service changed, not when it was asked for. hickory-server's response path
//! re-encodes every answer; see CRATES.md "DNS" for that trade-off.
//!
//! # Layout
//! - [`config`](ZoneConfig): the view's settings.
//! - `wire`: the query parser and the few bytes written by hand (header, OPT, SOA).
//! - `records`: snapshot → owned names and their encoded answers.
//! - `precomputed`: one encoded answer, and which of its records a reply carries.
//! - [`Zone`]: the names, `update`, `answer`. [`LiveZone`]: the zone shared with the apply path.
//! - [`DnsListener`]: the UDP and TCP loops.

#![forbid(unsafe_code)]

mod config;
mod listener;
mod live;
mod precomputed;
mod records;
mod stats;
mod wire;
mod zone;

pub use config::{ConfigError, LargeRrsets, ZoneConfig};
pub use listener::{DnsListener, ListenError};
pub use live::LiveZone;
pub use stats::QueryStats;
pub use wire::{QueryError, Rcode};
pub use zone::{Outcome, Transport, Zone};
