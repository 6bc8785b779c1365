//! `muster serve`: the settings (TOML file, then flags on top), the stop signals, and
//! the server's start and graceful stop.
//!
//! ```text
//!  defaults ◀── --config FILE ◀── --data-dir / --http / --dns / --consul / --xds / --tls-* ...   (later wins)
//!  SIGTERM or Ctrl-C ──▶ shutdown future ──▶ server stops gracefully ──▶ exit 0
//!  storage failure (Raft stopped) ──▶ server stops gracefully ──▶ exit 1, the error on stderr
//! ```

use std::io::Write;
use std::path::Path;

use muster_server::{ClientCertPolicy, ServerConfig};
use tracing::info;

use crate::args::Listen;
use crate::cli::{ClientCertArg, ServeArgs};
use crate::error::CliError;

/// The server's settings: the config file's (or the defaults), overridden by the flags.
pub fn load_config(args: &ServeArgs) -> Result<ServerConfig, CliError> {
    let mut config = match &args.config {
        Some(path) => read_config(path)?,
        None => ServerConfig::default(),
    };
    if let Some(data_dir) = &args.data_dir {
        config.data_dir.clone_from(data_dir);
    }
    if let Some(http) = args.http {
        config.http = http;
    }
    match args.dns {
        Some(Listen::Off) => config.dns_enabled = false,
        Some(Listen::At(addr)) => {
            config.dns_enabled = true;
            config.dns = addr;
        }
        None => {}
    }
    match args.consul {
        Some(Listen::Off) => config.consul.enabled = false,
        Some(Listen::At(addr)) => {
            config.consul.enabled = true;
            config.consul.addr = addr;
        }
        None => {}
    }
    match args.xds {
        Some(Listen::Off) => config.xds.addr = None,
        Some(Listen::At(addr)) => config.xds.addr = Some(addr),
        None => {}
    }
    if let Some(node_id) = args.node_id {
        config.node_id = node_id;
    }
    if let Some(addr) = args.cluster_addr {
        config.cluster_addr = Some(addr);
    }
    if let Some(peers) = &args.peers {
        config.peers.clone_from(peers);
    }
    if let Some(secret) = &args.cluster_secret {
        config.cluster_secret = Some(secret.clone());
    }
    let set = |setting: &mut Option<std::path::PathBuf>, flag: &Option<std::path::PathBuf>| {
        if let Some(path) = flag {
            *setting = Some(path.clone());
        }
    };
    set(&mut config.tls.cert, &args.tls_cert);
    set(&mut config.tls.key, &args.tls_key);
    set(&mut config.tls.client_ca, &args.tls_client_ca);
    if let Some(policy) = args.tls_client_cert {
        config.tls.client_cert = match policy {
            ClientCertArg::Required => ClientCertPolicy::Required,
            ClientCertArg::Optional => ClientCertPolicy::Optional,
        };
    }
    set(&mut config.cluster_tls.cert, &args.cluster_tls_cert);
    set(&mut config.cluster_tls.key, &args.cluster_tls_key);
    set(&mut config.cluster_tls.ca, &args.cluster_tls_ca);
    Ok(config)
}

/// What `--print-config` shows instead of a secret (the cluster secret, a federation peer's
/// token): the output is pasted into tickets and chats. Every secret-bearing setting is a
/// [`muster_core::Secret`], which serialises as this.
pub use muster_core::secret::REDACTED;

/// `--print-config`: the effective settings as TOML, every key present that has a value
/// (unset optional ones, such as `cluster_addr` on a single node, are left out), with every
/// secret shown as [`REDACTED`].
pub fn print_config(config: &ServerConfig, out: &mut dyn Write) -> Result<(), CliError> {
    let text = config_toml(config)?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|err| CliError::usage("stdout", format!("cannot print the configuration: {err}")))
}

/// The settings as a TOML document that [`read_config`] reads back into the same value, save
/// its secrets (each [`REDACTED`]).
pub fn config_toml(config: &ServerConfig) -> Result<String, CliError> {
    toml::to_string(config).map_err(|err| CliError::usage("config", format!("cannot render as TOML: {err}")))
}

/// Parses a TOML config file (unknown keys are refused, so a typo is never silently ignored).
pub fn read_config(path: &Path) -> Result<ServerConfig, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| CliError::usage("config", format!("cannot read {}: {err}", path.display())))?;
    toml::from_str(&text).map_err(|err| CliError::usage("config", format!("{}: {err}", path.display())))
}

