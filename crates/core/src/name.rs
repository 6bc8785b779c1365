//! Names: DNS labels and the typed keys built from them (SPEC M1).
//!
//! Every name that can end up in a DNS question (tenant, namespace, service, instance, port
//! name, locality) is an RFC 1123 label: 1 to 63 characters of `a-z`, `0-9` and `-`, not
//! starting or ending with `-`. Upper case is rejected rather than folded, so that
//! `Payments` and `payments` can never silently become one service.

use std::fmt;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use crate::Rejection;

/// One validated DNS label. Cheap to clone: up to 23 bytes inline, longer ones shared.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "SmolStr", into = "SmolStr")]
pub struct Label(SmolStr);

impl Label {
    /// RFC 1035: a label holds at most 63 octets.
    pub const MAX_LEN: usize = 63;

    /// Validates `value` as a DNS label of at most [`Label::MAX_LEN`] characters;
    /// `field` names it in the error.
    pub fn new(field: &str, value: &str) -> Result<Label, Rejection> {
        Label::with_max_len(field, value, Label::MAX_LEN)
    }

    /// Validates `value` as a DNS label of at most `max_len` characters.
    pub fn with_max_len(field: &str, value: &str, max_len: usize) -> Result<Label, Rejection> {
        if value.is_empty() || value.len() > max_len {
            return Err(Rejection::invalid_name(
                field,
                format!("must be 1 to {max_len} characters, got {}", value.len()),
            ));
        }
        if let Some(bad) = value.chars().find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-')) {
            return Err(Rejection::invalid_name(
                field,
                format!(
                    "'{}' may hold only a-z, 0-9 and '-', found {bad:?}",
                    value.escape_debug()
                ),
            ));
        }
        if value.starts_with('-') || value.ends_with('-') {
            return Err(Rejection::invalid_name(
                field,
                format!("'{value}' must not start or end with '-'"),
            ));
        }
        Ok(Label(SmolStr::new(value)))
    }

    /// The label's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<SmolStr> for Label {
    type Error = Rejection;
    fn try_from(value: SmolStr) -> Result<Self, Self::Error> {
        Label::new("label", &value)
    }
}

impl From<Label> for SmolStr {
    fn from(label: Label) -> SmolStr {
        label.0
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The stable identity of one scheduled workload (a pod name, a VM id), a DNS label because
/// it names the SRV target `<instance>.<service>.<namespace>.<domain>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InstanceId(Label);

impl InstanceId {
    /// Validates an instance id.
    pub fn new(value: &str) -> Result<InstanceId, Rejection> {
        Label::new("instance", value).map(InstanceId)
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A tenant's namespace: the scope of namespace watches and listings.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NamespaceKey {
    /// The tenant; nothing crosses a tenant boundary.
    pub tenant: Label,
    /// The namespace within the tenant.
    pub namespace: Label,
}

impl NamespaceKey {
    /// Validates both parts.
    pub fn new(tenant: &str, namespace: &str) -> Result<NamespaceKey, Rejection> {
        Ok(NamespaceKey {
            tenant: Label::new("tenant", tenant)?,
            namespace: Label::new("namespace", namespace)?,
        })
    }
}

impl fmt::Display for NamespaceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.namespace)
    }
}

/// A logical service: `tenant / namespace / service`. Typed data, never one string.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServiceKey {
    /// The tenant.
    pub tenant: Label,
    /// The namespace within the tenant.
    pub namespace: Label,
    /// The service within the namespace.
    pub service: Label,
}

impl ServiceKey {
    /// Validates all three parts.
    pub fn new(tenant: &str, namespace: &str, service: &str) -> Result<ServiceKey, Rejection> {
        Ok(ServiceKey {
            tenant: Label::new("tenant", tenant)?,
            namespace: Label::new("namespace", namespace)?,
            service: Label::new("service", service)?,
        })
    }

