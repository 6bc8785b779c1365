//! Human output for every reply and watch frame. Pure functions of the data, so the tests
//! check them on fixed records; `--json` bypasses all of this and prints the API's JSON.

use muster_core::api::{
    ClusterReply, Frame, LeaseReply, PolicyReply, ServicesReply, SnapshotReply, StatusReply, WriteReply,
};
use muster_core::federation::{FailoverDecision, FederationStatusReply, MirrorState};
use muster_core::{Endpoint, Event, NamespaceKey, Revision, ServiceKey, ServiceUpdate};
use muster_registry::RegistryConfig;

use crate::duration::format_millis;
use crate::error::CliError;
use crate::table::Table;

/// How many endpoints a watch's one-line snapshot names before summarising the rest: enough
/// for a small service at a glance, short enough to stay one terminal line.
const SNAPSHOT_NAMES: usize = 8;

/// The snapshot restricted to the endpoints eligible for new work (SPEC M3): `ready`, and
/// `degraded` when `accept_degraded`. `total` and `digest` still describe the whole set.
pub fn eligible_only(mut reply: SnapshotReply, accept_degraded: bool) -> SnapshotReply {
    reply
        .endpoints
        .retain(|endpoint| endpoint.serving.is_eligible(accept_degraded));
    for mirror in &mut reply.mirrors {
        mirror
            .endpoints
            .retain(|endpoint| endpoint.serving.is_eligible(accept_degraded));
    }
    reply
}

/// `muster resolve`: the table and a one-line summary. `all` adds state and reason columns.
pub fn resolve_text(key: &ServiceKey, reply: &SnapshotReply, all: bool) -> String {
    let shown = reply.endpoints.len();
    let summary = if all {
        format!("{key}: {} at revision {}", count(shown, "endpoint"), reply.revision)
    } else {
        format!(
            "{key}: {shown} eligible of {} at revision {}",
            count(reply.total, "endpoint"),
            reply.revision
        )
    };
    let summary = if reply.protection_active {
        format!(
            "{summary}\nprotection_active: self-preservation holds removals from this service \
             (too many endpoints leaving at once); some listed endpoints may be down"
        )
    } else {
        summary
    };
    let local = if shown == 0 {
        format!("{summary}\n")
    } else {
        format!("{}{summary}\n", endpoints_table(&reply.endpoints, all).render())
    };
    let mut text = local;
    for mirror in &reply.mirrors {
        text.push_str(&format!(
            "\nmirrored from region {} ({}): {} of {} at source revision {}, {}, heard from {} ago\n",
            mirror.source_region,
            mirror.import,
            count(mirror.endpoints.len(), "endpoint"),
            mirror.total,
            mirror.source_revision,
            mirror_state(mirror.state),
            format_millis(mirror.age_ms),
        ));
        if !mirror.endpoints.is_empty() {
            text.push_str(&endpoints_table(&mirror.endpoints, all).render());
        }
    }
    if let Some(decision) = &reply.failover {
        text.push_str(&format!("\n{}\n", failover_line(decision)));
    }
    text
}

fn mirror_state(state: MirrorState) -> &'static str {
    match state {
        MirrorState::Available => "available",
        MirrorState::Unavailable => "unavailable (past its stale budget)",
    }
}

/// One line for a failover decision: where traffic goes and why.
fn failover_line(decision: &FailoverDecision) -> String {
    let local = format!(
        "{} of {} local eligible, {} required",
        decision.local_eligible, decision.local_total, decision.required
    );
    let judged: Vec<String> = decision
        .candidates
        .iter()
        .map(|c| format!("{} {} (capacity {})", c.region, snake(&c.verdict), c.capacity))
        .collect();
    let judged = if judged.is_empty() {
        String::new()
    } else {
        format!("; {}", judged.join(", "))
    };
    match &decision.region {
        Some(region) if decision.spill => format!(
            "failover: {}% of traffic to region {region} ({}: {local}{judged})",
            decision.share_percent,
            snake(&decision.reason)
        ),
        _ => format!("failover: none ({}: {local}{judged})", snake(&decision.reason)),
    }
}

