//! Logs (SPEC O2): where they go, how much of them, in which shape.
//!
//! ```text
//!  --log-level  ▶  MUSTER_LOG  ▶  RUST_LOG  ▶  the default      (the first one given wins)
//!      │                                          serve, bench: info   other commands: warn
//!      ▼
//!  EnvFilter (+ openraft held, OPENRAFT_HELD, unless the directive names it) ──▶ fmt layer
//!                                                           text (default) or --log-format json
//!                                                     [feature otel] + OTLP span export layer
//! ```
//!
//! Logs always go to stderr: stdout is the command's answer (for `serve`, the one line saying
//! where it listens, which scripts read). openraft logs its internal state at `info` (a
//! multi-kilobyte `RaftState` dump at startup, every vote change) and a healthy cluster's
//! chatter as warnings and errors: it is held ([`OPENRAFT_HELD`]) unless the directive names
//! it, e.g. `--log-level debug,openraft=info`.
//!
//! Endpoint events carry `tenant`, `namespace`, `service`, `instance`, `incarnation` and
//! `revision` as fields under the target `muster::endpoint` (see `muster_server`'s
//! `endpoint_log`): `--log-level info,muster::endpoint=debug` shows every applied change.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Where openraft's own lines are held unless the directive names openraft. It logs what a
/// healthy cluster does as warnings and errors: a vote that changed under a message at every
/// election, and every failed call to a peer (each half second while one is not up yet, as
/// in a cluster started node by node: an ERROR per vote request, a WARN and an ERROR per
/// append). Its core and replication modules are off: `muster_consensus` reports each peer's
/// reachability itself, once per change, and the server logs the error the core stopped on
/// (`the node's storage failed`). Its other modules' errors stay.
pub const OPENRAFT_HELD: &str = "openraft=error,openraft::core::raft_core=off,openraft::replication=off";

/// The environment variable of the log filter; `--log-level` wins over it.
pub const LOG_ENV: &str = "MUSTER_LOG";

/// How much to log and in which shape; global flags, so client commands take them too.
#[derive(Debug, Clone, Default, Args)]
pub struct LogArgs {
    /// What to log: error, warn, info, debug, trace, or a filter directive such as
    /// `info,muster::endpoint=debug` [default: info for serve and bench, warn otherwise].
    /// Wins over MUSTER_LOG (and RUST_LOG), which are read when it is absent.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// The shape of the log lines on stderr: text for people, json (one object a line) for a
    /// log shipper.
    #[arg(long, global = true, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export spans over OTLP/gRPC to this collector (e.g. http://127.0.0.1:4317); without
    /// it, the standard OTEL_EXPORTER_OTLP_ENDPOINT is used when set.
    #[cfg(feature = "otel")]
    #[arg(long, global = true, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line, the event's fields as keys.
    Json,
}

/// Where the filter came from, for the first debug line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterSource {
    /// `--log-level`.
    Flag,
    /// `MUSTER_LOG`.
    MusterLog,
    /// `RUST_LOG`.
    RustLog,
    /// The command's default.
    Default,
}

/// The filter directive in force and where it came from: the flag, else `MUSTER_LOG`, else
/// `RUST_LOG`, else `info` for a server (`serving`) or `warn` for a client command. openraft
/// is held ([`OPENRAFT_HELD`]) unless the directive names it.
pub fn directive(flag: Option<&str>, env: impl Fn(&str) -> Option<String>, serving: bool) -> (String, FilterSource) {
    let given = flag
        .map(|flag| (flag.to_owned(), FilterSource::Flag))
        .or_else(|| env(LOG_ENV).map(|value| (value, FilterSource::MusterLog)))
        .or_else(|| env("RUST_LOG").map(|value| (value, FilterSource::RustLog)))
        .filter(|(value, _)| !value.trim().is_empty());
    let (base, source) = given.unwrap_or_else(|| {
        let level = if serving { "info" } else { "warn" };
        (level.to_owned(), FilterSource::Default)
    });
    if base.contains("openraft") {
        (base, source)
    } else {
        (format!("{base},{OPENRAFT_HELD}"), source)
    }
}

/// Installs the global subscriber; an unusable directive is a usage error naming it. With
/// the `otel` feature, call it inside the Tokio runtime (see [`crate::otel`]).
pub fn init(args: &LogArgs, serving: bool) -> Result<Guard, String> {
    let (directive, source) = directive(args.log_level.as_deref(), |name| std::env::var(name).ok(), serving);
    let filter = EnvFilter::builder()
        .parse(&directive)
        .map_err(|err| format!("{}: '{directive}': {err}", source_name(source)))?;
    // The filter is the stderr layer's own, so that the OTLP export (feature `otel`) can take
    // spans that stderr does not print.
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match args.log_format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_filter(filter)
            .boxed(),
    };
    #[cfg(feature = "otel")]
    let (otel, guard) = crate::otel::layer(args.otlp_endpoint.as_deref(), serving)?;
    #[cfg(not(feature = "otel"))]
    let (otel, guard) = (None::<tracing_subscriber::layer::Identity>, Guard);
    tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|err| format!("logging: {err}"))?;
    tracing::debug!(directive, from = source_name(source), "log filter");
    Ok(guard)
}

/// What the caller keeps until the end of `main`: without the `otel` feature nothing; with
/// it, the tracer provider, flushed when dropped.
#[cfg(not(feature = "otel"))]
#[derive(Debug)]
pub struct Guard;

#[cfg(not(feature = "otel"))]
impl Guard {
    /// Flushes what the exporter holds (nothing without the `otel` feature).
    pub fn flush(self) {}
}

#[cfg(feature = "otel")]
pub use crate::otel::Guard;

fn source_name(source: FilterSource) -> &'static str {
    match source {
        FilterSource::Flag => "--log-level",
        FilterSource::MusterLog => LOG_ENV,
        FilterSource::RustLog => "RUST_LOG",
        FilterSource::Default => "the default",
    }
}
