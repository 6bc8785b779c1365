//! Decoding the agent's request bodies the way Consul does: keys case-insensitively, so
//! PascalCase bodies (Go's `api` package, npm `consul`) and lower/snake-case ones (py-consul
//! sends `name`, `id`, `checks: [{"ttl": ...}]`, `DeregisterCriticalServiceAfter`,
//! `grpc_use_tls`) read alike.
//!
//! A key is compared with `_` and `-` removed and in lower case (`deregister_critical_service_after`,
//! `DeregisterCriticalServiceAfter` and `deregistercriticalserviceafter` are one field), which
//! is what Consul's decoder accepts too. Unknown fields are ignored: clients send many that
//! Muster has no use for (`EnableTagOverride`, `TaggedAddresses`, `Proxy` defaults). A field
//! given twice under two spellings is refused: the two could disagree. `null` is an absent
//! field, as Go decodes it.
//!
//! What Muster cannot honour is refused with a 400 naming it, never silently dropped: script,
//! Docker, alias, H2PING, UDP and OS-service checks, HTTP checks with another method than GET
//! or with a body, `https` check URLs (through the registry's own check validation), and
//! Connect sidecars or service kinds other than a typical service.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::agent_duration::parse_go_duration;

/// A body the agent API refuses: the message is the 400's plain-text body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BodyError(pub(crate) String);

/// `PUT /v1/agent/service/register`, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Registration {
    /// `Name`: the service.
    pub(crate) name: String,
    /// `ID`: the instance; the name when absent or empty.
    pub(crate) id: Option<String>,
    /// `Tags`.
    pub(crate) tags: Vec<String>,
    /// `Address`; empty is absent.
    pub(crate) address: Option<String>,
    /// `Port`; 0 is absent.
    pub(crate) port: Option<u16>,
    /// `Meta`.
    pub(crate) meta: BTreeMap<String, String>,
    /// `Weights.Passing`.
    pub(crate) weight: Option<u32>,
    /// `Weights.Warning`.
    pub(crate) warning_weight: Option<u32>,
    /// `Check` followed by `Checks`.
    pub(crate) checks: Vec<CheckDefinition>,
    /// `Namespace` (Consul Enterprise): a Muster namespace.
    pub(crate) namespace: Option<String>,
    /// `Partition` (Consul Enterprise): a Muster tenant.
    pub(crate) partition: Option<String>,
}

/// What a check probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckTarget {
    /// `TTL`: the instance reports within it.
    Ttl(Duration),
    /// `HTTP`: a GET of this URL.
    Http(String),
    /// `TCP`: `host:port`.
    Tcp(String),
    /// `GRPC`: `host:port[/service]`.
    Grpc(String),
}

/// One entry of `Check` / `Checks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckDefinition {
    /// `CheckID` (or `ID`).
    pub(crate) check_id: Option<String>,
    /// `Name`.
    pub(crate) name: Option<String>,
    /// `Notes`.
    pub(crate) notes: Option<String>,
    /// `Status`: the initial status (`passing`, `warning`, `critical`).
    pub(crate) status: Option<InitialStatus>,
    /// What is probed.
    pub(crate) target: CheckTarget,
    /// `Interval`.
    pub(crate) interval: Option<Duration>,
    /// `Timeout`.
    pub(crate) timeout: Option<Duration>,
    /// `DeregisterCriticalServiceAfter`.
    pub(crate) deregister_after: Option<Duration>,
    /// `SuccessBeforePassing` (0: the first success passes).
    pub(crate) success_before_passing: u32,
    /// `FailuresBeforeCritical` (0: the first failure is critical).
    pub(crate) failures_before_critical: u32,
}

/// A check's status as Consul names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InitialStatus {
    /// `passing`.
    Passing,
    /// `warning`.
    Warning,
    /// `critical`.
    Critical,
}

impl InitialStatus {
    fn parse(field: &str, text: &str) -> Result<InitialStatus, BodyError> {
        match text {
            "passing" => Ok(InitialStatus::Passing),
            "warning" => Ok(InitialStatus::Warning),
            "critical" => Ok(InitialStatus::Critical),
            other => Err(BodyError(format!(
                "Invalid {field} status: '{other}' (passing, warning or critical)"
            ))),
        }
    }
}

/// `PUT /v1/agent/check/update/<id>`: `{"Status": ..., "Output": ...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckUpdate {
    /// The new status.
    pub(crate) status: InitialStatus,
    /// What the check said (kept as the observation's reason).
    pub(crate) output: String,
}

