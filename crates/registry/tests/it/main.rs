//! Integration tests of the registry state machine: one binary (CRATES.md tip 6).

mod drains;
mod fencing;
mod formats;
mod incarnation;
mod lifecycle;
mod model;
mod policy;
mod properties;
mod quotas;
mod reads;
mod scenarios;
mod support;
mod validation;
