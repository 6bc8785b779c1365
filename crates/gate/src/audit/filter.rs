//! The filters and the cursor of `GET /v1/audit`, parsed from [`AuditQuery`] (every mistake a
//! message naming the parameter) and matched against records.

use muster_core::api::{AuditQuery, AuditRecord};
use muster_core::{Label, NamespaceKey, ServiceKey};

/// Records a page holds when the query names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;

/// The most records one page holds (a larger `limit` gets this many): a page of 1,000 records
/// is a few hundred KiB of JSON, and the ring's lock is held while it is copied.
pub const MAX_LIMIT: usize = 1000;

/// What a record must be to be listed: every filter given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    tenant: Option<Label>,
    principal: Option<String>,
    key: Option<KeyFilter>,
    outcome: Option<OutcomeFilter>,
    since_ms: Option<u64>,
    until_ms: Option<u64>,
}

/// A service exactly, or every service of a namespace (matched on the key's text,
/// `tenant/namespace/service`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyFilter {
    Service(String),
    /// `tenant/namespace/`.
    NamespacePrefix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum OutcomeFilter {
    /// `applied`, or a kind with its colon: `unchanged:`, `refused:`, `denied:`.
    Kind(&'static str),
    Exact(String),
}

/// Where a page continues: below `before`, in the log started as `epoch`. Text:
/// `<epoch>.<before>`; clients treat it as opaque.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The log's start, so a cursor of a restarted node's log is refused, not misread.
    pub epoch: u64,
    /// The sequence number the page continues below.
    pub before: u64,
}

impl Cursor {
    /// The cursor as text.
    pub fn encode(self) -> String {
        format!("{}.{}", self.epoch, self.before)
    }

    /// A cursor from its text; `None` when it is malformed.
    pub fn decode(text: &str) -> Option<Cursor> {
        let (epoch, before) = text.split_once('.')?;
        let number = |part: &str| {
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse().ok())
                .flatten()
        };
        Some(Cursor {
            epoch: number(epoch)?,
            before: number(before)?,
        })
    }
}

/// A query, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Which records match.
    pub filter: AuditFilter,
    /// Where the page continues, if not at the newest record.
    pub cursor: Option<Cursor>,
    /// At most this many records.
    pub limit: usize,
}

/// Why a query cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// A parameter is malformed (400 `bad_request`); the message names it.
    Malformed(String),
    /// The caller may see only `scope`'s records and asked for another tenant's (403
    /// `permission_denied`).
    OtherTenant(String),
}

impl Parsed {
    /// Parses `query`; with a `scope` (a tenant admin's own tenant), only that tenant's records
    /// are listed, and asking for another tenant's is refused.
    pub fn new(query: &AuditQuery, scope: Option<&Label>) -> Result<Parsed, QueryError> {
        let malformed = |message: String| QueryError::Malformed(message);
        let tenant = query
            .tenant
            .as_deref()
            .map(|text| Label::new("tenant", text).map_err(|r| malformed(format!("tenant: {r}"))))
            .transpose()?;
        let key = query.key.as_deref().map(parse_key).transpose().map_err(malformed)?;
        let outcome = query
            .outcome
            .as_deref()
            .map(parse_outcome)
            .transpose()
            .map_err(malformed)?;
        let principal = query.principal.clone();
        if let (Some(since), Some(until)) = (query.since_ms, query.until_ms)
            && until <= since
        {
            return Err(malformed(format!("until_ms: {until} is not after since_ms {since}")));
        }
        let cursor = query
            .cursor
            .as_deref()
            .map(|text| {
                Cursor::decode(text).ok_or_else(|| {
                    malformed(format!(
                        "cursor: '{}' is not a cursor from this server",
                        text.escape_debug()
                    ))
                })
            })
            .transpose()?;
        let limit = match query.limit {
            None => DEFAULT_LIMIT,
            Some(0) => return Err(malformed("limit: must be at least 1".into())),
            Some(limit) => limit.min(MAX_LIMIT),
        };
        let key_tenant = key.as_ref().map(|(tenant, _)| tenant.clone());
        let tenant = match scope {
            None => tenant,
            Some(scope) => {
                for asked in [&tenant, &key_tenant].into_iter().flatten() {
                    if asked != scope {
                        return Err(QueryError::OtherTenant(format!(
                            "this caller may read the audit records of tenant '{scope}' only, not '{asked}'"
                        )));
                    }
                }
                Some(scope.clone())
            }
        };
        Ok(Parsed {
            filter: AuditFilter {
                tenant,
                principal,
                key: key.map(|(_, key)| key),
                outcome,
                since_ms: query.since_ms,
                until_ms: query.until_ms,
            },
            cursor,
            limit,
        })
    }
}

