//! `muster convergence` and `muster wait-converged` (SPEC O3): which revision a service's
//! subscribers applied, and a deploy gate that waits until enough of them have.
//!
//! The gate polls `GET /v1/convergence/...` with the target, cohort and fraction, every
//! [`POLL_EVERY`], until the server says `converged` with at least `--min-subscribers` live
//! subscribers, or the timeout passes: then it lists the stragglers and exits 1
//! (`not_converged`). Drain, wait until converged, then stop: the grace a drain needs,
//! measured instead of guessed (SPEC L6).

use std::io::Write;
use std::time::Duration;

use clap::Args;
use muster_client::convergence::{ConvergenceQuery, ConvergenceReply};
use muster_core::Revision;
use muster_core::convergence::Cohort;

use crate::args::parse_service_key;
use crate::cli::ClientArgs;
use crate::commands::{connect, emit};
use crate::duration::parse_duration;
use crate::error::CliError;
use crate::table::Table;

/// How often the gate asks: a subscriber reports within a quarter second of applying
/// (`muster_client::convergence::DEFAULT_REPORT_INTERVAL`), so a deploy waits at most about that long
/// past the moment the fleet converged.
const POLL_EVERY: Duration = Duration::from_millis(250);

/// What to ask about.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The service (prod/api).
    #[arg(value_name = "NAMESPACE/SERVICE")]
    pub service: String,
    /// Only subscribers of this cohort (zone=a, version=1.4).
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_cohort)]
    pub cohort: Option<Cohort>,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `muster convergence`.
#[derive(Debug, Clone, Args)]
pub struct ConvergenceArgs {
    /// Count subscribers at this revision or later (default: the service's last change).
    #[arg(long, value_name = "R")]
    pub revision: Option<u64>,
    /// Which service and cohort.
    #[command(flatten)]
    pub target: Target,
}

/// `muster wait-converged`.
#[derive(Debug, Clone, Args)]
pub struct WaitConvergedArgs {
    /// The revision subscribers must have applied (a write's reply carries it).
    #[arg(long, value_name = "R")]
    pub revision: u64,
    /// The fraction of live subscribers that must have applied it, in (0, 1].
    #[arg(long, value_name = "F", default_value_t = 1.0, value_parser = parse_fraction)]
    pub fraction: f64,
    /// Give up after this long (exit 1, stragglers listed).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub timeout: Duration,
    /// Live subscribers needed before the fraction means anything: with none, a misspelt
    /// service or cohort would pass at once. 0 accepts a service nobody follows.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub min_subscribers: usize,
    /// Which service and cohort.
    #[command(flatten)]
    pub target: Target,
}

fn parse_cohort(text: &str) -> Result<Cohort, String> {
    Cohort::new(text).map_err(|error| error.to_string())
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(fraction) if fraction > 0.0 && fraction <= 1.0 => Ok(fraction),
        _ => Err(format!("'{text}' is not a fraction in (0, 1], e.g. 0.99")),
    }
}

/// What a `muster watch` has applied, per service, for its convergence reports.
#[derive(Debug, Default)]
pub struct Applied {
    /// The services seen on the stream: a `progress` frame brings all of them current.
    seen: std::collections::BTreeSet<muster_core::ServiceKey>,
}

impl Applied {
    /// `frame` was printed: tell the client's reporter what is current now.
    pub fn frame(&mut self, client: &muster_client::Client, frame: &muster_core::api::Frame) {
        use muster_core::api::Frame;
        match frame {
            Frame::Snapshot { revision, snapshot } => {
                self.seen.insert(snapshot.key().clone());
                client.note_applied(snapshot.key(), *revision);
            }
            Frame::Update(update) => {
                self.seen.insert(update.key.clone());
                client.note_applied(&update.key, update.revision);
            }
            Frame::Progress { revision } => {
                for key in &self.seen {
                    client.note_applied(key, *revision);
                }
            }
            Frame::Error { .. } | Frame::Resync { .. } | Frame::Closing { .. } => {}
        }
    }
}

/// `muster convergence prod/api`.
pub async fn convergence(args: ConvergenceArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let key = parse_service_key(&args.target.client.tenant, &args.target.service)?;
    let client = connect(&args.target.client)?;
    let query = ConvergenceQuery {
        revision: args.revision.map(Revision),
        cohort: args.target.cohort,
        fraction: None,
    };
    let reply = client.convergence(&key, &query).await?;
    emit(out, json, &reply, || summary_text(&reply))
}