    /// The namespace this service lives in.
    pub fn namespace_key(&self) -> NamespaceKey {
        NamespaceKey {
            tenant: self.tenant.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

/// The tenant a two-part key (`namespace/service`) belongs to: the tenant a server without
/// tenants configured serves everything in.
pub const DEFAULT_TENANT: &str = "default";

/// Reads what [`Display`](fmt::Display) prints, `tenant/namespace/service`, or
/// `namespace/service` in the [`DEFAULT_TENANT`]; each part is validated as [`ServiceKey::new`]
/// does, and an error names the part that fails.
impl std::str::FromStr for ServiceKey {
    type Err = Rejection;

    fn from_str(text: &str) -> Result<ServiceKey, Rejection> {
        let parts: Vec<&str> = text.split('/').collect();
        match parts.as_slice() {
            [tenant, namespace, service] => ServiceKey::new(tenant, namespace, service),
            [namespace, service] => ServiceKey::new(DEFAULT_TENANT, namespace, service),
            _ => Err(Rejection::invalid_name(
                "service key",
                format!(
                    "'{}' must be tenant/namespace/service or namespace/service",
                    text.escape_debug()
                ),
            )),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.namespace, self.service)
    }
}

/// An authenticated caller's name (a token's subject, a certificate's identity), recorded as
/// the registrar of a record and the observer of a state change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "SmolStr", into = "SmolStr")]
pub struct Principal(SmolStr);

impl Principal {
    /// Long enough for a SPIFFE id or an e-mail style subject; bounded because it is
    /// stored in every record.
    pub const MAX_LEN: usize = 128;

    /// Validates a principal: 1 to [`Principal::MAX_LEN`] printable ASCII characters.
    pub fn new(value: &str) -> Result<Principal, Rejection> {
        if value.is_empty() || value.len() > Principal::MAX_LEN {
            return Err(Rejection::invalid_name(
                "principal",
                format!("must be 1 to {} characters, got {}", Principal::MAX_LEN, value.len()),
            ));
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Rejection::invalid_name(
                "principal",
                "must be printable ASCII without spaces",
            ));
        }
        Ok(Principal(SmolStr::new(value)))
    }

    /// The principal's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<SmolStr> for Principal {
    type Error = Rejection;
    fn try_from(value: SmolStr) -> Result<Self, Self::Error> {
        Principal::new(&value)
    }
}

impl From<Principal> for SmolStr {
    fn from(principal: Principal) -> SmolStr {
        principal.0
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_rfc_1123() {
        for good in ["a", "payments", "api-v2", "0day", &"x".repeat(63)] {
            assert_eq!(Label::new("service", good).unwrap().as_str(), good);
        }
        for bad in [
            "",
            "-api",
            "api-",
            "Payments",
            "pay_ments",
            "pay.ments",
            "päy",
            &"x".repeat(64),
        ] {
            let err = Label::new("service", bad).unwrap_err();
            assert_eq!(err.code(), "invalid_name", "{bad:?}");
            assert!(err.to_string().starts_with("service: "), "{err}");
        }
    }

    #[test]
    fn length_errors_name_the_limit() {
        let err = Label::with_max_len("ports[0].name", "averyverylongname", 15).unwrap_err();
        assert_eq!(err.to_string(), "ports[0].name: must be 1 to 15 characters, got 17");
    }

    /// A key parses back from what it prints; two parts mean the default tenant; anything
    /// else is refused naming what is expected or the part that fails.
    #[test]
    fn service_key_parses_what_it_displays() {
        let key = ServiceKey::new("acme", "prod", "api").unwrap();
        assert_eq!(key.to_string().parse::<ServiceKey>().unwrap(), key);
        assert_eq!(
            "demo/web".parse::<ServiceKey>().unwrap(),
            ServiceKey::new(DEFAULT_TENANT, "demo", "web").unwrap()
        );
        for bad in ["", "api", "a/b/c/d", "acme//api", "/prod/api"] {
            let err = bad.parse::<ServiceKey>().unwrap_err();
            assert_eq!(err.code(), "invalid_name", "{bad:?}");
        }
        let err = "acme/Prod/api".parse::<ServiceKey>().unwrap_err();
        assert!(err.to_string().starts_with("namespace: "), "{err}");
        let err = "a/b/c/d".parse::<ServiceKey>().unwrap_err();
        assert!(err.to_string().contains("tenant/namespace/service"), "{err}");
    }

    #[test]
    fn service_key_names_the_failing_part() {
        let err = ServiceKey::new("acme", "Prod", "api").unwrap_err();
        assert!(err.to_string().starts_with("namespace: "), "{err}");
        let key = ServiceKey::new("acme", "prod", "api").unwrap();
        assert_eq!(key.to_string(), "acme/prod/api");
        assert_eq!(key.namespace_key().to_string(), "acme/prod");
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<Label>("\"ok\"").is_ok());
        assert!(serde_json::from_str::<Label>("\"Not OK\"").is_err());
        assert!(serde_json::from_str::<Principal>("\"spiffe://acme/api\"").is_ok());
        assert!(serde_json::from_str::<Principal>("\"two words\"").is_err());
    }
}