/// A JSON object's fields under their normalised keys.
struct Fields<'a> {
    /// Where this object is, for messages (`Checks[1]`).
    at: String,
    fields: BTreeMap<String, &'a Value>,
}

/// The normalised form of a key: lower case, without `_` and `-`.
fn normalise(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '_' | '-'))
        .flat_map(char::to_lowercase)
        .collect()
}

impl<'a> Fields<'a> {
    fn new(at: String, object: &'a Map<String, Value>) -> Result<Fields<'a>, BodyError> {
        let mut fields = BTreeMap::new();
        for (key, value) in object {
            if value.is_null() {
                continue;
            }
            if fields.insert(normalise(key), value).is_some() {
                return Err(BodyError(format!(
                    "Request decode failed: {at}: field '{key}' is given twice (keys are case-insensitive)"
                )));
            }
        }
        Ok(Fields { at, fields })
    }

    fn of(at: String, value: &'a Value) -> Result<Fields<'a>, BodyError> {
        match value {
            Value::Object(object) => Fields::new(at, object),
            _ => Err(BodyError(format!("Request decode failed: {at} must be a JSON object"))),
        }
    }

    fn wrong(&self, name: &str, what: &str) -> BodyError {
        let at = if self.at.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.at)
        };
        BodyError(format!("Request decode failed: {at} must be {what}"))
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.fields.get(&normalise(name)).copied()
    }

    /// A string field; an empty string is absent, as Go's `omitempty` treats it.
    fn text(&self, name: &str) -> Result<Option<String>, BodyError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(text)) if text.is_empty() => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(self.wrong(name, "a string")),
        }
    }

    fn unsigned(&self, name: &str) -> Result<Option<u64>, BodyError> {
        match self.get(name) {
            None => Ok(None),
            Some(value) => value
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong(name, "a non-negative integer")),
        }
    }

    fn duration(&self, name: &str) -> Result<Option<Duration>, BodyError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(text)) if text.is_empty() => Ok(None),
            Some(Value::String(text)) => parse_go_duration(text).map(Some).map_err(|why| {
                let at = if self.at.is_empty() {
                    name.to_owned()
                } else {
                    format!("{}.{name}", self.at)
                };
                BodyError(format!("Request decode failed: {at}: {why}"))
            }),
            Some(_) => Err(self.wrong(name, "a duration string such as \"10s\"")),
        }
    }

    fn strings(&self, name: &str) -> Result<Vec<String>, BodyError> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.wrong(name, "a list of strings")),
            Some(_) => Err(self.wrong(name, "a list of strings")),
        }
    }

    fn string_map(&self, name: &str) -> Result<BTreeMap<String, String>, BodyError> {
        match self.get(name) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect::<Option<BTreeMap<_, _>>>()
                .ok_or_else(|| self.wrong(name, "an object of strings")),
            Some(_) => Err(self.wrong(name, "an object of strings")),
        }
    }

    fn present(&self, name: &str) -> bool {
        match self.get(name) {
            None | Some(Value::Bool(false)) => false,
            Some(Value::String(text)) => !text.is_empty(),
            Some(Value::Array(items)) => !items.is_empty(),
            Some(Value::Object(map)) => !map.is_empty(),
            Some(_) => true,
        }
    }
}

fn parse_json(body: &[u8]) -> Result<Value, BodyError> {
    serde_json::from_slice(body).map_err(|e| BodyError(format!("Request decode failed: {e}")))
}

/// Decodes a service registration.
pub(crate) fn registration(body: &[u8]) -> Result<Registration, BodyError> {
    let value = parse_json(body)?;
    let service = Fields::of(String::new(), &value)?;
    let name = service
        .text("Name")?
        .ok_or_else(|| BodyError("Missing service name".into()))?;
    if let Some(kind) = service.text("Kind")? {
        return Err(BodyError(format!(
            "Invalid service kind '{kind}': Muster registers typical services only (no Connect proxies or gateways)"
        )));
    }
    if service.present("Connect") || service.present("Proxy") {
        return Err(BodyError(
            "Invalid service: Connect and Proxy are not supported by Muster".into(),
        ));
    }
    let port = match service.unsigned("Port")? {
        None | Some(0) => None,
        Some(port) => Some(
            u16::try_from(port).map_err(|_| BodyError(format!("Invalid service port {port}: must be 1 to 65535")))?,
        ),
    };
    let (weight, warning_weight) = match service.get("Weights") {
        None => (None, None),
        Some(weights) => {
            let weights = Fields::of("Weights".into(), weights)?;
            let warning = weights
                .unsigned("Warning")?
                .map(|w| u32::try_from(w).unwrap_or(u32::MAX));
            match weights.unsigned("Passing")? {
                None | Some(0) => {
                    return Err(BodyError("Invalid Weights: Passing must be greater than 0".into()));
                }
                Some(passing) => (Some(u32::try_from(passing).unwrap_or(u32::MAX)), warning),
            }
        }
    };
    let mut checks = Vec::new();
    if let Some(check) = service.get("Check") {
        checks.push(check_definition("Check".into(), check)?);
    }
    match service.get("Checks") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                // Go's api sends `"Checks": [null]` for a nil pointer in the list.
                if !item.is_null() {
                    checks.push(check_definition(format!("Checks[{i}]"), item)?);
                }
            }
        }
        Some(_) => return Err(service.wrong("Checks", "a list of checks")),
    }
    Ok(Registration {
        name,
        id: service.text("ID")?,
        tags: service.strings("Tags")?,
        address: service.text("Address")?,
        port,
        meta: service.string_map("Meta")?,
        weight,
        warning_weight,
        checks,
        namespace: service.text("Namespace")?,
        partition: service.text("Partition")?,
    })
}

