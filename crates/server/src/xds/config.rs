//! The `[xds]` section: the xDS control plane's listener (SPEC D5).

use std::net::SocketAddr;

use muster_core::Label;
use serde::{Deserialize, Serialize};

/// The xDS control plane's settings. Off unless `addr` is set (`serve --xds ADDR`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct XdsConfig {
    /// Where the gRPC listener (ADS, plain HTTP/2, or TLS under `[tls]`) binds; unset: no xDS.
    /// A non-loopback address needs `[auth] enabled = true`.
    pub addr: Option<SocketAddr>,
    /// The tenant of a client whose node names none (`node.metadata.tenant`) and whose token
    /// is not confined to one.
    pub tenant: Label,
    /// The xDS resource names one principal may subscribe to in one tenant, all its streams
    /// together (SPEC W4, S6); more: the stream ends with `RESOURCE_EXHAUSTED`. Each name is
    /// a watched service and part of every refresh, about 500 bytes live (its stream's
    /// subscription and watched set, its hub entry) and as much again the allocator keeps
    /// after a burst: 10,000 is one full stream (`MAX_NAMES` per type), 100 Envoys
    /// following 100 services or 2,500 gRPC clients following one, and keeps one
    /// principal's share of the node to about 10 MiB. A fleet that shares one token across
    /// more proxies raises it, or gives each group of proxies a token of its own.
    pub max_names_per_principal: usize,
}

impl Default for XdsConfig {
    fn default() -> Self {
        XdsConfig {
            addr: None,
            tenant: Label::new("tenant", "default").expect("a valid label"),
            max_names_per_principal: 10_000,
        }
    }
}

impl XdsConfig {
    /// Refuses a configuration the server cannot serve safely.
    pub(crate) fn check(&self, auth_enabled: bool) -> Result<(), String> {
        let Some(addr) = self.addr else {
            return Ok(());
        };
        if !cfg!(feature = "xds") {
            return Err(format!(
                "xds.addr: {addr} is set, but this muster was built without the `xds` feature \
                 (build with default features, or unset it)"
            ));
        }
        if !addr.ip().is_loopback() && !auth_enabled {
            return Err(format!(
                "xds.addr: {addr} is not a loopback address; without authentication ([auth] enabled = true) \
                 the xDS control plane binds loopback only (SPEC S1), e.g. 127.0.0.1:18000"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_loopback_only_without_auth() {
        let config = XdsConfig::default();
        assert_eq!(config.addr, None);
        assert_eq!(config.check(false), Ok(()));
        let open = XdsConfig {
            addr: Some("0.0.0.0:18000".parse().unwrap()),
            ..XdsConfig::default()
        };
        let refused = open.check(false).unwrap_err();
        assert!(refused.contains("loopback"), "{refused}");
        if cfg!(feature = "xds") {
            assert_eq!(open.check(true), Ok(()));
        }
    }
}
