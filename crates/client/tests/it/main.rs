//! Integration tests of the client library's pure parts against the real registry.

mod view;
