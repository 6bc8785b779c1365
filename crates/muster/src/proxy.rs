//! `muster proxy` (SPEC D3): one listener from flags (`--listen`, `--service`, `--port`,
//! `--protocol`, `--balancer`) and/or many from a `--config` file, then the proxy runs until
//! SIGTERM or Ctrl-C, which drains it (see [`muster_proxy::RunningProxy::shutdown`]).
//!
//! Prints one line per listener once it listens, then the admin line (with `--json`, one
//! object: `{"listeners": [{"listen", "service", "protocol", "balancer"}], "admin"}`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use muster_proxy::config::{
    BalancerKind, ListenerConfig, ListenerProtocol, ProxyConfig, parse_header, parse_label, parse_service,
};

use crate::cli::ClientArgs;
use crate::duration::parse_duration;
use crate::error::CliError;

/// `muster proxy`.
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// Where callers connect (with --service); e.g. 127.0.0.1:15001.
    #[arg(long, value_name = "ADDR", requires = "service")]
    pub listen: Option<SocketAddr>,
    /// The service to forward to: NAMESPACE/SERVICE (in --tenant) or TENANT/NAMESPACE/SERVICE.
    #[arg(long, value_name = "NAMESPACE/SERVICE", requires = "listen")]
    pub service: Option<String>,
    /// The endpoints' named port to connect to (default: each endpoint's first port).
    #[arg(long, value_name = "NAME", requires = "listen")]
    pub port: Option<String>,
    /// What the listener speaks: tcp, http (HTTP/1.1 and h2c, so gRPC), or auto (detects
    /// HTTP/2 and HTTP/1, falls back to TCP).
    #[arg(long, value_enum, default_value = "auto", requires = "listen")]
    pub protocol: ProtocolArg,
    /// How to balance: p2c (least request), weighted, hash (on --hash-header), locality
    /// (with --zone, --region), round_robin.
    #[arg(long, value_enum, default_value = "p2c", requires = "listen")]
    pub balancer: BalancerArg,
    /// The header whose value picks the endpoint for --balancer hash.
    #[arg(long, value_name = "HEADER", requires = "listen")]
    pub hash_header: Option<String>,
    /// Retries may add at most this fraction of requests (0.2: 20%).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.2, requires = "listen")]
    pub retry_budget: f64,
    /// Attempts per request or connection, the first included.
    #[arg(long, value_name = "N", default_value_t = muster_proxy::config::DEFAULT_MAX_ATTEMPTS, requires = "listen")]
    pub max_attempts: u32,
    /// More listeners (and settings) from a TOML file with [[listener]] tables.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The admin listener (/metrics, /debug/endpoints), or `off` [default: the config file's
    /// `admin`, else 127.0.0.1:15000].
    #[arg(long, value_name = "ADDR|off")]
    pub admin: Option<String>,
    /// Keep each service's last known good set here, and serve from it when started while
    /// the registry is down.
    #[arg(long, value_name = "DIR")]
    pub lkg_dir: Option<PathBuf>,
    /// How long TCP streams to a draining endpoint, or through a stopping proxy, may run on.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub drain_grace: Option<Duration>,
    /// This caller's zone, for --balancer locality.
    #[arg(long, value_name = "ZONE")]
    pub zone: Option<String>,
    /// This caller's region, for --balancer locality.
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// Follow each service's failover decision (a federated region, SPEC G1): while it
    /// spills, forward the decided share to the admitted region's endpoints.
    #[arg(long)]
    pub failover: bool,
    /// Who this proxy reports as to the server's convergence telemetry (SPEC O3).
    #[command(flatten)]
    pub report: crate::cli::ReportArgs,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `--protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    /// Opaque TCP.
    Tcp,
    /// HTTP/1.1 and HTTP/2 (h2c).
    Http,
    /// Detect.
    Auto,
}

/// `--balancer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BalancerArg {
    /// Power of two choices, least request.
    P2c,
    /// By weight.
    Weighted,
    /// Consistent hash on a header.
    Hash,
    /// Locality-aware.
    Locality,
    /// Round robin.
    #[value(name = "round_robin")]
    RoundRobin,
}

/// The admin listener when neither the flag nor the file names one.
const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 15000);

fn usage(err: muster_proxy::config::ConfigError) -> CliError {
    CliError::usage(err.code, err.message)
}

