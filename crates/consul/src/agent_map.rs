//! A Consul service registration as a Muster endpoint, and back (SPEC E1).
//!
//! | Consul | Muster |
//! |---|---|
//! | `Name` | the service of key `<tenant>/<namespace>/<Name>`: `partition` → tenant, `ns` → namespace (query first, then body, then `[consul]`) |
//! | `ID` (default `Name`) | the instance: the ID itself when it is a DNS label, else [`instance_of`]'s rewrite with label `consul.id` = the ID |
//! | `Address` (empty: the caller's address; `localhost`: 127.0.0.1) | the one address |
//! | `Port` | the port named [`PORT_NAME`], TCP; none when 0 |
//! | `Tags[n]` | label `consul.tag.<n>` (n = 0, 1, ...; read back in numeric order) |
//! | `Meta[k]` | label `k` (Consul's meta keys are `[A-Za-z0-9_-]`, so never `consul.*`) |
//! | `Weights.Passing` (default 1, as Consul's) | the weight |
//! | `Weights.Warning` other than 1 | label `consul.weight.warning` |
//! | `Check`, `Checks[n]` | checks in order: `TTL` → a TTL check, `HTTP` → `http://...`, `TCP` → `tcp://host:port`, `GRPC` → `grpc://host:port[/service]` |
//! | `CheckID`, `Name`, `Notes` of check `n` | labels `consul.check.<n>.id`, `.name`, `.notes` (only when given) |
//! | `SuccessBeforePassing`, `FailuresBeforeCritical` (0: at once) | the check's rise and fall (at least 1) |
//! | `DeregisterCriticalServiceAfter` (the shortest of the checks') | label [`DEREGISTER_AFTER_LABEL`] in ms: `agent_reap` removes the endpoint once it has been critical that long |
//! | every check's `Status` passing (warning) | initial state `ready` (`degraded`); otherwise `starting` until a check passes |
//!
//! A service name (and a namespace or partition) that is not a DNS label (`a-z`, `0-9`, `-`,
//! at most 63 characters, as every Muster name is, SPEC M1) is refused with a 400 that says
//! so: it names the service in DNS, watches and the native API, where a rewritten name would
//! be a surprise. A service ID only names the instance, and Consul clients often build IDs
//! Muster would refuse (`web:10.0.0.1:80`, `Web-1`, `_nomad-task-...`), so an ID that is not
//! a label is rewritten ([`instance_of`]: lower case, other characters `-`, and a hash of
//! the original so two IDs never meet) and kept verbatim in `consul.id`. The rewrite is a
//! function of the ID alone, so `deregister/<id>` and `service:<id>` find the instance again
//! without a table.
//!
//! Default check ids are Consul's: `service:<ID>` for one check, `service:<ID>:<n>` (n from
//! 1) for several. Rendering back ([`tags`], [`meta`], [`check_ids`]) reads the same labels.

use std::collections::BTreeMap;
use std::time::Duration;

use muster_core::{
    AddressSpec, CheckSpec, Endpoint, EndpointSpec, InstanceId, Label, PortSpec, Protocol, ServiceKey, ServingState,
};

use super::agent_body::{BodyError, CheckDefinition, CheckTarget, InitialStatus, Registration};

/// The name of a Consul registration's port (a DNS label: `_default._tcp.<service>...` in SRV).
pub(crate) const PORT_NAME: &str = "default";
/// Tags are labels `consul.tag.0`, `consul.tag.1`, ...
pub(crate) const TAG_PREFIX: &str = "consul.tag.";
/// The label holding a service ID that is not the instance id.
pub(crate) const ID_LABEL: &str = "consul.id";
/// The label holding `Weights.Warning` when it is not 1.
pub(crate) const WARNING_WEIGHT_LABEL: &str = "consul.weight.warning";
/// Every label this adapter writes but Meta starts so.
pub(crate) const CONSUL_PREFIX: &str = "consul.";
/// The longest rewritten ID's readable part: 63 (a DNS label) less `-` and eight hex digits.
const REWRITTEN_PREFIX_LEN: usize = 54;
/// How long an endpoint may be critical before it is deregistered, in ms.
pub(crate) const DEREGISTER_AFTER_LABEL: &str = "consul.deregister-critical-after-ms";
/// Consul's default weight (`Weights.Passing` 1): unweighted services balance evenly.
const CONSUL_DEFAULT_WEIGHT: u32 = 1;

/// Where a Consul request lands when it names no `partition` or `ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The tenant.
    pub(crate) tenant: String,
    /// The namespace.
    pub(crate) namespace: String,
}

