//! The command line's shape (clap derive). Every subcommand has `--help`; every client
//! subcommand takes `--server` and `--tenant`; `--json` is accepted everywhere.
//!
//! Names are taken as text here and parsed in [`crate::commands`] together with `--tenant`,
//! so an invalid name is reported as `error: invalid_name: ...` with the registry's code.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::args::{
    ActorArg, CheckStatusArg, Listen, ProtocolArg, StateArg, parse_addr, parse_incarnation, parse_label,
    parse_lease_id, parse_listen, parse_peers,
};
use crate::duration::parse_duration;
use muster_client::DEFAULT_SERVER;
use muster_core::LeaseId;

/// Muster: a service-discovery registry. `muster serve` runs it (one node or a Raft cluster);
/// the other commands talk to it over its HTTP API, except `bench` and `lab`, which drive
/// servers (or a simulated fleet) of their own.
#[derive(Debug, Parser)]
#[command(name = "muster", version, propagate_version = true)]
#[command(after_help = "Exit codes: 0 ok, 1 refused by the server, 2 usage or invalid input, \
                        3 server unreachable or stream lost, 4 watch must resync.")]
pub struct Cli {
    /// Machine-readable output: the API's JSON on stdout (errors too, as {"error":{...}}).
    #[arg(long, global = true)]
    pub json: bool,
    /// Logs: --log-level, --log-format (stderr).
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the registry: one node, or a member of a Raft cluster of 3 or 5 (--node-id,
    /// --cluster-addr, --peers); HTTP API, DNS, a Consul-compatible API, the Raft log on disk.
    /// Prints one line once it listens; --print-config shows the settings instead.
    Serve(ServeArgs),
    /// Register (or re-register) an instance of a service, with a lease.
    Register(RegisterArgs),
    /// Set an instance's serving state (ready, degraded, not_serving ...).
    SetState(SetStateArgs),
    /// Mark an instance draining: callers stop sending it new work at once.
    Drain(DrainArgs),
    /// Remove an instance (fenced by its incarnation).
    Deregister(DeregisterArgs),
    /// Report a TTL check's result: pass, warn or fail.
    Check(CheckArgs),
    /// List a service's endpoints: the eligible ones, or --all with their states.
    Resolve(ResolveArgs),
    /// Stream a service's (or a namespace's) changes as they are committed.
    Watch(WatchArgs),
    /// List the services of a namespace.
    Services(ServicesArgs),
    /// Which revision a service's subscribers applied: per cohort and path, the
    /// commit→applied latency of its last changes, stragglers and silent clients.
    Convergence(crate::convergence::ConvergenceArgs),
    /// A deploy gate: wait until a fraction of a service's live subscribers applied a
    /// revision (exit 0), or time out listing the stragglers (exit 1).
    WaitConverged(crate::convergence::WaitConvergedArgs),
    /// Grant, renew or revoke a lease.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// Show the server's revision, leader and readiness.
    Status(StatusArgs),
    /// Show, grow or shrink the Raft group (ask the leader to change it).
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Regions: what this region mirrors of its peers (lag in revisions and seconds, state)
    /// and every failover decision.
    #[command(subcommand)]
    Federation(FederationCommand),
    /// Show or replace the registry policy (limits, network, quotas, history, fencing, TTLs):
    /// replicated state, so it judges every later write on every node.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// The audit trail, newest first: every committed write (applied or refused) and every
    /// denied request, with who, what, when and why (admin).
    Audit(crate::audit::AuditArgs),
    /// Access control: the one-time bootstrap, and tokens (create, list, revoke).
    #[command(subcommand)]
    Acl(crate::acl::AclCommand),
    /// A local proxy: a stable address (127.0.0.1:15001) that forwards TCP, HTTP/1.1, HTTP/2
    /// and gRPC to a service's eligible endpoints, balanced, retried within a budget, drained.
    Proxy(crate::proxy::ProxyArgs),
    /// Load Muster (and etcd) over HTTP: throughput, p50/p99, the Muster/etcd ratio, the targets.
    Bench(muster_bench::BenchArgs),
    /// Simulate a fleet on the real registry and client code: failed requests, stale window, heartbeat and lookup rates.
    Lab(muster_lab::LabArgs),
}

impl Cli {
    /// The command line with every usage line fixed to the flags it requires (U1). clap's
    /// error messages otherwise add every flag the user gave (or its environment variable
    /// set) to the usage line, so `--server` and `--port-name` read as required there.
    pub fn command_exact() -> clap::Command {
        let mut command = <Cli as clap::CommandFactory>::command();
        command.build();
        fix_usage(&mut command);
        command
    }