/// `tenant/namespace` or `tenant/namespace/service`, each part a valid name.
fn parse_key(text: &str) -> Result<(Label, KeyFilter), String> {
    let invalid = |why: String| format!("key: '{}': {why}", text.escape_debug());
    match text.split('/').collect::<Vec<_>>()[..] {
        [tenant, namespace] => {
            let key = NamespaceKey::new(tenant, namespace).map_err(|r| invalid(r.to_string()))?;
            Ok((key.tenant.clone(), KeyFilter::NamespacePrefix(format!("{key}/"))))
        }
        [tenant, namespace, service] => {
            let key = ServiceKey::new(tenant, namespace, service).map_err(|r| invalid(r.to_string()))?;
            Ok((key.tenant.clone(), KeyFilter::Service(key.to_string())))
        }
        _ => Err(invalid(
            "expected tenant/namespace/service, or tenant/namespace for every service of a namespace".into(),
        )),
    }
}

fn parse_outcome(text: &str) -> Result<OutcomeFilter, String> {
    const KINDS: [(&str, &str); 4] = [
        ("applied", "applied"),
        ("unchanged", "unchanged:"),
        ("refused", "refused:"),
        ("denied", "denied:"),
    ];
    if let Some((_, kind)) = KINDS.iter().find(|(name, _)| *name == text) {
        return Ok(OutcomeFilter::Kind(kind));
    }
    let exact = KINDS[1..]
        .iter()
        .any(|(_, kind)| text.strip_prefix(kind).is_some_and(|code| !code.is_empty()));
    if exact {
        return Ok(OutcomeFilter::Exact(text.to_owned()));
    }
    Err(format!(
        "outcome: '{}': expected applied, unchanged, refused or denied, or one outcome such as refused:stale_incarnation",
        text.escape_debug()
    ))
}

impl AuditFilter {
    /// Whether `record` passes every filter.
    pub fn admits(&self, record: &AuditRecord) -> bool {
        let tenant = self.tenant.as_ref().is_none_or(|t| record.tenant.as_ref() == Some(t));
        let principal = self
            .principal
            .as_ref()
            .is_none_or(|p| record.principal.as_ref() == Some(p));
        let key = self.key.as_ref().is_none_or(|filter| {
            record.key.as_deref().is_some_and(|key| match filter {
                KeyFilter::Service(service) => key == service,
                KeyFilter::NamespacePrefix(prefix) => key.starts_with(prefix.as_str()),
            })
        });
        let outcome = self.outcome.as_ref().is_none_or(|filter| match filter {
            OutcomeFilter::Kind("applied") => record.outcome == "applied",
            OutcomeFilter::Kind(prefix) => record.outcome.starts_with(prefix),
            OutcomeFilter::Exact(outcome) => record.outcome == *outcome,
        });
        // A counted denial spans `at_ms..=last_at_ms`: it matches a window it overlaps, so a
        // shipper polling `since_ms` sees a record still counting.
        let last = record.last_at_ms.map_or(record.at_ms, |last| last.max(record.at_ms));
        let since = self.since_ms.is_none_or(|since| last >= since);
        let until = self.until_ms.is_none_or(|until| record.at_ms < until);
        tenant && principal && key && outcome && since && until
    }
}
