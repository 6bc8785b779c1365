//! Integration tests of the registry state machine: one binary (CRATES.md tip 6).

mod drains;
mod lifecycle;
mod model;
mod properties;
mod reads;
mod scenarios;
mod support;
mod validation;