    /// Parses argv with [`Cli::command_exact`]; exits as `Cli::parse` does (2 for a usage
    /// error, 0 for `--help` and `--version`).
    pub fn parse_exact() -> Cli {
        match Cli::try_parse_exact_from(std::env::args_os()) {
            Ok(cli) => cli,
            Err(err) => err.exit(),
        }
    }

    /// [`Cli::parse_exact`] over `args`, returning the error.
    pub fn try_parse_exact_from<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut command = Cli::command_exact();
        let matches = command.try_get_matches_from_mut(args)?;
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).map_err(|err| err.format(&mut command))
    }
}

/// Pins each command's usage line to what clap renders from the definition alone: the
/// required flags and arguments, `[OPTIONS]` for the rest.
fn fix_usage(command: &mut clap::Command) {
    let rendered = command.render_usage().to_string();
    let usage = rendered.strip_prefix("Usage: ").unwrap_or(&rendered).to_owned();
    *command = command.clone().override_usage(usage);
    for sub in command.get_subcommands_mut() {
        fix_usage(sub);
    }
}

/// Where the server is and whose data to address.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The server's HTTP API.
    #[arg(long, env = "MUSTER_SERVER", default_value = DEFAULT_SERVER, value_name = "URL")]
    pub server: String,
    /// The tenant whose services to address.
    #[arg(long, env = "MUSTER_TENANT", default_value = "default", value_name = "T")]
    pub tenant: String,
    /// The bearer token's secret, when the server has `[auth] enabled = true`.
    #[arg(long, env = "MUSTER_TOKEN", value_name = "SECRET", hide_env_values = true)]
    pub token: Option<muster_core::Secret>,
    /// TLS to an https:// server: --cacert, --client-cert, --client-key.
    #[command(flatten)]
    pub tls: crate::args::TlsArgs,
}

/// Where the server is and whose token to use, for commands that address no tenant's data.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The server's HTTP API.
    #[arg(long, env = "MUSTER_SERVER", default_value = DEFAULT_SERVER, value_name = "URL")]
    pub server: String,
    /// The bearer token's secret, when the server has `[auth] enabled = true`.
    #[arg(long, env = "MUSTER_TOKEN", value_name = "SECRET", hide_env_values = true)]
    pub token: Option<muster_core::Secret>,
    /// TLS to an https:// server: --cacert, --client-cert, --client-key.
    #[command(flatten)]
    pub tls: crate::args::TlsArgs,
}