/// `muster wait-converged prod/api --revision R`.
pub async fn wait_converged(args: WaitConvergedArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let key = parse_service_key(&args.target.client.tenant, &args.target.service)?;
    let client = connect(&args.target.client)?;
    let query = ConvergenceQuery {
        revision: Some(Revision(args.revision)),
        cohort: args.target.cohort,
        fraction: Some(args.fraction),
    };
    let deadline = tokio::time::Instant::now() + args.timeout;
    // A deploy outlives a registry restart or a dropped connection: a transient failure is
    // retried until the deadline, then reported.
    let mut last = None;
    let mut failure = None;
    loop {
        let read = tokio::time::timeout_at(deadline, client.convergence(&key, &query)).await;
        match read.unwrap_or_else(|_| {
            Err(muster_client::ClientError::Timeout {
                server: client.server().to_owned(),
                after: args.timeout,
            })
        }) {
            Ok(reply) if reply.converged && reply.live >= args.min_subscribers => {
                return emit(out, json, &reply, || {
                    format!(
                        "converged: {} of {} live subscribers applied revision {} or later (fraction {} asked)\n",
                        reply.applied, reply.live, reply.target, reply.fraction
                    )
                });
            }
            Ok(reply) => last = Some(reply),
            Err(error) if error.is_transient() => {
                tracing::debug!(%error, "convergence read failed; retrying");
                failure = Some(error);
            }
            Err(error) => return Err(error.into()),
        }
        if tokio::time::Instant::now() + POLL_EVERY > deadline {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    let Some(reply) = last else {
        // Nothing but failures: the last one says why.
        return Err(failure.map_or_else(
            || CliError::NotConverged {
                message: "the registry could not be read before the timeout".into(),
            },
            CliError::from,
        ));
    };
    emit(out, json, &reply, || summary_text(&reply))?;
    let why = if reply.live >= args.min_subscribers {
        format!(
            "{} of {} live subscribers applied revision {} or later; {} needed (fraction {})",
            reply.applied, reply.live, reply.target, reply.needed, reply.fraction
        )
    } else {
        format!(
            "{} live subscribers, {} needed (--min-subscribers)",
            reply.live, args.min_subscribers
        )
    };
    Err(CliError::NotConverged {
        message: format!(
            "not converged after {}: {why}; {} stragglers",
            crate::duration::format_millis(args.timeout.as_millis() as u64),
            reply.stragglers_total
        ),
    })
}

/// The human form of a convergence reply: counts, cohorts, latency, stragglers.
pub fn summary_text(reply: &ConvergenceReply) -> String {
    let mut text = format!(
        "{}: revision {} (target {}): {} of {} live subscribers applied it{}\n",
        reply.service,
        reply.revision,
        reply.target,
        reply.applied,
        reply.live,
        reply
            .cohort
            .as_ref()
            .map_or(String::new(), |c| format!(" (cohort {c})")),
    );
    let latency = &reply.latency;
    text.push_str(&format!(
        "commit→applied over the last {} changes: p50 {} ms, p99 {} ms, p99.9 {} ms, max {} ms ({} samples)\n",
        reply.changes.len(),
        latency.p50_ms,
        latency.p99_ms,
        latency.p999_ms,
        latency.max_ms,
        latency.samples
    ));
    let mut groups = Table::new(["COHORT", "LIVE", "APPLIED"]);
    for group in &reply.cohorts {
        groups.row([
            group.cohort.clone().unwrap_or_else(|| "-".into()),
            group.live.to_string(),
            group.applied.to_string(),
        ]);
    }
    for path in &reply.paths {
        // The DNS listener applies at commit and routes nobody: it is never a live subscriber
        // (the total above leaves it out), so it shows no live count.
        let live = if path.path.as_str() == "dns" {
            "-".to_owned()
        } else {
            path.live.to_string()
        };
        groups.row([format!("path={}", path.path.as_str()), live, path.applied.to_string()]);
    }
    if !groups.is_empty() {
        text.push_str(&groups.render());
    }
    if reply.stragglers_total > 0 {
        text.push_str(&format!("stragglers ({}):\n", reply.stragglers_total));
        let mut stragglers = Table::new(["CLIENT", "COHORT", "PATH", "REVISION", "BEHIND", "LAST REPORT"]);
        for straggler in &reply.stragglers {
            stragglers.row([
                straggler.client_id.clone(),
                straggler.cohort.clone().unwrap_or_else(|| "-".into()),
                straggler.path.as_str().to_owned(),
                straggler.revision.to_string(),
                crate::duration::format_millis(straggler.behind_ms),
                format!("{} ago", crate::duration::format_millis(straggler.last_report_ms)),
            ]);
        }
        text.push_str(&stragglers.render());
    }
    if reply.silent_total > 0 {
        text.push_str(&format!(
            "silent ({}, not counted: no report for {} or more):\n",
            reply.silent_total,
            crate::duration::format_millis(reply.silent_after_ms)
        ));
        let mut silent = Table::new(["CLIENT", "COHORT", "PATH", "REVISION", "SILENT"]);
        for client in &reply.silent {
            silent.row([
                client.client_id.clone(),
                client.cohort.clone().unwrap_or_else(|| "-".into()),
                client.path.as_str().to_owned(),
                client.revision.to_string(),
                crate::duration::format_millis(client.silent_ms),
            ]);
        }
        text.push_str(&silent.render());
    }
    text
}