/// A unit enum's wire spelling.
fn snake(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `muster federation status`.
pub fn federation_text(reply: &FederationStatusReply) -> String {
    let mut table = Table::new(vec![
        "PEER",
        "IMPORT",
        "STATE",
        "CURSOR",
        "AGE",
        "LAG",
        "CONNECTED",
        "SERVICES",
        "ENDPOINTS",
    ]);
    for peer in &reply.peers {
        for import in &peer.imports {
            table.row(vec![
                peer.name.to_string(),
                import.import.clone(),
                mirror_state(import.state)
                    .split(' ')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                import.cursor.to_string(),
                import.age_ms.map_or_else(|| "never".to_owned(), format_millis),
                match (import.lag_revisions, import.lag_ms) {
                    (Some(revisions), Some(ms)) => format!("{revisions} rev, {}", format_millis(ms)),
                    _ => "-".to_owned(),
                },
                import
                    .connected
                    .map_or_else(|| "-".to_owned(), |c| if c { "yes" } else { "no" }.to_owned()),
                import.services.len().to_string(),
                import.services.iter().map(|s| s.endpoints).sum::<usize>().to_string(),
            ]);
        }
    }
    let mut text = format!(
        "region {} ({}; stale budget {})\n{}",
        reply.region,
        if reply.leader {
            "leader: runs the mirrors"
        } else {
            "follower: lag and connection are known on the leader"
        },
        format_millis(reply.stale_budget_ms),
        table.render()
    );
    for decision in &reply.decisions {
        text.push_str(&format!(
            "{}: {}\n",
            decision.service,
            failover_line(&decision.decision)
        ));
    }
    text
}

/// The endpoints as a table; `all` adds the serving state and who set it, why.
pub fn endpoints_table(endpoints: &[Endpoint], all: bool) -> Table {
    let mut headers = vec!["INSTANCE", "INCARNATION"];
    if all {
        headers.push("STATE");
    }
    headers.extend(["ADDRESSES", "PORTS", "LOCALITY", "WEIGHT", "LEASE", "REVISION"]);
    if all {
        headers.push("REASON");
    }
    let mut table = Table::new(headers);
    for endpoint in endpoints {
        let mut cells = vec![endpoint.instance.to_string(), endpoint.incarnation.to_string()];
        if all {
            cells.push(state_name(endpoint));
        }
        cells.extend([
            addresses(endpoint),
            ports(endpoint),
            locality(endpoint),
            endpoint.weight.to_string(),
            endpoint.lease.map_or_else(|| "-".to_owned(), |lease| lease.to_string()),
            endpoint.revision.to_string(),
        ]);
        if all {
            cells.push(observation(endpoint));
        }
        table.row(cells);
    }
    table
}

/// `muster services`: the table and a one-line summary.
pub fn services_text(namespace: &NamespaceKey, reply: &ServicesReply) -> String {
    let summary = format!(
        "{namespace}: {} at revision {}",
        count(reply.services.len(), "service"),
        reply.revision
    );
    if reply.services.is_empty() {
        return format!("{summary}\n");
    }
    let mut table = Table::new(["SERVICE", "ENDPOINTS", "REVISION", "DIGEST"]);
    for service in &reply.services {
        table.row([
            service.service.to_string(),
            service.endpoints.to_string(),
            service.revision.to_string(),
            service.digest.to_string(),
        ]);
    }
    format!("{}{summary}\n", table.render())
}

/// A write's outcome: `"{what} at revision R"` and the lease; when nothing changed, why.
pub fn write_text(what: &str, reply: &WriteReply) -> String {
    let mut text = what.to_owned();
    if let Some(unchanged) = &reply.unchanged {
        text.push_str(&format!(": unchanged ({unchanged}{})", unchanged_hint(unchanged)));
    }
    text.push_str(&format!(" at revision {}", reply.revision));
    if let Some(lease) = &reply.lease {
        text.push_str(&format!("; {}", lease_text(lease)));
    }
    text.push('\n');
    text
}

/// `muster lease grant`: `granted lease 7 (ttl 10s, ...) at revision R`.
pub fn grant_text(reply: &WriteReply) -> String {
    match &reply.lease {
        Some(lease) => format!("granted {} at revision {}\n", lease_text(lease), reply.revision),
        None => write_text("granted a lease", reply),
    }
}

/// Why a write that changed nothing did so, for people.
fn unchanged_hint(code: &str) -> &'static str {
    match code {
        "already_committed" => ": a retry of a write that was already committed",
        "drain_held" => ": the drain holds; its owner lifts it (an owner-role token, or --actor owner with auth off)",
        "nothing_to_expire" => ": nothing was due",
        _ => "",
    }
}