/// `muster serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Where the Raft log, vote and snapshots live [default: muster-data, or the config file's].
    #[arg(long, env = "MUSTER_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The HTTP API's address; loopback only unless auth is configured [default: 127.0.0.1:7070].
    #[arg(long, env = "MUSTER_HTTP", value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// The DNS listener's address, or `off` [default: 127.0.0.1:7053].
    #[arg(long, env = "MUSTER_DNS", value_name = "ADDR|off", value_parser = parse_listen)]
    pub dns: Option<Listen>,
    /// The Consul-compatible API's address, or `off`; loopback only unless auth is configured
    /// [default: 127.0.0.1:8500, a local Consul agent's].
    #[arg(long, env = "MUSTER_CONSUL", value_name = "ADDR|off", value_parser = parse_listen)]
    pub consul: Option<Listen>,
    /// The xDS control plane's gRPC address (ADS for proxyless gRPC and Envoy), or `off`;
    /// loopback only unless auth is configured [default: off].
    #[arg(long, env = "MUSTER_XDS", value_name = "ADDR|off", value_parser = parse_listen)]
    pub xds: Option<Listen>,
    /// A TOML file of server settings; the flags above override it.
    #[arg(long, env = "MUSTER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// This node's id in a cluster (a key of --peers) [default: 1].
    #[arg(long, env = "MUSTER_NODE_ID", value_name = "N")]
    pub node_id: Option<u64>,
    /// The node-to-node listener (Raft traffic, forwarded writes) of a cluster member.
    #[arg(long, env = "MUSTER_CLUSTER_ADDR", value_name = "ADDR")]
    pub cluster_addr: Option<SocketAddr>,
    /// Every voter of a static cluster of 3 or 5, this node included: 1=ADDR,2=ADDR,3=ADDR
    /// (their --cluster-addr). One member alone forms a cluster to grow with `cluster add`;
    /// a joiner lists the members it joins and itself.
    #[arg(long, env = "MUSTER_PEERS", value_name = "ID=ADDR,...", value_parser = parse_peers)]
    pub peers: Option<std::collections::BTreeMap<u64, String>>,
    /// The secret every node-to-node request carries (at least 16 bytes).
    #[arg(long, env = "MUSTER_CLUSTER_SECRET", value_name = "S", hide_env_values = true)]
    pub cluster_secret: Option<muster_core::Secret>,
    /// Serve the HTTP API over TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "MUSTER_TLS_CERT", value_name = "PATH")]
    pub tls_cert: Option<PathBuf>,
    /// The API certificate's private key (PEM).
    #[arg(long, env = "MUSTER_TLS_KEY", value_name = "PATH")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: verify client certificates against this CA (PEM).
    #[arg(long, env = "MUSTER_TLS_CLIENT_CA", value_name = "PATH")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: whether clients must present a certificate [default: required].
    #[arg(long, env = "MUSTER_TLS_CLIENT_CERT", value_enum, value_name = "POLICY")]
    pub tls_client_cert: Option<ClientCertArg>,
    /// Mutual TLS between cluster members: this node's certificate (PEM); its SANs must name
    /// its --peers host (an IP SAN for an IP). Needs --cluster-tls-key and --cluster-tls-ca.
    #[arg(long, env = "MUSTER_CLUSTER_TLS_CERT", value_name = "PATH")]
    pub cluster_tls_cert: Option<PathBuf>,
    /// This node's cluster certificate's private key (PEM).
    #[arg(long, env = "MUSTER_CLUSTER_TLS_KEY", value_name = "PATH")]
    pub cluster_tls_key: Option<PathBuf>,
    /// The cluster CA (PEM): every member's certificate must be signed by it.
    #[arg(long, env = "MUSTER_CLUSTER_TLS_CA", value_name = "PATH")]
    pub cluster_tls_ca: Option<PathBuf>,
    /// Print the effective configuration (defaults, then --config, then the flags) as TOML,
    /// a valid --config file, and exit without starting; docs/config.md describes each key.
    #[arg(long)]
    pub print_config: bool,
}

/// `--tls-client-cert`: whether a mutual-TLS API requires client certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientCertArg {
    /// A client without a certificate fails the handshake.
    Required,
    /// A client may connect without one (and authenticate with a token).
    Optional,
}

