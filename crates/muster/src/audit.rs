//! `muster audit`: the audit trail (SPEC S4), newest first, as a table or the API's JSON.
//!
//! The filters are `GET /v1/audit`'s, in the CLI's terms: `--key` names a service or a
//! namespace within `--tenant` (as every command does), `--all-tenants` drops the tenant
//! filter (an operator's view, including records of no tenant: policy changes, node-to-node
//! denials), and times are either how long ago (`--since 1h`) or Unix milliseconds
//! (`--since-ms`). [`query`] turns the flags into the API's query and is pure: the caller
//! passes the time.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use muster_core::api::{AuditQuery, AuditRecord, AuditReply};

use crate::args::{parse_namespace_key, parse_service_key, parse_tenant};
use crate::cli::ClientArgs;
use crate::duration::{millis, parse_duration};
use crate::error::CliError;
use crate::table::Table;

/// `muster audit`.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Every tenant's records and the cluster's own, not only --tenant's.
    #[arg(long, conflicts_with = "key")]
    pub all_tenants: bool,
    /// Only this service (prod/api) or namespace (prod) of --tenant.
    #[arg(long, value_name = "NAMESPACE[/SERVICE]")]
    pub key: Option<String>,
    /// Only records of this principal.
    #[arg(long, value_name = "P")]
    pub principal: Option<String>,
    /// Only these outcomes: applied, unchanged, refused, denied, or one exactly
    /// (refused:stale_incarnation).
    #[arg(long, value_name = "OUTCOME")]
    pub outcome: Option<String>,
    /// Only records from this long ago on (10m, 1h, 1h30m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "since_ms")]
    pub since: Option<Duration>,
    /// Only records before this long ago.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "until_ms")]
    pub until: Option<Duration>,
    /// Only records at or after this time (Unix milliseconds).
    #[arg(long, value_name = "MS")]
    pub since_ms: Option<u64>,
    /// Only records before this time (Unix milliseconds).
    #[arg(long, value_name = "MS")]
    pub until_ms: Option<u64>,
    /// At most this many records [server default: 100, at most 1,000].
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Continue with the older records after a previous page (its `next_cursor`).
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,
    /// Server and tenant.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The API query the flags ask for, with relative times taken back from `now_unix_ms`. Names
/// are checked here, so a bad one is refused before anything is sent.
pub fn query(args: &AuditArgs, now_unix_ms: u64) -> Result<AuditQuery, CliError> {
    let tenant = parse_tenant(&args.client.tenant)?;
    let key = match &args.key {
        None => None,
        Some(text) if text.contains('/') => Some(parse_service_key(tenant.as_str(), text)?.to_string()),
        Some(text) => Some(parse_namespace_key(tenant.as_str(), text)?.to_string()),
    };
    let ago = |duration: Duration| now_unix_ms.saturating_sub(millis(duration));
    Ok(AuditQuery {
        tenant: (!args.all_tenants).then(|| tenant.to_string()),
        principal: args.principal.clone(),
        key,
        outcome: args.outcome.clone(),
        since_ms: args.since.map(ago).or(args.since_ms),
        until_ms: args.until.map(ago).or(args.until_ms),
        limit: args.limit,
        cursor: args.cursor.clone(),
    })
}

/// Runs `muster audit`.
#[allow(
    clippy::disallowed_methods,
    reason = "the wall clock is read once here, at the edge; `query` takes it as an input"
)]
pub async fn run(args: AuditArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, millis);
    let query = query(&args, now)?;
    let client = crate::commands::connect(&args.client)?;
    let reply = client.audit(&query).await?;
    crate::commands::emit(out, json, &reply, || audit_text(&reply, query.tenant.as_deref()))
}

/// The page as a table, newest first, with how to continue; `tenant` is the tenant the
/// records were filtered to (an empty page says so, and how to see others').
pub fn audit_text(reply: &AuditReply, tenant: Option<&str>) -> String {
    if reply.records.is_empty() {
        return match tenant {
            Some(tenant) => format!(
                "no audit records of tenant {tenant} match (--tenant NAME for another, --all-tenants for \
                 every tenant's and the cluster's own)\n"
            ),
            None => "no audit records match\n".to_owned(),
        };
    }
    let mut table = Table::new([
        "SEQ",
        "TIME (UTC)",
        "PRINCIPAL",
        "VERB",
        "KEY",
        "INSTANCE",
        "INCARNATION",
        "REVISION",
        "OUTCOME",
        "DETAIL",
    ]);
    let dash = || "-".to_owned();
    for record in &reply.records {
        table.row([
            record.seq.to_string(),
            utc(record.at_ms),
            record.principal.clone().unwrap_or_else(dash),
            record.verb.clone(),
            // A record filed under a tenant with no key (a token's reach into another tenant
            // is filed under its own, SPEC S3) says so, rather than look like a key.
            record
                .key
                .clone()
                .or_else(|| record.tenant.as_ref().map(|tenant| format!("tenant {tenant}")))
                .unwrap_or_else(dash),
            record.instance.as_ref().map_or_else(dash, ToString::to_string),
            record.incarnation.map_or_else(dash, |i| i.to_string()),
            record.revision.map_or_else(dash, |r| r.to_string()),
            record.outcome.clone(),
            detail(record),
        ]);
    }
    let mut text = table.render();
    if let Some(cursor) = &reply.next_cursor {
        text.push_str(&format!("more: repeat with --cursor {cursor}\n"));
    }
    text
}

/// A lease or token, a denial's source and resource, a refusal's or denial's reason, how many
/// requests a denial counts; `-` when there is nothing.
fn detail(record: &AuditRecord) -> String {
    let mut parts = Vec::new();
    if let Some(lease) = record.lease {
        parts.push(format!("lease {lease}"));
    }
    if let Some(accessor) = &record.accessor {
        parts.push(format!("token {accessor}"));
    }
    if let Some(source) = &record.source {
        parts.push(format!("from {source}"));
    }
    if let Some(resource) = &record.resource {
        parts.push(resource.clone());
    }
    if let Some(reason) = &record.reason {
        parts.push(reason.clone());
    }
    // A flood of denials counted as one record (SPEC S4).
    if let Some(count) = record.count.filter(|count| *count > 1) {
        let last = record.last_at_ms.unwrap_or(record.at_ms);
        parts.push(format!("{count} times, the last at {}", utc(last)));
    }
    if parts.is_empty() {
        return "-".to_owned();
    }
    parts.join("; ")
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (the proleptic Gregorian calendar; the
/// days-to-date step is Howard Hinnant's `civil_from_days`).
pub fn utc(unix_ms: u64) -> String {
    let days = (unix_ms / 86_400_000) as i64;
    let in_day = unix_ms % 86_400_000;
    let (hours, minutes, seconds, ms) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{hours:02}:{minutes:02}:{seconds:02}.{ms:03}Z")
}