/// A lease: `lease 7 (ttl 10s, expires 2026-11-30T06:03:40.599Z unless renewed)`.
pub fn lease_text(lease: &LeaseReply) -> String {
    format!(
        "lease {} (ttl {}, expires {} unless renewed)",
        lease.id,
        format_millis(lease.ttl_ms),
        utc(lease.deadline_unix_ms)
    )
}

/// Unix milliseconds as an RFC 3339 UTC time, `1970-01-01T00:00:00.000Z`. Computed from the
/// number alone (no clock, no time-zone database): Howard Hinnant's `civil_from_days`.
pub fn utc(unix_ms: u64) -> String {
    let (days, ms_of_day) = (unix_ms / 86_400_000, unix_ms % 86_400_000);
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    let (hours, minutes) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
    let (seconds, millis) = (ms_of_day / 1_000 % 60, ms_of_day % 1_000);
    format!("{year:04}-{month:02}-{day:02}T{hours:02}:{minutes:02}:{seconds:02}.{millis:03}Z")
}

/// `1 endpoint`, `2 endpoints`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `muster status`.
pub fn status_text(server: &str, status: &StatusReply) -> String {
    let leader = status
        .leader
        .map_or_else(|| "unknown".to_owned(), |leader| leader.to_string());
    let mut table = Table::new(["SERVER", "READY", "NODE", "LEADER", "REVISION", "APPLIED", "UPTIME"]);
    table.row([
        server.to_owned(),
        status.ready.to_string(),
        status.node_id.to_string(),
        leader,
        status.revision.to_string(),
        status.applied_index.to_string(),
        format_millis(status.uptime_ms / 1_000 * 1_000),
    ]);
    let mut text = table.render();
    if let Some(policy) = status.policy.as_ref().filter(|p| !p.matches_config) {
        text.push_str(&format!(
            "The registry policy (revision {}) differs from this node's config file in: {}. \
             The replicated policy is in force (muster policy show).\n",
            policy.revision,
            policy.differences.join(", ")
        ));
    }
    text
}

/// `muster policy show`: the policy as TOML in the shape of the config file's `[registry]`
/// section, so it can be saved, edited and given back to `muster policy set --file`.
pub fn policy_text(server: &str, reply: &PolicyReply<RegistryConfig>) -> Result<String, CliError> {
    let body = toml::to_string(&reply.policy)
        .map_err(|err| CliError::usage("internal", format!("cannot encode the policy: {err}")))?;
    Ok(format!(
        "# The registry policy of {server}, in force since revision {}.\n{body}",
        reply.revision
    ))
}

/// `muster cluster status`: one row per member, the leader marked.
pub fn cluster_text(server: &str, reply: &ClusterReply) -> String {
    let mut table = Table::new(["NODE", "ADDRESS", "ROLE", "LEADER"]);
    for member in &reply.members {
        table.row([
            member.id.to_string(),
            member.addr.clone(),
            if member.voter { "voter" } else { "learner" }.to_owned(),
            if reply.leader == Some(member.id) { "*" } else { "" }.to_owned(),
        ]);
    }
    let leader = reply
        .leader
        .map_or_else(|| "no leader known".to_owned(), |id| format!("leader {id}"));
    format!("{}{server}: node {}, {leader}\n", table.render(), reply.node_id)
}