/// `muster register`. Exactly one of `--ttl` and `--lease` says how the registration lives
/// (one required group, so the usage line shows it as required: U1).
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("lifetime").required(true).args(["ttl", "lease"])))]
pub struct RegisterArgs {
    /// The service, e.g. prod/api.
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: String,
    /// The instance's stable identity (a DNS label), e.g. api-0.
    #[arg(value_name = "INSTANCE")]
    pub instance: String,
    /// Where it listens; repeat for more addresses (all on the same port). IPv6: `[::1]:8080`.
    #[arg(long = "addr", value_name = "IP:PORT", required = true, value_parser = parse_addr)]
    pub addrs: Vec<SocketAddr>,
    /// The name of the port (becomes the SRV name _NAME._tcp).
    #[arg(long, value_name = "NAME", default_value = "http")]
    pub port_name: String,
    /// What the port speaks [default: what --port-name says (http, http2, grpc), else tcp].
    #[arg(long, value_enum, value_name = "PROTOCOL")]
    pub protocol: Option<ProtocolArg>,
    /// This run's fencing token: a restart registers with a higher one.
    #[arg(long, value_name = "N", value_parser = parse_incarnation)]
    pub incarnation: u64,
    /// Grant a lease with this TTL in the same revision (10s, 500ms, 2m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Option<Duration>,
    /// Attach to an existing lease instead of granting one.
    #[arg(long, value_name = "ID", value_parser = parse_lease_id)]
    pub lease: Option<LeaseId>,
    /// The serving state of a new incarnation [server default: ready, or starting with a
    /// readiness check until it passes].
    #[arg(long, value_enum, value_name = "STATE")]
    pub state: Option<StateArg>,
    /// A health check the registry runs; the scheme picks the kind: http://HOST:PORT/PATH
    /// (2xx/3xx passes), tcp://HOST:PORT (connects), grpc://HOST:PORT[/SERVICE]
    /// (grpc.health.v1 SERVING). HOST is one of the endpoint's own --addr IPs, PORT one of
    /// its ports if it names any (else check_target_refused).
    #[arg(long, value_name = "URL", conflicts_with = "check_ttl")]
    pub check: Option<String>,
    /// Time between probes [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "check")]
    pub check_interval: Option<Duration>,
    /// Time a probe may take, at most the interval [default: 2s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "check")]
    pub check_timeout: Option<Duration>,
    /// Consecutive passes to pass [default: 2; 1 for a TTL check].
    #[arg(long, value_name = "N")]
    pub check_rise: Option<u32>,
    /// Consecutive failures to fail [default: 3; 1 for a TTL check].
    #[arg(long, value_name = "N")]
    pub check_fall: Option<u32>,
    /// A TTL check instead: the instance reports with `muster check pass|warn|fail` at least
    /// this often, or it fails.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub check_ttl: Option<Duration>,
    /// The zone it runs in.
    #[arg(long, value_name = "Z")]
    pub zone: Option<String>,
    /// The region it runs in.
    #[arg(long, value_name = "R")]
    pub region: Option<String>,
    /// Relative weight, 1 to 65535 [server default: 100].
    #[arg(long, value_name = "W")]
    pub weight: Option<u32>,
    /// A descriptive label; repeat for more.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Only if the record is at this revision (0: only if it does not exist).
    #[arg(long, value_name = "R")]
    pub expected_revision: Option<u64>,
    /// Speak as the owner (may lift a drain), the app or a checker [server default: drain as
    /// owner, the rest as app]. With auth on, capped at the token's role: a narrower role
    /// may be asked for, a wider one is refused (403).
    #[arg(long, value_enum, value_name = "ACTOR")]
    pub actor: Option<ActorArg>,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster set-state`.
#[derive(Debug, Clone, Args)]
pub struct SetStateArgs {
    /// The service, e.g. prod/api.
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: String,
    /// The instance.
    #[arg(value_name = "INSTANCE")]
    pub instance: String,
    /// The incarnation speaking.
    #[arg(long, value_name = "N", value_parser = parse_incarnation)]
    pub incarnation: u64,
    /// The new state.
    #[arg(long, value_enum, value_name = "STATE")]
    pub state: StateArg,
    /// Why, recorded with the state.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub reason: String,
    /// Only if the record is at this revision.
    #[arg(long, value_name = "R")]
    pub expected_revision: Option<u64>,
    /// Speak as the owner (may lift a drain), the app or a checker [server default: drain as
    /// owner, the rest as app]. With auth on, capped at the token's role: a narrower role
    /// may be asked for, a wider one is refused (403).
    #[arg(long, value_enum, value_name = "ACTOR")]
    pub actor: Option<ActorArg>,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster drain`.
#[derive(Debug, Clone, Args)]
pub struct DrainArgs {
    /// The service, e.g. prod/api.
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: String,
    /// The instance.
    #[arg(value_name = "INSTANCE")]
    pub instance: String,
    /// The incarnation speaking.
    #[arg(long, value_name = "N", value_parser = parse_incarnation)]
    pub incarnation: u64,
    /// Why, recorded with the state.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub reason: String,
    /// Deregister the instance this long after the drain (10s, 2m), or as soon as it
    /// reports nothing in flight; without it, the instance stays draining until removed.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub grace: Option<Duration>,
    /// Only if the record is at this revision.
    #[arg(long, value_name = "R")]
    pub expected_revision: Option<u64>,
    /// Speak as the owner (may lift a drain), the app or a checker [server default: drain as
    /// owner, the rest as app]. With auth on, capped at the token's role: a narrower role
    /// may be asked for, a wider one is refused (403).
    #[arg(long, value_enum, value_name = "ACTOR")]
    pub actor: Option<ActorArg>,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The result: pass, warn or fail.
    #[arg(value_enum, value_name = "STATUS")]
    pub status: CheckStatusArg,
    /// The service, e.g. prod/api.
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: String,
    /// The instance.
    #[arg(value_name = "INSTANCE")]
    pub instance: String,
    /// The incarnation reporting.
    #[arg(long, value_name = "N", value_parser = parse_incarnation)]
    pub incarnation: u64,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster deregister`.
#[derive(Debug, Clone, Args)]
pub struct DeregisterArgs {
    /// The service, e.g. prod/api.
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: String,
    /// The instance.
    #[arg(value_name = "INSTANCE")]
    pub instance: String,
    /// The incarnation speaking (an older one cannot delete its replacement).
    #[arg(long, value_name = "N", value_parser = parse_incarnation)]
    pub incarnation: u64,
    /// Only if the record is at this revision.
    #[arg(long, value_name = "R")]
    pub expected_revision: Option<u64>,
    /// Speak as the owner (may lift a drain), the app or a checker [server default: drain as
    /// owner, the rest as app]. With auth on, capped at the token's role: a narrower role
    /// may be asked for, a wider one is refused (403).
    #[arg(long, value_enum, value_name = "ACTOR")]
    pub actor: Option<ActorArg>,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster resolve`.
#[derive(Debug, Clone, Args)]
pub struct ResolveArgs {
    /// The service, e.g. prod/api.
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: String,
    /// Every endpoint, with its serving state and who set it why, not only the eligible.
    #[arg(long)]
    pub all: bool,
    /// Count degraded endpoints as eligible.
    #[arg(long, conflicts_with = "all")]
    pub degraded: bool,
    /// Read the set as it was at this past revision.
    #[arg(long, value_name = "R")]
    pub revision: Option<u64>,
    /// Read a service that is not registered as an empty set (exit 0) instead of failing
    /// `not_found`; for scripts that wait for a service to appear.
    #[arg(long, conflicts_with = "revision")]
    pub allow_empty: bool,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster watch`.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// The service (prod/api), or a whole namespace (prod).
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: String,
    /// Replay every change after this revision, then stream live (default: a snapshot first).
    #[arg(long, value_name = "R")]
    pub from_revision: Option<u64>,
    /// Give up when nothing (not even a progress frame) arrives for this long.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub idle_timeout: Duration,
    /// Who this watch reports as to the server's convergence telemetry.
    #[command(flatten)]
    pub report: ReportArgs,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// How a subscriber names itself in convergence reports (SPEC O3).
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The stable client id reported to the server (default: host:pid). Keep it the same
    /// across restarts of one instance (a pod name).
    #[arg(long, env = "MUSTER_CLIENT_ID", value_name = "ID", value_parser = parse_client_id)]
    pub client_id: Option<muster_core::convergence::ClientId>,
    /// The cohort reported with it (zone=a, version=1.4).
    #[arg(long, env = "MUSTER_COHORT", value_name = "KEY=VALUE", value_parser = parse_report_cohort)]
    pub cohort: Option<muster_core::convergence::Cohort>,
    /// Report nothing.
    #[arg(long)]
    pub no_report: bool,
}

impl ReportArgs {
    /// `builder` reporting as these arguments say.
    pub fn apply(&self, builder: muster_client::ClientBuilder) -> muster_client::ClientBuilder {
        let mut builder = builder.report_applied(!self.no_report);
        if let Some(id) = &self.client_id {
            builder = builder.client_id(id.clone());
        }
        if let Some(cohort) = &self.cohort {
            builder = builder.cohort(cohort.clone());
        }
        builder
    }
}

fn parse_client_id(text: &str) -> Result<muster_core::convergence::ClientId, String> {
    muster_core::convergence::ClientId::new(text).map_err(|error| error.to_string())
}

fn parse_report_cohort(text: &str) -> Result<muster_core::convergence::Cohort, String> {
    muster_core::convergence::Cohort::new(text).map_err(|error| error.to_string())
}

/// `muster services`.
#[derive(Debug, Clone, Args)]
pub struct ServicesArgs {
    /// The namespace, e.g. prod.
    #[arg(value_name = "NAMESPACE")]
    pub namespace: String,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster cluster ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum ClusterCommand {
    /// The members as the server knows them: id, address, voter or learner, the leader.
    Status(StatusArgs),
    /// Add a node (started with --node-id and --cluster-addr): a learner until it caught up,
    /// then a voter.
    Add(AddMemberArgs),
    /// Remove a node from the group.
    Remove(RemoveMemberArgs),
}

/// `muster federation ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum FederationCommand {
    /// Peers, their imports and mirrored services, lag and age, failover decisions.
    Status(StatusArgs),
}

/// `muster policy ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum PolicyCommand {
    /// The policy in force and the revision it was set at, as TOML in the shape of the config
    /// file's `[registry]` section (`--json`: the API's reply).
    Show(StatusArgs),
    /// Replace the whole policy from a file; settings it omits take their defaults. Writes
    /// committed before keep their effect; later ones are judged by the new policy.
    Set(PolicySetArgs),
}

/// `muster policy set`.
#[derive(Debug, Clone, Args)]
pub struct PolicySetArgs {
    /// The policy: TOML (the `[registry]` section's contents, or a file with a `[registry]`
    /// table) or JSON (a `.json` file), e.g. the output of `muster policy show`.
    #[arg(long, value_name = "PATH")]
    pub file: PathBuf,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster cluster add`.
#[derive(Debug, Clone, Args)]
pub struct AddMemberArgs {
    /// The new node's id.
    #[arg(value_name = "ID")]
    pub id: u64,
    /// Its node-to-node address (its --cluster-addr), host:port.
    #[arg(value_name = "ADDR")]
    pub addr: String,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster cluster remove`.
#[derive(Debug, Clone, Args)]
pub struct RemoveMemberArgs {
    /// The node's id.
    #[arg(value_name = "ID")]
    pub id: u64,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster lease ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum LeaseCommand {
    /// Grant a lease; attach instances with `register --lease ID`.
    Grant(LeaseGrantArgs),
    /// Renew a lease: its deadline moves to now + TTL.
    Renew(LeaseIdArgs),
    /// Revoke a lease: every instance attached to it is removed.
    Revoke(LeaseIdArgs),
}

/// `muster lease grant`.
#[derive(Debug, Clone, Args)]
pub struct LeaseGrantArgs {
    /// The service the lease is for, e.g. prod/api: renewed and revoked on that service's
    /// rights, held only by its instances. Omitted: a lease of the whole tenant, which only a
    /// token with rights on every service of it can renew.
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: Option<String>,
    /// The TTL (10s, 500ms, 2m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Duration,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster lease renew` and `muster lease revoke`.
#[derive(Debug, Clone, Args)]
pub struct LeaseIdArgs {
    /// The lease.
    #[arg(value_name = "ID", value_parser = parse_lease_id)]
    pub id: LeaseId,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}