/// The check kinds Consul has and Muster does not run, by the field that selects them.
const UNSUPPORTED_CHECKS: [(&str, &str); 8] = [
    ("ScriptArgs", "script"),
    ("Args", "script"),
    ("DockerContainerID", "Docker"),
    ("AliasService", "alias"),
    ("AliasNode", "alias"),
    ("H2PING", "H2PING"),
    ("UDP", "UDP"),
    ("OSService", "OS service"),
];

fn check_definition(at: String, value: &Value) -> Result<CheckDefinition, BodyError> {
    let check = Fields::of(at.clone(), value)?;
    let invalid = |why: String| BodyError(format!("Invalid check: {at}: {why}"));
    for (field, kind) in UNSUPPORTED_CHECKS {
        if check.present(field) {
            return Err(invalid(format!(
                "{kind} checks are not supported (Muster runs TTL, HTTP, TCP and gRPC checks)"
            )));
        }
    }
    let mut targets = Vec::new();
    if let Some(ttl) = check.duration("TTL")? {
        targets.push(CheckTarget::Ttl(ttl));
    }
    if let Some(url) = check.text("HTTP")? {
        targets.push(CheckTarget::Http(url));
    }
    if let Some(authority) = check.text("TCP")? {
        targets.push(CheckTarget::Tcp(authority));
    }
    if let Some(authority) = check.text("GRPC")? {
        targets.push(CheckTarget::Grpc(authority));
    }
    let target = match targets.len() {
        0 => return Err(invalid("a check needs one of TTL, HTTP, TCP or GRPC".into())),
        1 => targets.remove(0),
        _ => return Err(invalid("a check has exactly one of TTL, HTTP, TCP or GRPC".into())),
    };
    if matches!(target, CheckTarget::Http(_)) {
        if let Some(method) = check.text("Method")?
            && !method.eq_ignore_ascii_case("GET")
        {
            return Err(invalid(format!("HTTP checks use GET, not {method}")));
        }
        if check.present("Body") {
            return Err(invalid("HTTP checks send no body".into()));
        }
    }
    let threshold = |name: &str| -> Result<u32, BodyError> {
        Ok(check
            .unsigned(name)?
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)))
    };
    Ok(CheckDefinition {
        check_id: match check.text("CheckID")? {
            Some(id) => Some(id),
            None => check.text("ID")?,
        },
        name: check.text("Name")?,
        notes: check.text("Notes")?,
        status: check
            .text("Status")?
            .map(|status| InitialStatus::parse("check", &status))
            .transpose()?,
        interval: check.duration("Interval")?,
        timeout: check.duration("Timeout")?,
        deregister_after: check.duration("DeregisterCriticalServiceAfter")?,
        success_before_passing: threshold("SuccessBeforePassing")?,
        failures_before_critical: threshold("FailuresBeforeCritical")?,
        target,
    })
}

/// Decodes a TTL check update. An empty body is refused: Consul requires the status.
pub(crate) fn check_update(body: &[u8]) -> Result<CheckUpdate, BodyError> {
    let value = parse_json(body)?;
    let update = Fields::of(String::new(), &value)?;
    let status = update
        .text("Status")?
        .ok_or_else(|| BodyError("Invalid check status: '' (passing, warning or critical)".into()))?;
    Ok(CheckUpdate {
        status: InitialStatus::parse("check", &status)?,
        output: update.text("Output")?.unwrap_or_default(),
    })
}

#[cfg(test)]
#[path = "agent_body_tests.rs"]
mod tests;
