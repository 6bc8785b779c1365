//! The lab's acceptance tests (SPEC X, "Tests that must exist and pass"): the reference
//! figures against their analytic expectations, determinism, the setups beyond the
//! reference, and the live lab at a small scale. One test binary, one concern per file.

mod beyond;
mod determinism;
mod live;
mod reference;
mod support;