/// A registration in Muster's terms: the command's key, instance and record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapped {
    /// The service.
    pub(crate) key: ServiceKey,
    /// The instance (the Consul ID).
    pub(crate) instance: InstanceId,
    /// The record.
    pub(crate) spec: EndpointSpec,
}

fn refused(message: String) -> BodyError {
    BodyError(message)
}

/// The key and instance a Consul service name and ID name.
pub(crate) fn key_of(place: &Placement, name: &str) -> Result<ServiceKey, BodyError> {
    let label = |what: &str, value: &str| {
        Label::new(what, value).map_err(|_| {
            refused(format!(
                "Invalid {what} '{}': Muster names are DNS labels (a-z, 0-9 and '-', 1 to 63 characters, \
                 not starting or ending with '-')",
                value.escape_debug()
            ))
        })
    };
    Ok(ServiceKey {
        tenant: label("partition", &place.tenant)?,
        namespace: label("namespace", &place.namespace)?,
        service: label("service name", name)?,
    })
}

/// The instance a Consul service ID names: the ID when it is a valid instance id, else a
/// rewrite (lower case, every other character `-`, at most 54 of them, then `-` and the
/// ID's 32-bit FNV-1a hash in hex). The second value says whether it was rewritten.
pub(crate) fn instance_of(id: &str) -> Result<(InstanceId, bool), BodyError> {
    if let Ok(instance) = InstanceId::new(id) {
        return Ok((instance, false));
    }
    if id.is_empty() || id.len() > 512 || id.chars().any(char::is_control) {
        return Err(refused(format!(
            "Invalid service ID '{}': must be 1 to 512 characters without control characters",
            id.escape_debug()
        )));
    }
    let mut readable: String = id
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .take(REWRITTEN_PREFIX_LEN)
        .collect();
    readable = readable.trim_matches('-').to_owned();
    if readable.is_empty() {
        readable.push_str("id");
    }
    let rewritten = format!("{readable}-{:08x}", fnv1a(id.as_bytes()));
    let instance = InstanceId::new(&rewritten).expect("a rewritten id is a DNS label");
    Ok((instance, true))
}

/// 32-bit FNV-1a: stable across builds and platforms, which the rewrite must be (a
/// `deregister/<id>` months later has to find the same instance).
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    })
}

/// Maps a registration; `caller` is the address used when it names none. `place` is where
/// the request's query put it (the body's `Namespace` and `Partition` apply when it did not).
pub(crate) fn map(
    registration: &Registration,
    place: &Placement,
    query_named: (bool, bool),
    caller: std::net::IpAddr,
) -> Result<Mapped, BodyError> {
    let (tenant_named, namespace_named) = query_named;
    let place = Placement {
        tenant: match &registration.partition {
            Some(partition) if !tenant_named => partition.clone(),
            _ => place.tenant.clone(),
        },
        namespace: match &registration.namespace {
            Some(namespace) if !namespace_named => namespace.clone(),
            _ => place.namespace.clone(),
        },
    };
    let key = key_of(&place, &registration.name)?;
    let id = registration.id.as_deref().unwrap_or(&registration.name);
    let (instance, rewritten) = instance_of(id)?;
    let ip = match registration.address.as_deref() {
        None => caller.to_string(),
        Some("localhost") => "127.0.0.1".to_owned(),
        Some(address) => address.to_owned(),
    };
    let mut labels = BTreeMap::new();
    if rewritten {
        labels.insert(ID_LABEL.to_owned(), id.to_owned());
    }
    for (i, tag) in registration.tags.iter().enumerate() {
        labels.insert(format!("{TAG_PREFIX}{i}"), tag.clone());
    }
    for (k, v) in &registration.meta {
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')) {
            return Err(refused(format!(
                "Invalid meta key '{}': keys hold only letters, digits, '_' and '-'",
                k.escape_debug()
            )));
        }
        labels.insert(k.clone(), v.clone());
    }
    if let Some(warning) = registration.warning_weight.filter(|w| *w != 1) {
        labels.insert(WARNING_WEIGHT_LABEL.to_owned(), warning.to_string());
    }
    let mut checks = Vec::with_capacity(registration.checks.len());
    for (n, check) in registration.checks.iter().enumerate() {
        checks.push(check_spec(check));
        for (field, value) in [("id", &check.check_id), ("name", &check.name), ("notes", &check.notes)] {
            if let Some(value) = value {
                labels.insert(format!("consul.check.{n}.{field}"), value.clone());
            }
        }
    }
    if let Some(after) = registration.checks.iter().filter_map(|c| c.deregister_after).min() {
        labels.insert(DEREGISTER_AFTER_LABEL.to_owned(), millis(after).to_string());
    }
    Ok(Mapped {
        key,
        instance,
        spec: EndpointSpec {
            addresses: vec![AddressSpec { ip, scope: None }],
            ports: registration
                .port
                .map(|port| PortSpec {
                    name: PORT_NAME.to_owned(),
                    port,
                    protocol: Protocol::Tcp,
                })
                .into_iter()
                .collect(),
            serving: initial_serving(&registration.checks),
            weight: Some(registration.weight.unwrap_or(CONSUL_DEFAULT_WEIGHT)),
            labels,
            checks,
            ..EndpointSpec::default()
        },
    })
}