/// A watch frame as one line (without newline): `rev 12 update prod/api: ...`.
pub fn frame_line(frame: &Frame) -> String {
    match frame {
        Frame::Snapshot { revision, snapshot } => {
            let mut names: Vec<String> = snapshot
                .iter()
                .take(SNAPSHOT_NAMES)
                .map(|e| format!("{}#{} {}", e.instance, e.incarnation, state_name(e)))
                .collect();
            if snapshot.len() > SNAPSHOT_NAMES {
                names.push(format!("and {} more", snapshot.len() - SNAPSHOT_NAMES));
            }
            let list = if names.is_empty() {
                String::new()
            } else {
                format!(": {}", names.join(", "))
            };
            format!(
                "rev {revision} snapshot {}: {} (service at revision {}){list}",
                snapshot.key(),
                count(snapshot.len(), "endpoint"),
                snapshot.revision()
            )
        }
        Frame::Update(update) => update_line(update),
        Frame::Progress { revision } => format!("rev {revision} progress"),
        Frame::Error { error, revision } => format!("rev {revision} error {}: {}", error.code, error.message),
        Frame::Resync { revision } => format!("rev {revision} resync"),
        Frame::Closing { revision } => format!("rev {revision} closing"),
    }
}

/// The line a watch of `key` starts with when the server holds nothing of it: an empty
/// snapshot, saying it is not registered (a typo looks like this too).
pub fn unknown_line(key: &ServiceKey, revision: Revision) -> String {
    format!(
        "rev {revision} snapshot {key}: 0 endpoints (not registered: nothing of this service is held; \
         its first registration shows here)"
    )
}

fn update_line(update: &ServiceUpdate) -> String {
    let events: Vec<String> = update
        .events
        .iter()
        .map(|event| match event {
            Event::Put { endpoint } => format!(
                "put {}#{} {} [{}]",
                endpoint.instance,
                endpoint.incarnation,
                state_name(endpoint),
                observation(endpoint)
            ),
            Event::Delete {
                instance,
                incarnation,
                reason,
            } => format!("delete {instance}#{incarnation} {}", wire_name(reason)),
        })
        .collect();
    format!(
        "rev {} update {} (after {}): {}",
        update.revision,
        update.key,
        update.prev_revision,
        events.join("; ")
    )
}

/// A serde enum's wire name (`not_serving`, `lease_expired`): the names users type and see.
pub fn wire_name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "?".to_owned(),
    }
}

fn state_name(endpoint: &Endpoint) -> String {
    wire_name(&endpoint.serving)
}

fn observation(endpoint: &Endpoint) -> String {
    let seen = &endpoint.observation;
    let who = format!("{} {}", wire_name(&seen.actor), seen.principal);
    if seen.reason.is_empty() {
        who
    } else {
        format!("{who}: {}", seen.reason)
    }
}

fn addresses(endpoint: &Endpoint) -> String {
    let list: Vec<String> = endpoint
        .addresses
        .iter()
        .map(|address| match &address.scope {
            Some(scope) => format!("{}@{scope}", address.ip),
            None => address.ip.to_string(),
        })
        .collect();
    list.join(",")
}

fn ports(endpoint: &Endpoint) -> String {
    if endpoint.ports.is_empty() {
        return "-".to_owned();
    }
    let list: Vec<String> = endpoint
        .ports
        .iter()
        .map(|port| {
            let protocol = wire_name(&port.protocol);
            if protocol == port.name.as_str() {
                format!("{}:{}", port.name, port.port)
            } else {
                format!("{}:{}/{protocol}", port.name, port.port)
            }
        })
        .collect();
    list.join(",")
}

fn locality(endpoint: &Endpoint) -> String {
    let place = &endpoint.locality;
    let parts: Vec<&str> = [&place.region, &place.zone, &place.sub_zone]
        .into_iter()
        .flatten()
        .map(|label| label.as_str())
        .collect();
    let mut text = if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join("/")
    };
    if place.priority > 0 {
        text.push_str(&format!(" p{}", place.priority));
    }
    text
}
