//! The `[consul]` section: where the Consul-compatible listener binds and which part of the
//! registry it shows (SPEC E1).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use muster_core::Label;
use serde::{Deserialize, Serialize};

/// The Consul-compatible HTTP API (`[consul]`): its own listener, one tenant and namespace of
/// the registry shown as one Consul datacenter with one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsulConfig {
    /// Whether the Consul-compatible listener runs: on by default, so Consul clients find
    /// Muster where they look for a local agent. `muster serve --consul off` turns it off
    /// (say, next to a real Consul agent that holds port 8500).
    pub enabled: bool,
    /// The listener's address: `127.0.0.1:8500`, a local Consul agent's. Loopback only unless
    /// authentication is on (`[auth] enabled = true`), like `http` and `dns` (SPEC S1). It
    /// speaks TLS when the HTTP API does (`[tls]`, client certificates included) and shares
    /// the HTTP API's connection budget and `[limits.http]`.
    pub addr: SocketAddr,
    /// The tenant Consul requests read and write when they name no `partition` (a
    /// `?partition=` names another tenant).
    pub tenant: Label,
    /// The namespace Consul requests read and write when they name no `ns` (a `?ns=` names
    /// another namespace of the tenant).
    pub namespace: Label,
    /// The datacenter name Consul clients see (`Config.Datacenter` of `/v1/agent/self`, the
    /// `Datacenter` of catalog entries): `dc1`, Consul's default. A `?dc=` naming another
    /// datacenter is accepted and answered from this one (there is only one).
    pub datacenter: String,
    /// The node name Consul clients see: every service is on this one node (a Consul agent's
    /// view of its host). Unset: `muster-<node_id>`, so each member of a cluster shows a
    /// name of its own and a restart keeps it (a host name could change under a container).
    pub node: Option<String>,
}

impl Default for ConsulConfig {
    fn default() -> Self {
        ConsulConfig {
            enabled: true,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 8500)),
            tenant: Label::new("tenant", "default").expect("a valid label"),
            namespace: Label::new("namespace", "default").expect("a valid label"),
            datacenter: "dc1".to_owned(),
            node: None,
        }
    }
}

/// The longest datacenter or node name: Consul's node names are DNS labels (63), and a
/// datacenter name is one label of its DNS interface too.
const MAX_NAME_BYTES: usize = 63;

impl ConsulConfig {
    /// Refuses an unusable setting; `auth_enabled` allows non-loopback addresses. An error
    /// names the setting.
    pub fn check(&self, auth_enabled: bool) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if !self.addr.ip().is_loopback() && !auth_enabled {
            return Err(format!(
                "consul.addr: {} is not a loopback address; without authentication ([auth] enabled = true) \
                 the Consul-compatible API binds loopback only (SPEC S1), e.g. 127.0.0.1:8500",
                self.addr
            ));
        }
        check_name("consul.datacenter", &self.datacenter)?;
        if let Some(node) = &self.node {
            check_name("consul.node", node)?;
        }
        Ok(())
    }

    /// The node name: `node`, or `muster-<node_id>`.
    pub fn node_name(&self, node_id: u64) -> String {
        self.node.clone().unwrap_or_else(|| format!("muster-{node_id}"))
    }

    /// The node's address as Consul clients see it: the listener's IP, or loopback when it
    /// binds every interface (an unspecified address names no host a client could reach).
    pub fn node_address(&self, bound: SocketAddr) -> IpAddr {
        match bound.ip() {
            ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            ip => ip,
        }
    }
}

/// A name Consul clients put in URLs and DNS: 1 to 63 bytes of letters, digits, `-` and `_`.
fn check_name(setting: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{setting}: must be 1 to {MAX_NAME_BYTES} bytes, got {}",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
    {
        return Err(format!(
            "{setting}: '{}' may hold only letters, digits, '-' and '_', found {bad:?}",
            name.escape_debug()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_a_local_consul_agent_s() {
        let config = ConsulConfig::default();
        assert!(config.enabled);
        assert_eq!(config.addr, "127.0.0.1:8500".parse().unwrap());
        assert_eq!(config.node_name(3), "muster-3");
        assert_eq!(config.check(false), Ok(()));
    }

    #[test]
    fn a_public_address_needs_authentication_unless_the_listener_is_off() {
        let public = ConsulConfig {
            addr: "0.0.0.0:8500".parse().unwrap(),
            ..ConsulConfig::default()
        };
        assert!(public.check(false).unwrap_err().starts_with("consul.addr:"));
        assert_eq!(public.check(true), Ok(()));
        assert_eq!(
            public.node_address("0.0.0.0:8500".parse().unwrap()),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        let off = ConsulConfig {
            enabled: false,
            ..public
        };
        assert_eq!(off.check(false), Ok(()));
    }

    #[test]
    fn datacenter_and_node_names_are_checked() {
        for (config, setting) in [
            (
                ConsulConfig {
                    datacenter: String::new(),
                    ..ConsulConfig::default()
                },
                "consul.datacenter:",
            ),
            (
                ConsulConfig {
                    node: Some("a b".into()),
                    ..ConsulConfig::default()
                },
                "consul.node:",
            ),
        ] {
            assert!(config.check(false).unwrap_err().starts_with(setting));
        }
        let named = ConsulConfig {
            node: Some("edge_1".into()),
            ..ConsulConfig::default()
        };
        assert_eq!(named.check(false), Ok(()));
        assert_eq!(named.node_name(1), "edge_1");
    }
}