/// Whole milliseconds, at least 1 for a positive duration (the registry's unit).
fn millis(duration: Duration) -> u64 {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 && !duration.is_zero() { 1 } else { ms }
}

/// A Consul check as a Muster check. Consul's thresholds count from 0 (the first result
/// decides); Muster's from 1. A timeout longer than the interval is cut to the interval:
/// Consul allows it, Muster never lets probes pile up.
fn check_spec(check: &CheckDefinition) -> CheckSpec {
    let rise = Some(check.success_before_passing.max(1));
    let fall = Some(check.failures_before_critical.max(1));
    if let CheckTarget::Ttl(ttl) = &check.target {
        return CheckSpec {
            ttl_ms: Some(millis(*ttl)),
            rise,
            fall,
            ..CheckSpec::default()
        };
    }
    let url = match &check.target {
        CheckTarget::Http(url) => url.clone(),
        CheckTarget::Tcp(authority) => format!("tcp://{authority}"),
        CheckTarget::Grpc(target) => format!("grpc://{target}"),
        CheckTarget::Ttl(_) => unreachable!("returned above"),
    };
    let interval = check.interval.map(millis);
    let timeout = match (check.timeout.map(millis), interval) {
        (Some(timeout), Some(interval)) => Some(timeout.min(interval)),
        (timeout, _) => timeout,
    };
    CheckSpec {
        url: Some(url),
        interval_ms: interval,
        timeout_ms: timeout,
        rise,
        fall,
        ..CheckSpec::default()
    }
}

/// `ready` when every check says it starts passing, `degraded` when the worst is warning;
/// otherwise the registry's default (`starting` with checks, `ready` without).
fn initial_serving(checks: &[CheckDefinition]) -> Option<ServingState> {
    if checks.is_empty() {
        return None;
    }
    let statuses: Option<Vec<InitialStatus>> = checks.iter().map(|c| c.status).collect();
    match statuses?.as_slice() {
        all if all.iter().all(|s| *s == InitialStatus::Passing) => Some(ServingState::Ready),
        all if !all.contains(&InitialStatus::Critical) => Some(ServingState::Degraded),
        _ => None,
    }
}

/// The endpoint's tags, in order.
pub(crate) fn tags(endpoint: &Endpoint) -> Vec<String> {
    let mut tags: Vec<(usize, &str)> = endpoint
        .labels
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(TAG_PREFIX)?.parse().ok()?, v)))
        .collect();
    tags.sort_unstable();
    tags.into_iter().map(|(_, v)| v.to_owned()).collect()
}

/// The endpoint's Meta: every label outside `consul.*` (a native registration's too).
pub(crate) fn meta(endpoint: &Endpoint) -> BTreeMap<String, String> {
    endpoint
        .labels
        .iter()
        .filter(|(k, _)| !k.starts_with(CONSUL_PREFIX))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The endpoint's Consul service ID: `consul.id`, else the instance id.
pub(crate) fn service_id(endpoint: &Endpoint) -> &str {
    endpoint.labels.get(ID_LABEL).unwrap_or(endpoint.instance.as_str())
}

/// A check's Consul label (`id`, `name` or `notes`).
pub(crate) fn check_label<'a>(endpoint: &'a Endpoint, n: usize, field: &str) -> Option<&'a str> {
    endpoint.labels.get(&format!("consul.check.{n}.{field}"))
}

/// The Consul check ids of an endpoint's checks, in order.
pub(crate) fn check_ids(endpoint: &Endpoint) -> Vec<String> {
    let id = service_id(endpoint);
    let count = endpoint.checks.len();
    (0..count)
        .map(|n| match check_label(endpoint, n, "id") {
            Some(custom) => custom.to_owned(),
            None => super::status::check_id(id, n, count),
        })
        .collect()
}

/// How long the endpoint may be critical before it is deregistered.
pub(crate) fn deregister_after(endpoint: &Endpoint) -> Option<Duration> {
    endpoint
        .labels
        .get(DEREGISTER_AFTER_LABEL)
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
}

#[cfg(test)]
#[path = "agent_map_tests.rs"]
mod tests;