/// Runs the server until SIGTERM or Ctrl-C, then waits for its graceful stop; a storage
/// failure stops it the same way and is returned as the error.
///
/// This is [`muster_server::run`] unrolled into `start` and `stop`, so that the address
/// actually bound (`--http 127.0.0.1:0` picks a free port) can be printed in between: one
/// line on stdout ([`ready_line`]), the only line a healthy start prints at the default log
/// level (SPEC O2).
pub async fn serve(args: ServeArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let config = load_config(&args)?;
    if args.print_config {
        return print_config(&config, out);
    }
    // Signals are installed before the server starts, so an early SIGTERM stops it
    // gracefully instead of killing the process with the default action.
    let shutdown = stop_signal()?;
    let data_path = config.data_dir.clone();
    let data_dir = data_path.display().to_string();
    let scheme = if config.tls.cert.is_some() { "https" } else { "http" };
    tracing::debug!(http = %config.http, dns = %config.dns, data_dir, "starting muster serve");
    let cluster = config.cluster_addr;
    // The dashboard's lab runs (SPEC U2): the server cannot reach the lab crate itself.
    let hooks = muster_server::Hooks::default().with_lab(std::sync::Arc::new(crate::lab_hook::SimulationRunner));
    let server = muster_server::start_with(config, hooks)
        .await
        .map_err(|err| CliError::from_start(err, &data_path))?;
    // Every listener, in the order the line names them; `None`: that listener is off. One
    // entry per listener feeds both the text and the `--json` line.
    let listeners = [
        ("http", Some(server.local_addr().to_string())),
        ("dns", server.dns_addr().map(|addr| addr.to_string())),
        ("consul", server.consul_addr().map(|addr| addr.to_string())),
        ("xds", server.xds_addr().map(|addr| addr.to_string())),
        ("cluster", cluster.map(|addr| addr.to_string())),
    ];
    let line = ready_line(&listeners, scheme, &data_dir, json);
    // A closed stdout must not stop the server: the line is a convenience, the logs say it too.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    server.serve_until(shutdown).await?;
    Ok(())
}

/// The one line `serve` prints once it listens: `muster serving http://ADDR, dns ADDR
/// (udp+tcp), cluster ADDR (data in DIR); ...`, or with `--json` an object with a key per
/// listener (`null` when off) and `data_dir`. The first listener is the HTTP API's.
pub fn ready_line(listeners: &[(&str, Option<String>)], scheme: &str, data_dir: &str, json: bool) -> String {
    if json {
        let mut line: serde_json::Map<String, serde_json::Value> = listeners
            .iter()
            .map(|(name, addr)| ((*name).to_owned(), addr.clone().into()))
            .collect();
        line.insert("data_dir".to_owned(), data_dir.into());
        return serde_json::Value::Object(line).to_string();
    }
    let named: Vec<String> = listeners
        .iter()
        .filter_map(|(name, addr)| {
            let addr = addr.as_ref()?;
            Some(match *name {
                "http" => format!("{scheme}://{addr}"),
                "dns" => format!("dns {addr} (udp+tcp)"),
                "consul" => format!("consul {scheme}://{addr}"),
                "xds" => format!("xds {addr} (grpc)"),
                other => format!("{other} {addr}"),
            })
        })
        .collect();
    let dns_off = if listeners.iter().any(|(name, addr)| *name == "dns" && addr.is_none()) {
        ", DNS off"
    } else {
        ""
    };
    format!(
        "muster serving {}{dns_off} (data in {data_dir}); Ctrl-C or SIGTERM stops it",
        named.join(", ")
    )
}

/// A future that resolves on the first SIGTERM or SIGINT (Ctrl-C).
#[cfg(unix)]
pub(crate) fn stop_signal() -> Result<impl Future<Output = ()> + Send + 'static, CliError> {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|err| CliError::usage("signal", format!("cannot install a {name} handler: {err}")))
    };
    let mut term = install(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = install(SignalKind::interrupt(), "SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM: stopping"),
            _ = interrupt.recv() => info!("interrupted: stopping"),
        }
    })
}

/// A future that resolves on Ctrl-C.
#[cfg(not(unix))]
pub(crate) fn stop_signal() -> Result<impl Future<Output = ()> + Send + 'static, CliError> {
    Ok(async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!("cannot wait for Ctrl-C ({err}); stop the process another way");
            std::future::pending::<()>().await;
        }
        info!("interrupted: stopping");
    })
}
