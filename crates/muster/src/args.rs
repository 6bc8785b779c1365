//! The parsers clap cannot do alone, strict so that nothing malformed is ever sent.
//!
//! `NAMESPACE/SERVICE` becomes a typed [`ServiceKey`] with the `--tenant`, each part checked
//! by `muster-core`'s own DNS-label rules, so a name the server would refuse is refused here
//! with the same code (`invalid_name`) before any request.

use std::net::SocketAddr;

use muster_core::check::CheckStatus;
use muster_core::{Actor, InstanceId, Label, LeaseId, NamespaceKey, Protocol, Rejection, ServiceKey, ServingState};

/// Parses `NAMESPACE/SERVICE` within `tenant`.
pub fn parse_service_key(tenant: &str, text: &str) -> Result<ServiceKey, Rejection> {
    let mut parts = text.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(namespace), Some(service), None) => ServiceKey::new(tenant, namespace, service),
        _ => Err(Rejection::InvalidName {
            field: "NAMESPACE/SERVICE".into(),
            reason: format!(
                "expected two names joined by '/', e.g. prod/api, got '{}'",
                text.escape_debug()
            ),
        }),
    }
}

/// Parses `NAMESPACE` within `tenant`.
pub fn parse_namespace_key(tenant: &str, text: &str) -> Result<NamespaceKey, Rejection> {
    NamespaceKey::new(tenant, text)
}

/// Parses an instance id.
pub fn parse_instance(text: &str) -> Result<InstanceId, Rejection> {
    InstanceId::new(text)
}

/// Parses a tenant name (for the lease commands, which have no service key).
pub fn parse_tenant(text: &str) -> Result<Label, Rejection> {
    Label::new("tenant", text)
}

/// Parses `IP:PORT`: `10.0.0.1:8080` or `[2001:db8::1]:8080`. Port 0 is refused (an endpoint
/// that listens nowhere). Canonical form and permitted networks are the server's to check.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("'{}' is not IP:PORT (write IPv6 as [::1]:8080)", text.escape_debug()))?;
    if addr.port() == 0 {
        return Err(format!("'{text}': the port must be 1 to 65535"));
    }
    Ok(addr)
}

/// Parses `--peers 1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103`: ids and `host:port`
/// addresses, each id once.
pub fn parse_peers(text: &str) -> Result<std::collections::BTreeMap<u64, String>, String> {
    let mut peers = std::collections::BTreeMap::new();
    for part in text.split(',') {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| format!("'{part}' is not ID=HOST:PORT"))?;
        let id: u64 = id.parse().map_err(|_| format!("'{id}' is not a node id"))?;
        if muster_core::address::host_port(addr).is_none() {
            return Err(format!("'{addr}' is not HOST:PORT"));
        }
        if peers.insert(id, addr.to_owned()).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    Ok(peers)
}

/// Parses `--incarnation`: a number from 1 (U1). 0 is refused before anything is sent: the
/// first run of an instance registers with 1, and every restart with a higher one, so an
/// incarnation 0 could only ever be older than every real one.
pub fn parse_incarnation(text: &str) -> Result<u64, IncarnationArgError> {
    match text.parse::<u64>() {
        Ok(0) => Err(IncarnationArgError::Zero),
        Ok(incarnation) => Ok(incarnation),
        Err(_) => Err(IncarnationArgError::NotANumber(text.escape_debug().to_string())),
    }
}

/// Why `--incarnation` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncarnationArgError {
    /// 0: older than every real incarnation.
    #[error("incarnations start at 1 (a restart registers with a higher one)")]
    Zero,
    /// Not a number.
    #[error("'{0}' is not an incarnation (a number from 1)")]
    NotANumber(String),
}

/// Where `muster serve` runs an optional listener (`--dns`, `--consul`, `--xds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// `off`: not at all.
    Off,
    /// `ADDR`: on this address.
    At(SocketAddr),
}

/// Parses `--dns`, `--consul` or `--xds`: `off`, or an address (`127.0.0.1:8500`,
/// `[::1]:8500`).
pub fn parse_listen(text: &str) -> Result<Listen, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(Listen::Off);
    }
    text.parse()
        .map(Listen::At)
        .map_err(|_| format!("'{}' is neither IP:PORT nor off", text.escape_debug()))
}

/// Parses a label `KEY=VALUE`. The key must not be empty; limits are the server's to check.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("'{}' is not KEY=VALUE", text.escape_debug())),
    }
}

/// Parses a lease id.
pub fn parse_lease_id(text: &str) -> Result<LeaseId, String> {
    text.parse()
        .map(LeaseId)
        .map_err(|_| format!("'{}' is not a lease id (a number)", text.escape_debug()))
}

