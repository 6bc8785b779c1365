//! The resources a gRPC target `xds:///<service>.<namespace>` needs (SPEC D5), built from a
//! name and, for the assignment, the service's snapshot:
//!
//! ```text
//!  Listener api.prod ── api_listener: HttpConnectionManager ── rds (ADS) ─▶ RouteConfiguration api.prod
//!        http_filters: [router]                                               vhost domains [api.prod]
//!                                                                             route "" ─▶ cluster api.prod
//!  Cluster api.prod ── type EDS, eds_config ADS, service_name api.prod ─▶ ClusterLoadAssignment api.prod
//! ```
//!
//! This is what gRPC's xDS client accepts (gRFC A27): an `api_listener` whose HTTP filters
//! end with the router, a virtual host matching the target's authority, a cluster of type EDS
//! over ADS with round robin. Each resource is packed once into an [`Any`] and shared by every
//! stream that is sent it.

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use envoy_types::pb::envoy::config::core::v3::{AggregatedConfigSource, ApiVersion, ConfigSource, config_source};
use envoy_types::pb::envoy::config::listener::v3::{ApiListener, Listener};
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost, route, route_action, route_match,
};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use envoy_types::pb::google::protobuf::{Any, Duration};
use envoy_types::util::pack_any;
use muster_core::Revision;

use crate::kind::Kind;

/// The router filter's name, the last (and only) HTTP filter of every listener.
pub const ROUTER_FILTER: &str = "envoy.filters.http.router";

/// One encoded resource at one revision, shared by every stream it is sent to.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    /// Its kind.
    pub kind: Kind,
    /// Its name.
    pub name: String,
    /// The Muster revision it was built at: its xDS version.
    pub revision: Revision,
    /// The packed message.
    pub any: Any,
}

fn ads() -> ConfigSource {
    ConfigSource {
        resource_api_version: ApiVersion::V3 as i32,
        config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        ..ConfigSource::default()
    }
}

/// The listener `name`: an API listener whose connection manager loads route configuration
/// `name` over ADS.
pub fn listener(name: &str) -> Listener {
    let manager = HttpConnectionManager {
        stat_prefix: name.to_owned(),
        route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: name.to_owned(),
        })),
        http_filters: vec![HttpFilter {
            name: ROUTER_FILTER.to_owned(),
            config_type: Some(http_filter::ConfigType::TypedConfig(pack_any(Router::default()))),
            ..HttpFilter::default()
        }],
        ..HttpConnectionManager::default()
    };
    Listener {
        name: name.to_owned(),
        api_listener: Some(ApiListener {
            api_listener: Some(pack_any(manager)),
        }),
        ..Listener::default()
    }
}

/// The route configuration `name`: one virtual host for the authority `name`, every path to
/// cluster `name`.
pub fn route(name: &str) -> RouteConfiguration {
    let to_cluster = Route {
        r#match: Some(RouteMatch {
            path_specifier: Some(route_match::PathSpecifier::Prefix(String::new())),
            ..RouteMatch::default()
        }),
        action: Some(route::Action::Route(RouteAction {
            cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(name.to_owned())),
            ..RouteAction::default()
        })),
        ..Route::default()
    };
    RouteConfiguration {
        name: name.to_owned(),
        virtual_hosts: vec![VirtualHost {
            name: name.to_owned(),
            domains: vec![name.to_owned()],
            routes: vec![to_cluster],
            ..VirtualHost::default()
        }],
        ..RouteConfiguration::default()
    }
}

/// The cluster `name`: endpoints from assignment `name` over ADS, round robin.
pub fn cluster(name: &str) -> Cluster {
    Cluster {
        name: name.to_owned(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(cluster::EdsClusterConfig {
            eds_config: Some(ads()),
            service_name: name.to_owned(),
        }),
        lb_policy: cluster::LbPolicy::RoundRobin as i32,
        connect_timeout: Some(Duration { seconds: 5, nanos: 0 }),
        ..Cluster::default()
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
    use muster_core::ServiceKey;
    use prost::Message;

    use super::*;
    use crate::assignment::Cohort;

    fn static_resource(kind: Kind, name: &str, revision: Revision) -> Versioned {
        let empty = muster_core::ServiceSnapshot::empty(ServiceKey::new("default", "prod", "api").unwrap());
        crate::build(kind, name, revision, &empty, &Cohort::default())
    }

    #[test]
    fn the_listener_loads_its_route_over_ads_and_ends_its_filters_with_the_router() {
        let packed = static_resource(Kind::Listener, "api.prod", Revision(3));
        assert_eq!(packed.any.type_url, Kind::Listener.type_url());
        let listener = Listener::decode(packed.any.value.as_slice()).unwrap();
        assert_eq!(listener.name, "api.prod");
        let manager = listener.api_listener.unwrap().api_listener.unwrap();
        assert_eq!(
            manager.type_url,
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
        );
        let manager = HttpConnectionManager::decode(manager.value.as_slice()).unwrap();
        let Some(http_connection_manager::RouteSpecifier::Rds(rds)) = manager.route_specifier else {
            panic!("not RDS: {:?}", manager.route_specifier);
        };
        assert_eq!(rds.route_config_name, "api.prod");
        assert!(matches!(
            rds.config_source.unwrap().config_source_specifier,
            Some(ConfigSourceSpecifier::Ads(_))
        ));
        let last = manager.http_filters.last().unwrap();
        assert_eq!(last.name, ROUTER_FILTER);
        let Some(http_filter::ConfigType::TypedConfig(router)) = &last.config_type else {
            panic!("no typed config");
        };
        assert_eq!(
            router.type_url,
            "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        );
    }

    #[test]
    fn the_route_matches_the_authority_and_sends_everything_to_the_cluster() {
        let route = RouteConfiguration::decode(
            static_resource(Kind::Route, "api.prod", Revision(3))
                .any
                .value
                .as_slice(),
        )
        .unwrap();
        let host = &route.virtual_hosts[0];
        assert_eq!(host.domains, ["api.prod"]);
        let Some(route::Action::Route(action)) = &host.routes[0].action else {
            panic!("not a route action");
        };
        assert_eq!(
            action.cluster_specifier,
            Some(route_action::ClusterSpecifier::Cluster("api.prod".into()))
        );
    }

    #[test]
    fn the_cluster_is_eds_over_ads_with_round_robin() {
        let cluster = Cluster::decode(
            static_resource(Kind::Cluster, "api.prod", Revision(3))
                .any
                .value
                .as_slice(),
        )
        .unwrap();
        assert_eq!(
            cluster.cluster_discovery_type,
            Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Eds as i32))
        );
        let eds = cluster.eds_cluster_config.unwrap();
        assert_eq!(eds.service_name, "api.prod");
        assert!(matches!(
            eds.eds_config.unwrap().config_source_specifier,
            Some(ConfigSourceSpecifier::Ads(_))
        ));
        assert_eq!(cluster.lb_policy, cluster::LbPolicy::RoundRobin as i32);
    }
}
