//! The proxy's settings: listeners (address, service, port, protocol, balancer, retry
//! budget), the admin address, the drain grace, and where last-known-good sets live. Read
//! from a TOML file ([`ProxyConfig::from_toml`]) or built from `muster proxy`'s flags; either
//! way [`ProxyConfig::validate`] refuses what cannot work with a stable code.
//!
//! ```toml
//! admin = "127.0.0.1:15000"
//! drain_grace_ms = 30000
//! lkg_dir = "/var/lib/muster-proxy"
//! zone = "a"
//!
//! [[listener]]
//! listen = "127.0.0.1:15001"
//! service = "prod/api"          # NAMESPACE/SERVICE of the tenant, or TENANT/NAMESPACE/SERVICE
//! port = "http"                 # the endpoint's named port (default: the first)
//! protocol = "auto"             # tcp | http | auto
//! balancer = "p2c"              # p2c | weighted | hash | locality | round_robin
//! hash_header = "x-user"        # hash only: the header whose value picks the endpoint
//! retry_budget = 0.2            # retries add at most 20% of requests
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use hyper::header::HeaderName;
use muster_core::{Label, ServiceKey};
use serde::Deserialize;

use crate::budget::BudgetConfig;

/// How long a TCP stream to a draining endpoint (or through a stopping proxy) may run on.
pub const DEFAULT_DRAIN_GRACE: Duration = Duration::from_secs(30);
/// How long to wait for a connection to an endpoint: endpoints are on the local network, so
/// one that has not accepted in a second is treated as down and the next one is tried.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long an HTTP attempt may wait for the response head: a backend that accepted and
/// then went silent (a partition, a hung process) is a failure after this, not a request
/// in flight forever. Streaming bodies are not bounded, only the wait for the head.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `auto` waits for a client's first bytes before treating the connection as opaque
/// TCP (a server-first protocol sends nothing until the server greets it).
pub const DEFAULT_DETECT_TIMEOUT: Duration = Duration::from_millis(300);
/// Attempts per request or connection, the first included.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Listeners in one proxy: each is a socket, a resolver and a balancer.
pub const MAX_LISTENERS: usize = 256;

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListenerProtocol {
    /// Opaque TCP: each connection is forwarded to one endpoint.
    Tcp,
    /// HTTP/1.1 and HTTP/2 (h2c, so gRPC too): each request is balanced.
    Http,
    /// HTTP/2 by its preface, HTTP/1 by its request line, anything else as TCP.
    Auto,
}

impl ListenerProtocol {
    /// The name used in flags, files and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ListenerProtocol::Tcp => "tcp",
            ListenerProtocol::Http => "http",
            ListenerProtocol::Auto => "auto",
        }
    }
}

/// How a listener balances (SPEC C4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BalancerKind {
    /// Power of two choices by requests in flight.
    P2c,
    /// In proportion to the endpoints' weights.
    Weighted,
    /// Consistent hashing on a header's value (HTTP; connections without it spread at random).
    Hash,
    /// Same zone, then region, then failover tiers, with spillover.
    Locality,
    /// Each endpoint in turn.
    RoundRobin,
}

impl BalancerKind {
    /// The name used in flags, files and `/debug/endpoints`.
    pub fn as_str(self) -> &'static str {
        match self {
            BalancerKind::P2c => "p2c",
            BalancerKind::Weighted => "weighted",
            BalancerKind::Hash => "hash",
            BalancerKind::Locality => "locality",
            BalancerKind::RoundRobin => "round_robin",
        }
    }
}

/// One listener.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerConfig {
    /// Where callers connect.
    pub listen: SocketAddr,
    /// The service it forwards to.
    pub service: ServiceKey,
    /// The endpoints' named port to connect to (`None`: each endpoint's first port).
    pub port: Option<Label>,
    /// What it speaks.
    pub protocol: ListenerProtocol,
    /// How it balances.
    pub balancer: BalancerKind,
    /// The header hashed by [`BalancerKind::Hash`].
    pub hash_header: Option<HeaderName>,
    /// How much it may retry.
    pub budget: BudgetConfig,
    /// Attempts per request, the first included.
    pub max_attempts: u32,
}

