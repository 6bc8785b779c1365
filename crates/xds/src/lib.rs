//! Muster's xDS adapter (SPEC D5).
#![forbid(unsafe_code)]

pub use envoy_types::pb;