/// The proxy's settings: the file's, then the flags' listener and settings on top.
pub fn proxy_config(args: &ProxyArgs) -> Result<ProxyConfig, CliError> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|err| CliError::usage("config", format!("cannot read {}: {err}", path.display())))?;
            ProxyConfig::from_toml(&text, &args.client.tenant)
                .map_err(|err| CliError::usage(err.code, format!("{}: {}", path.display(), err.message)))?
        }
        None => ProxyConfig::default(),
    };
    if let (Some(listen), Some(service)) = (args.listen, &args.service) {
        let mut listener = ListenerConfig::new(listen, parse_service(&args.client.tenant, service).map_err(usage)?);
        listener.port = args
            .port
            .as_deref()
            .map(|p| parse_label("port", p))
            .transpose()
            .map_err(usage)?;
        listener.protocol = match args.protocol {
            ProtocolArg::Tcp => ListenerProtocol::Tcp,
            ProtocolArg::Http => ListenerProtocol::Http,
            ProtocolArg::Auto => ListenerProtocol::Auto,
        };
        listener.balancer = match args.balancer {
            BalancerArg::P2c => BalancerKind::P2c,
            BalancerArg::Weighted => BalancerKind::Weighted,
            BalancerArg::Hash => BalancerKind::Hash,
            BalancerArg::Locality => BalancerKind::Locality,
            BalancerArg::RoundRobin => BalancerKind::RoundRobin,
        };
        listener.hash_header = args
            .hash_header
            .as_deref()
            .map(parse_header)
            .transpose()
            .map_err(usage)?;
        listener.budget.ratio = args.retry_budget;
        listener.max_attempts = args.max_attempts;
        config.listeners.push(listener);
    }
    // The flag, then the file, then the default; a file without `admin` gets the default.
    config.admin = match args.admin.as_deref() {
        Some("off") => None,
        Some(addr) => Some(
            addr.parse()
                .map_err(|_| CliError::usage("invalid_config", format!("--admin '{addr}': an ADDR:PORT or off")))?,
        ),
        None => config.admin.or(Some(DEFAULT_ADMIN)),
    };
    if args.lkg_dir.is_some() {
        config.lkg_dir.clone_from(&args.lkg_dir);
    }
    if let Some(grace) = args.drain_grace {
        config.drain_grace = grace;
    }
    if let Some(zone) = &args.zone {
        config.zone = Some(parse_label("zone", zone).map_err(usage)?);
    }
    if let Some(region) = &args.region {
        config.region = Some(parse_label("region", region).map_err(usage)?);
    }
    config.failover |= args.failover;
    config.validate().map_err(usage)?;
    Ok(config)
}

/// Runs the proxy until SIGTERM or Ctrl-C, then drains it.
pub async fn run(args: ProxyArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let config = proxy_config(&args)?;
    let shutdown = crate::serve::stop_signal()?;
    if let Some(dir) = &config.lkg_dir {
        std::fs::create_dir_all(dir)
            .map_err(|err| CliError::usage("config", format!("cannot create {}: {err}", dir.display())))?;
    }
    let builder = crate::commands::client_builder(
        &args.client.server,
        args.client.token.as_ref().map(muster_core::Secret::expose),
        &args.client.tls,
    )?;
    let client = args.report.apply(builder).build().map_err(crate::commands::usage)?;
    let server = client.server().to_owned();
    let proxy = muster_proxy::start(config, client)
        .await
        .map_err(|err| CliError::usage(err.code(), err.to_string()))?;
    let listeners: Vec<serde_json::Value> = proxy
        .targets()
        .iter()
        .map(|target| {
            serde_json::json!({
                "listen": target.config.listen.to_string(),
                "service": target.config.service.to_string(),
                "protocol": target.config.protocol.as_str(),
                "balancer": target.config.balancer.as_str(),
            })
        })
        .collect();
    let admin = proxy.admin_addr().map(|a| a.to_string());
    let line = if json {
        serde_json::json!({ "listeners": listeners, "admin": admin, "server": server }).to_string()
    } else {
        let mut text: Vec<String> = proxy
            .targets()
            .iter()
            .map(|t| {
                format!(
                    "muster proxy {} -> {} ({}, {})",
                    t.config.listen,
                    t.config.service,
                    t.config.protocol.as_str(),
                    t.config.balancer.as_str()
                )
            })
            .collect();
        text.push(format!(
            "admin {} (registry {server}); Ctrl-C or SIGTERM drains and stops it",
            admin
                .as_deref()
                .map_or_else(|| "off".to_owned(), |a| format!("http://{a}"))
        ));
        text.join("\n")
    };
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    shutdown.await;
    proxy.shutdown().await;
    Ok(())
}
