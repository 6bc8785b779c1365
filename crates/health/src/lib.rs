//! Health decisions (SPEC section 4), pure: no sockets, no clock, no randomness. The checker
//! that probes (SPEC H) is a thin shell around these.
//!
//! ```text
//!  CheckSpec (wire) ──validate──▶ Check { kind, signal, interval, timeout, jitter, rise, fall }
//!
//!  probe results ──▶ Hysteresis (rise/fall, startup hold, flap damping) ──▶ Transition?
//!                                                              │ only threshold crossings
//!                                                              ▼
//!                    Preservation (per service: removal rate, serving floor) ──▶ propose / hold
//! ```
//!
//! - [`check`] (from `muster-core`, where registrations carry them): what a registration asks
//!   to be checked, validated with stable codes.
//! - [`hysteresis`]: one check's state over time: only crossings of the rise/fall thresholds
//!   change the serving state; flapping is damped to `degraded`.
//! - [`probe`]: one TCP, HTTP or gRPC probe, bounded by its timeout (the I/O edge).
//! - [`target`]: which targets this node's checker may probe (its own listeners, loopback,
//!   link-local and metadata addresses are refused unless allowed; SPEC S6).
//! - [`preservation`]: a service-wide brake: when too many endpoints would leave at once, stop
//!   removing them and say so (H5).

#![forbid(unsafe_code)]

pub use muster_core::check;

pub mod checker;
pub mod hysteresis;
pub mod preservation;
pub mod probe;
pub mod target;
