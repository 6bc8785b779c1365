//! A Consul request's query parameters.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::error::ConsulError;
use crate::token::query_pairs;

/// A request's query string, pairs in order: Consul's parameters repeat (`tag`) and come as
/// bare flags (`stale`, `passing`). Parameters a route does not know are ignored, as Consul
/// ignores them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    /// The parameters of a query string.
    pub(crate) fn of(query: Option<&str>) -> Params {
        Params(query_pairs(query))
    }

    /// The first value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Every value of `name`, in order.
    pub(crate) fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// A flag: absent is false, a bare `?name` true, else Go's `strconv.ParseBool` words.
    pub(crate) fn flag(&self, name: &str) -> Result<bool, ConsulError> {
        match self.get(name) {
            None => Ok(false),
            Some("" | "1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(other) => Err(ConsulError::bad_request(format!(
                "Invalid value for ?{name}: '{}' is not a boolean",
                other.escape_debug()
            ))),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ConsulError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Params, ConsulError> {
        Ok(Params::of(parts.uri.query()))
    }
}
