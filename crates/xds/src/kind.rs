//! The four resource types of SPEC D5 and their type URLs.

use std::fmt;

/// A resource type the server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    Route,
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    Endpoint,
}

impl Kind {
    /// Every kind, in the order a gRPC client asks for them.
    pub const ALL: [Kind; 4] = [Kind::Listener, Kind::Route, Kind::Cluster, Kind::Endpoint];

    /// The type URL on the wire.
    pub fn type_url(self) -> &'static str {
        match self {
            Kind::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            Kind::Route => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            Kind::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            Kind::Endpoint => "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
        }
    }

    /// The kind of a type URL; `None` for a type this server does not serve.
    pub fn from_type_url(type_url: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.type_url() == type_url)
    }

    /// The short name `GET /v1/xds/clients` and the metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Listener => "listener",
            Kind::Route => "route",
            Kind::Cluster => "cluster",
            Kind::Endpoint => "endpoint",
        }
    }

    /// Whether a response of this kind must hold every subscribed resource ("full state", as
    /// LDS and CDS are in the xDS protocol): leaving one out says it does not exist.
    pub fn is_full_state(self) -> bool {
        matches!(self, Kind::Listener | Kind::Cluster)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_urls_round_trip_and_unknown_types_are_none() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_type_url(kind.type_url()), Some(kind));
        }
        assert_eq!(
            Kind::from_type_url("type.googleapis.com/envoy.config.core.v3.Secret"),
            None
        );
    }
}