/// The whole proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfig {
    /// The listeners.
    pub listeners: Vec<ListenerConfig>,
    /// The admin listener (`/metrics`, `/debug/endpoints`); `None`: off.
    pub admin: Option<SocketAddr>,
    /// How long streams to a draining endpoint, or through a stopping proxy, may run on.
    pub drain_grace: Duration,
    /// The bound on connecting to an endpoint.
    pub connect_timeout: Duration,
    /// The bound on an HTTP attempt's wait for the response head.
    pub response_timeout: Duration,
    /// How long `auto` waits for a client's first bytes.
    pub detect_timeout: Duration,
    /// Where each service's last-known-good set is kept (`None`: not kept).
    pub lkg_dir: Option<PathBuf>,
    /// The caller's region, for the locality balancer.
    pub region: Option<Label>,
    /// The caller's zone, for the locality balancer.
    pub zone: Option<Label>,
    /// Follow each service's failover decision in a federated region (SPEC G1): while it
    /// spills, balance over the admitted region's endpoints too, in the spilled share.
    pub failover: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listeners: Vec::new(),
            admin: None,
            drain_grace: DEFAULT_DRAIN_GRACE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            detect_timeout: DEFAULT_DETECT_TIMEOUT,
            lkg_dir: None,
            region: None,
            zone: None,
            failover: false,
        }
    }
}

/// A setting that cannot work, with a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ConfigError {
    /// `invalid_config`, `no_listener`, `duplicate_listener`, `invalid_service`, ...
    pub code: &'static str,
    /// What is wrong, naming the setting.
    pub message: String,
}

fn invalid(code: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        code,
        message: message.into(),
    }
}

/// `prod/api` (in `tenant`) or `acme/prod/api`.
pub fn parse_service(tenant: &str, text: &str) -> Result<ServiceKey, ConfigError> {
    let parts: Vec<&str> = text.split('/').collect();
    let key = match parts.as_slice() {
        [namespace, service] => ServiceKey::new(tenant, namespace, service),
        [tenant, namespace, service] => ServiceKey::new(tenant, namespace, service),
        _ => {
            return Err(invalid(
                "invalid_service",
                format!("'{text}': write NAMESPACE/SERVICE or TENANT/NAMESPACE/SERVICE"),
            ));
        }
    };
    key.map_err(|err| invalid("invalid_service", format!("'{text}': {err}")))
}

/// A label setting (`port`, `zone`, `region`).
pub fn parse_label(field: &str, text: &str) -> Result<Label, ConfigError> {
    Label::new(field, text).map_err(|err| invalid("invalid_config", format!("{field} '{text}': {err}")))
}