/// A serving state as typed on the command line (SPEC M3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StateArg {
    /// Initialising; no normal traffic yet.
    Starting,
    /// Accepting new work.
    Ready,
    /// Accepting work in a reduced mode.
    Degraded,
    /// Planned shutdown: no new work.
    Draining,
    /// Refusing new work.
    #[value(name = "not_serving", alias = "not-serving")]
    NotServing,
    /// Nobody can tell.
    Unknown,
}

impl From<StateArg> for ServingState {
    fn from(state: StateArg) -> ServingState {
        match state {
            StateArg::Starting => ServingState::Starting,
            StateArg::Ready => ServingState::Ready,
            StateArg::Degraded => ServingState::Degraded,
            StateArg::Draining => ServingState::Draining,
            StateArg::NotServing => ServingState::NotServing,
            StateArg::Unknown => ServingState::Unknown,
        }
    }
}

/// A TTL check's report as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckStatusArg {
    /// Healthy: the endpoint may take traffic.
    Pass,
    /// Serving, degraded: only callers that accept degraded endpoints use it.
    Warn,
    /// Unhealthy: out of routing.
    Fail,
}

impl From<CheckStatusArg> for CheckStatus {
    fn from(status: CheckStatusArg) -> CheckStatus {
        match status {
            CheckStatusArg::Pass => CheckStatus::Pass,
            CheckStatusArg::Warn => CheckStatus::Warn,
            CheckStatusArg::Fail => CheckStatus::Fail,
        }
    }
}

/// A port protocol as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    /// Plain TCP.
    Tcp,
    /// Plain UDP.
    Udp,
    /// HTTP/1.1.
    Http,
    /// HTTP/2.
    Http2,
    /// gRPC.
    Grpc,
}

impl From<ProtocolArg> for Protocol {
    fn from(protocol: ProtocolArg) -> Protocol {
        match protocol {
            ProtocolArg::Tcp => Protocol::Tcp,
            ProtocolArg::Udp => Protocol::Udp,
            ProtocolArg::Http => Protocol::Http,
            ProtocolArg::Http2 => Protocol::Http2,
            ProtocolArg::Grpc => Protocol::Grpc,
        }
    }
}

/// The protocol a port speaks when `--protocol` is not given: the one its conventional name
/// says (`http`, `http2`, `grpc`, `udp`), else TCP.
pub fn protocol_for_port_name(name: &str) -> Protocol {
    match name {
        "http" => Protocol::Http,
        "http2" | "h2" | "h2c" => Protocol::Http2,
        "grpc" => Protocol::Grpc,
        "udp" | "dns" => Protocol::Udp,
        _ => Protocol::Tcp,
    }
}

/// Whose authority a write speaks with (SPEC L5), sent as `X-Muster-Actor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ActorArg {
    /// The orchestrator or operator: owns the lifecycle, may lift a drain.
    Owner,
    /// The application: owns readiness within the lifecycle.
    App,
    /// A health checker, with the application's authority.
    Checker,
}

impl From<ActorArg> for Actor {
    fn from(actor: ActorArg) -> Actor {
        match actor {
            ActorArg::Owner => Actor::Owner,
            ActorArg::App => Actor::App,
            ActorArg::Checker => Actor::Checker,
        }
    }
}

/// `--cacert`, `--client-cert`, `--client-key`: TLS to an `https://` server, and the client certificate a
/// server with mutual TLS asks for.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// CA certificate(s) (PEM) to verify an https:// server with.
    #[arg(long, global = true, env = "MUSTER_CACERT", value_name = "PATH")]
    pub cacert: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for a server that requires mutual TLS; needs --client-key.
    #[arg(
        long = "client-cert",
        global = true,
        env = "MUSTER_CERT",
        value_name = "PATH",
        requires = "client_key"
    )]
    pub client_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM); needs --client-cert.
    #[arg(
        long = "client-key",
        global = true,
        env = "MUSTER_KEY",
        value_name = "PATH",
        requires = "client_cert"
    )]
    pub client_key: Option<std::path::PathBuf>,
}

impl TlsArgs {
    /// The client's TLS settings; `None` without `--cacert`.
    pub fn client_tls(&self) -> Result<Option<muster_client::ClientTls>, muster_client::ClientError> {
        match &self.cacert {
            None if self.client_cert.is_some() => Err(muster_client::ClientError::InvalidTls {
                reason: "--client-cert needs --cacert (the CA to verify the server with)".into(),
                source: None,
            }),
            None => Ok(None),
            Some(ca) => {
                muster_client::ClientTls::from_files(ca, self.client_cert.as_deref(), self.client_key.as_deref())
                    .map(Some)
            }
        }
    }
}