/// A header name for `hash_header`.
pub fn parse_header(text: &str) -> Result<HeaderName, ConfigError> {
    HeaderName::from_bytes(text.as_bytes())
        .map_err(|_| invalid("invalid_config", format!("hash_header '{text}' is not a header name")))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    tenant: Option<String>,
    admin: Option<SocketAddr>,
    drain_grace_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
    response_timeout_ms: Option<u64>,
    detect_timeout_ms: Option<u64>,
    lkg_dir: Option<PathBuf>,
    region: Option<String>,
    zone: Option<String>,
    #[serde(default)]
    failover: bool,
    #[serde(default)]
    listener: Vec<FileListener>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileListener {
    listen: SocketAddr,
    service: String,
    port: Option<String>,
    #[serde(default = "default_protocol")]
    protocol: ListenerProtocol,
    #[serde(default = "default_balancer")]
    balancer: BalancerKind,
    hash_header: Option<String>,
    retry_budget: Option<f64>,
    min_retries_per_second: Option<u32>,
    max_attempts: Option<u32>,
}

fn default_protocol() -> ListenerProtocol {
    ListenerProtocol::Auto
}

fn default_balancer() -> BalancerKind {
    BalancerKind::P2c
}

impl ListenerConfig {
    /// A listener with the defaults: `auto`, P2C, a 20% budget, three attempts.
    pub fn new(listen: SocketAddr, service: ServiceKey) -> ListenerConfig {
        ListenerConfig {
            listen,
            service,
            port: None,
            protocol: ListenerProtocol::Auto,
            balancer: BalancerKind::P2c,
            hash_header: None,
            budget: BudgetConfig::default(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

impl ProxyConfig {
    /// Reads a TOML file's text; services without a tenant are `default_tenant`'s (or the
    /// file's `tenant`).
    pub fn from_toml(text: &str, default_tenant: &str) -> Result<ProxyConfig, ConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|err| invalid("invalid_config", err.to_string()))?;
        let tenant = file.tenant.as_deref().unwrap_or(default_tenant);
        let defaults = ProxyConfig::default();
        let mut config = ProxyConfig {
            listeners: Vec::new(),
            admin: file.admin,
            drain_grace: file.drain_grace_ms.map_or(defaults.drain_grace, Duration::from_millis),
            connect_timeout: file
                .connect_timeout_ms
                .map_or(defaults.connect_timeout, Duration::from_millis),
            response_timeout: file
                .response_timeout_ms
                .map_or(defaults.response_timeout, Duration::from_millis),
            detect_timeout: file
                .detect_timeout_ms
                .map_or(defaults.detect_timeout, Duration::from_millis),
            lkg_dir: file.lkg_dir,
            region: file.region.map(|r| parse_label("region", &r)).transpose()?,
            zone: file.zone.map(|z| parse_label("zone", &z)).transpose()?,
            failover: file.failover,
        };
        for listener in file.listener {
            let mut parsed = ListenerConfig::new(listener.listen, parse_service(tenant, &listener.service)?);
            parsed.port = listener.port.map(|p| parse_label("port", &p)).transpose()?;
            parsed.protocol = listener.protocol;
            parsed.balancer = listener.balancer;
            parsed.hash_header = listener.hash_header.map(|h| parse_header(&h)).transpose()?;
            if let Some(ratio) = listener.retry_budget {
                parsed.budget.ratio = ratio;
            }
            if let Some(floor) = listener.min_retries_per_second {
                parsed.budget.min_per_second = floor;
            }
            if let Some(attempts) = listener.max_attempts {
                parsed.max_attempts = attempts;
            }
            config.listeners.push(parsed);
        }
        Ok(config)
    }

    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.listeners.is_empty() {
            return Err(invalid(
                "no_listener",
                "no listener: give --listen and --service, or a --config file with [[listener]]",
            ));
        }
        if self.listeners.len() > MAX_LISTENERS {
            return Err(invalid(
                "invalid_config",
                format!("{} listeners, at most {MAX_LISTENERS}", self.listeners.len()),
            ));
        }
        for (i, listener) in self.listeners.iter().enumerate() {
            let clash = self.listeners[..i]
                .iter()
                .any(|other| other.listen == listener.listen && listener.listen.port() != 0);
            if clash || self.admin.is_some_and(|a| a == listener.listen && a.port() != 0) {
                return Err(invalid(
                    "duplicate_listener",
                    format!("{} is used twice", listener.listen),
                ));
            }
            if !(0.0..=10.0).contains(&listener.budget.ratio) || listener.budget.ratio.is_nan() {
                return Err(invalid(
                    "invalid_config",
                    format!(
                        "retry budget {} for {}: a fraction of requests from 0 to 10",
                        listener.budget.ratio, listener.listen
                    ),
                ));
            }
            if listener.max_attempts == 0 || listener.max_attempts > 10 {
                return Err(invalid(
                    "invalid_config",
                    format!(
                        "max_attempts {} for {}: 1 to 10",
                        listener.max_attempts, listener.listen
                    ),
                ));
            }
            if listener.balancer == BalancerKind::Hash && listener.hash_header.is_none() {
                return Err(invalid(
                    "invalid_config",
                    format!("the hash balancer of {} needs a hash_header", listener.listen),
                ));
            }
            if listener.hash_header.is_some() && listener.balancer != BalancerKind::Hash {
                return Err(invalid(
                    "invalid_config",
                    format!("hash_header on {} without the hash balancer", listener.listen),
                ));
            }
            if listener.hash_header.is_some() && listener.protocol == ListenerProtocol::Tcp {
                return Err(invalid(
                    "invalid_config",
                    format!(
                        "hash_header on the tcp listener {}: TCP has no headers",
                        listener.listen
                    ),
                ));
            }
        }
        if self.drain_grace.is_zero()
            || self.connect_timeout.is_zero()
            || self.detect_timeout.is_zero()
            || self.response_timeout.is_zero()
        {
            return Err(invalid(
                "invalid_config",
                "drain grace, connect, response and detect timeouts must be above zero",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_two_listeners_reads_with_its_defaults() {
        let config = ProxyConfig::from_toml(
            r#"
            admin = "127.0.0.1:15000"
            drain_grace_ms = 5000
            zone = "a"
            [[listener]]
            listen = "127.0.0.1:15001"
            service = "prod/api"
            port = "http"
            [[listener]]
            listen = "127.0.0.1:15002"
            service = "acme/prod/db"
            protocol = "tcp"
            balancer = "weighted"
            retry_budget = 0.1
            "#,
            "default",
        )
        .expect("reads");
        config.validate().expect("valid");
        assert_eq!(config.drain_grace, Duration::from_secs(5));
        assert_eq!(config.zone.as_ref().map(Label::as_str), Some("a"));
        let [api, db] = config.listeners.as_slice() else {
            panic!("two listeners")
        };
        assert_eq!(api.service.to_string(), "default/prod/api");
        assert_eq!(api.protocol, ListenerProtocol::Auto);
        assert_eq!(api.balancer, BalancerKind::P2c);
        assert_eq!(api.port.as_ref().map(Label::as_str), Some("http"));
        assert_eq!(db.service.to_string(), "acme/prod/db");
        assert_eq!(db.protocol, ListenerProtocol::Tcp);
        assert_eq!(db.budget.ratio, 0.1);
    }

    #[test]
    fn settings_that_cannot_work_are_refused_with_a_code() {
        let service = parse_service("default", "prod/api").expect("valid");
        let listener = ListenerConfig::new("127.0.0.1:15001".parse().expect("addr"), service);
        let with = |change: &dyn Fn(&mut ProxyConfig)| {
            let mut config = ProxyConfig {
                listeners: vec![listener.clone()],
                ..ProxyConfig::default()
            };
            change(&mut config);
            config.validate().map_err(|err| err.code)
        };
        assert_eq!(with(&|_| {}), Ok(()));
        assert_eq!(with(&|c| c.listeners.clear()), Err("no_listener"));
        assert_eq!(
            with(&|c| c.listeners.push(c.listeners[0].clone())),
            Err("duplicate_listener")
        );
        assert_eq!(with(&|c| c.listeners[0].budget.ratio = -1.0), Err("invalid_config"));
        assert_eq!(with(&|c| c.listeners[0].max_attempts = 0), Err("invalid_config"));
        assert_eq!(
            with(&|c| c.listeners[0].balancer = BalancerKind::Hash),
            Err("invalid_config")
        );
        assert_eq!(
            with(&|c| c.listeners[0].hash_header = Some(HeaderName::from_static("x-user"))),
            Err("invalid_config"),
            "a hash header without the hash balancer"
        );
        assert_eq!(
            with(&|c| {
                c.listeners[0].balancer = BalancerKind::Hash;
                c.listeners[0].protocol = ListenerProtocol::Tcp;
                c.listeners[0].hash_header = Some(HeaderName::from_static("x-user"));
            }),
            Err("invalid_config")
        );
        assert_eq!(with(&|c| c.drain_grace = Duration::ZERO), Err("invalid_config"));
    }

    #[test]
    fn bad_files_and_services_get_codes() {
        for (text, code) in [
            (
                "[[listener]]\nlisten = \"nowhere\"\nservice = \"prod/api\"",
                "invalid_config",
            ),
            (
                "[[listener]]\nlisten = \"127.0.0.1:1\"\nservice = \"api\"",
                "invalid_service",
            ),
            (
                "[[listener]]\nlisten = \"127.0.0.1:1\"\nservice = \"Prod/api\"",
                "invalid_service",
            ),
            (
                "[[listener]]\nlisten = \"127.0.0.1:1\"\nservice = \"prod/api\"\nprotocol = \"udp\"",
                "invalid_config",
            ),
            ("bogus = 1", "invalid_config"),
        ] {
            let err = ProxyConfig::from_toml(text, "default").expect_err(text);
            assert_eq!(err.code, code, "{text}: {err}");
        }
    }
}
