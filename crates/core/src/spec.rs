//! What a registrar submits ([`EndpointSpec`], the wire form, plain strings) and its
//! validation into typed, canonical [`Attributes`].
//!
//! Validation is pure and deterministic given the [`Limits`] and [`NetworkPolicy`], so the
//! registry can run it inside `apply` and every replica reaches the same verdict. Every
//! refusal names the field (`ports[1].name`, `labels.team`) and the limit it broke.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use smol_str::SmolStr;

use crate::address::{canonical_ip, host_port};
use crate::check::MAX_CHECKS;
use crate::{
    Address, Check, CheckSpec, Label, Labels, Limits, Locality, NamedPort, NetworkPolicy, Protocol, Rejection,
    ServingState,
};

/// An address as submitted.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddressSpec {
    /// IPv4 or IPv6 text.
    pub ip: String,
    /// Optional reachability scope (a DNS label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// A named port as submitted.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    /// The port's name (a DNS label of at most 15 characters).
    pub name: String,
    /// The port number, 1 to 65535.
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 65535))]
    pub port: u16,
    /// What the port speaks; TCP when omitted.
    #[serde(default)]
    pub protocol: Protocol,
}

/// A locality as submitted.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalitySpec {
    /// Region name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Zone name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Sub-zone name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_zone: Option<String>,
    /// Failover tier, 0 preferred.
    #[serde(default)]
    pub priority: u8,
}

/// An endpoint as a registrar submits it. Unknown fields are refused, not ignored.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    /// Where it listens; at least one.
    pub addresses: Vec<AddressSpec>,
    /// Named ports.
    #[serde(default)]
    pub ports: Vec<PortSpec>,
    /// Where it runs.
    #[serde(default)]
    pub locality: LocalitySpec,
    /// Serving state of a new incarnation; when omitted, `ready` for a registration without
    /// routing checks (usable at once, as in Consul) and `starting` for one with readiness or
    /// startup checks (usable after its first pass, SPEC H1). Ignored when the incarnation
    /// already exists: later changes go through set-serving and drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<ServingState>,
    /// Relative weight, 1 to 65535; 100 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Bound on concurrent work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// Descriptive labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The registrar's own source revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_revision: Option<String>,
    /// Health checks the registry's checker runs for this endpoint (at most
    /// [`MAX_CHECKS`](crate::check::MAX_CHECKS)). Re-registering the same incarnation with
    /// other checks replaces them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckSpec>,
}

/// The registrant-controlled part of a record, validated and canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// Canonical, permitted addresses.
    pub addresses: Box<[Address]>,
    /// Named ports, names unique.
    pub ports: Box<[NamedPort]>,
    /// Where it runs.
    pub locality: Locality,
    /// Serving state of a new incarnation.
    pub initial_serving: ServingState,
    /// Relative weight.
    pub weight: u16,
    /// Bound on concurrent work.
    pub capacity: Option<u32>,
    /// Labels.
    pub labels: Labels,
    /// Source revision.
    pub source_revision: Option<SmolStr>,
    /// Validated health checks.
    pub checks: Box<[Check]>,
}

/// IANA service names are at most 15 characters (RFC 6335); port names become SRV labels.
const MAX_PORT_NAME: usize = 15;
/// The weight of a record that does not say: the midpoint of a comfortable 1..1000 range.
const DEFAULT_WEIGHT: u16 = 100;

impl EndpointSpec {
    /// Validates and canonicalises the spec.
    pub fn validate(&self, limits: &Limits, policy: &NetworkPolicy) -> Result<Attributes, Rejection> {
        too_large("addresses", self.addresses.len(), limits.max_addresses)?;
        too_large("ports", self.ports.len(), limits.max_ports)?;
        if self.addresses.is_empty() {
            return Err(Rejection::InvalidAddress {
                field: "addresses".into(),
                reason: "at least one address is required".into(),
            });
        }
        // Field names are built only on refusal: validation runs on every write.
        let mut addresses = Vec::with_capacity(self.addresses.len());
        for (i, spec) in self.addresses.iter().enumerate() {
            let at = |field: &'static str| move |e: Rejection| e.for_field(format!("addresses[{i}].{field}"));
            let ip = canonical_ip("ip", &spec.ip).map_err(at("ip"))?;
            policy.admit("ip", ip).map_err(at("ip"))?;
            let scope = spec
                .scope
                .as_deref()
                .map(|s| Label::new("scope", s))
                .transpose()
                .map_err(at("scope"))?;
            let address = Address { ip, scope };
            if addresses.contains(&address) {
                let reason = format!("{ip} is listed twice");
                return Err(Rejection::InvalidAddress {
                    field: format!("addresses[{i}].ip"),
                    reason,
                });
            }
            addresses.push(address);
        }
        let mut ports: Vec<NamedPort> = Vec::with_capacity(self.ports.len());
        for (i, spec) in self.ports.iter().enumerate() {
            let at = |field: &'static str| move |e: Rejection| e.for_field(format!("ports[{i}].{field}"));
            let name = Label::with_max_len("name", &spec.name, MAX_PORT_NAME).map_err(at("name"))?;
            if ports.iter().any(|p| p.name == name) {
                return Err(Rejection::invalid_name(
                    format!("ports[{i}].name"),
                    format!("'{name}' is used twice"),
                ));
            }
            if spec.port == 0 {
                return Err(Rejection::invalid_field(
                    format!("ports[{i}].port"),
                    "must be 1 to 65535, got 0",
                ));
            }
            ports.push(NamedPort {
                name,
                port: spec.port,
                protocol: spec.protocol,
            });
        }
        let optional_label =
            |field: &str, value: &Option<String>| value.as_deref().map(|v| Label::new(field, v)).transpose();
        let locality = Locality {
            region: optional_label("locality.region", &self.locality.region)?,
            zone: optional_label("locality.zone", &self.locality.zone)?,
            sub_zone: optional_label("locality.sub_zone", &self.locality.sub_zone)?,
            priority: self.locality.priority,
        };
        let weight = match self.weight {
            None => DEFAULT_WEIGHT,
            Some(w) => u16::try_from(w)
                .ok()
                .filter(|w| *w >= 1)
                .ok_or_else(|| Rejection::invalid_field("weight", format!("must be 1 to 65535, got {w}")))?,
        };
        let source_revision = self
            .source_revision
            .as_deref()
            .map(|text| bounded_text("source_revision", text, limits.max_text_bytes))
            .transpose()?;
        if self.checks.len() > MAX_CHECKS {
            return Err(Rejection::RecordTooLarge {
                field: "checks".into(),
                size: self.checks.len(),
                limit: MAX_CHECKS,
            });
        }
        let checks = self
            .checks
            .iter()
            .enumerate()
            .map(|(i, check)| check.validate(&format!("checks[{i}]")))
            .collect::<Result<Box<[Check]>, Rejection>>()?;
        for (i, check) in checks.iter().enumerate() {
            own_target(check, &addresses, &ports).map_err(|e| e.for_field(format!("checks[{i}].url")))?;
        }
        let routed = checks.iter().any(Check::routes);
        let initial_serving = self.serving.unwrap_or(if routed {
            ServingState::Starting
        } else {
            ServingState::Ready
        });
        Ok(Attributes {
            addresses: addresses.into(),
            ports: ports.into(),
            locality,
            initial_serving,
            weight,
            capacity: self.capacity,
            labels: Labels::new(&self.labels, limits)?,
            source_revision,
            checks,
        })
    }
}

/// A probed check must aim at its own endpoint (SPEC S6): an IP literal among the
/// endpoint's addresses (which the network policy admitted), and, when the endpoint names
/// its ports, one of them. A name is refused: it is resolved at probe time, by the leader,
/// and could point anywhere. This rule reads only the record, so every replica reaches the
/// same verdict in `apply`; what depends on the node that probes (loopback, link-local and
/// metadata addresses, Muster's own listeners) is the checker's `TargetPolicy`, applied at
/// probe time (muster-health).
fn own_target(check: &Check, addresses: &[Address], ports: &[NamedPort]) -> Result<(), Rejection> {
    let Some(authority) = check.authority() else {
        return Ok(());
    };
    let refused = |reason: String| Rejection::CheckTargetRefused {
        field: "url".into(),
        reason,
    };
    let (host, port) = host_port(authority).ok_or_else(|| refused(format!("'{authority}' is not host:port")))?;
    let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let ip = canonical_ip("url", literal).map_err(|_| {
        refused(format!(
            "'{host}' is not an IP address: a check probes one of its endpoint's own addresses, \
             and a name could resolve anywhere"
        ))
    })?;
    if !addresses.iter().any(|address| address.ip == ip) {
        let own = addresses
            .iter()
            .map(|a| a.ip.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(refused(format!(
            "{ip} is not one of the endpoint's addresses ({own}); a check probes its own endpoint"
        )));
    }
    if !ports.is_empty() && !ports.iter().any(|named| named.port == port) {
        let own = ports.iter().map(|p| p.port.to_string()).collect::<Vec<_>>().join(", ");
        return Err(refused(format!(
            "port {port} is not one of the endpoint's ports ({own}); a check probes its own endpoint"
        )));
    }
    Ok(())
}

fn too_large(field: &str, size: usize, limit: usize) -> Result<(), Rejection> {
    if size > limit {
        return Err(Rejection::RecordTooLarge {
            field: field.into(),
            size,
            limit,
        });
    }
    Ok(())
}

/// Validates a free-text field (a reason, a source revision): bounded, no control characters.
pub fn bounded_text(field: &str, text: &str, max_bytes: usize) -> Result<SmolStr, Rejection> {
    if text.len() > max_bytes {
        return Err(Rejection::RecordTooLarge {
            field: field.into(),
            size: text.len(),
            limit: max_bytes,
        });
    }
    if text.chars().any(char::is_control) {
        return Err(Rejection::invalid_field(field, "must not hold control characters"));
    }
    Ok(SmolStr::new(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EndpointSpec {
        EndpointSpec {
            addresses: vec![AddressSpec {
                ip: "10.0.0.1".into(),
                scope: None,
            }],
            ports: vec![PortSpec {
                name: "http".into(),
                port: 8080,
                protocol: Protocol::Http,
            }],
            ..EndpointSpec::default()
        }
    }

    fn reject(edit: impl FnOnce(&mut EndpointSpec)) -> Rejection {
        let mut spec = spec();
        edit(&mut spec);
        spec.validate(&Limits::default(), &NetworkPolicy::default())
            .unwrap_err()
    }

    fn check(url: &str) -> CheckSpec {
        CheckSpec {
            url: Some(url.into()),
            ..CheckSpec::default()
        }
    }

    #[test]
    fn a_check_may_probe_only_its_own_endpoints_addresses_and_ports() {
        // Trace: a registrar aims a check at the cloud metadata service, or at a database
        // two hops away, and reads the answer off the endpoint's health (an SSRF oracle).
        for (url, why) in [
            (
                "http://169.254.169.254:80/latest/meta-data",
                "169.254.169.254 is not one of the endpoint's addresses",
            ),
            (
                "tcp://10.0.0.2:8080",
                "10.0.0.2 is not one of the endpoint's addresses (10.0.0.1)",
            ),
            ("tcp://db.internal:8080", "'db.internal' is not an IP address"),
            (
                "grpc://10.0.0.1:5432",
                "port 5432 is not one of the endpoint's ports (8080)",
            ),
        ] {
            let err = reject(|s| s.checks = vec![check("tcp://10.0.0.1:8080"), check(url)]);
            assert_eq!(err.code(), "check_target_refused", "{url}: {err}");
            assert!(err.to_string().starts_with("checks[1].url: "), "{err}");
            assert!(err.to_string().contains(why), "{url}: {err}");
        }
        let mut own = spec();
        own.checks = vec![
            check("http://10.0.0.1:8080/healthz"),
            check("tcp://[::ffff:10.0.0.1]:8080"),
        ];
        assert!(own.validate(&Limits::default(), &NetworkPolicy::default()).is_ok());
        // An endpoint that names no ports may be checked on any port of its own address.
        own.ports.clear();
        own.checks = vec![check("tcp://10.0.0.1:9000")];
        assert!(own.validate(&Limits::default(), &NetworkPolicy::default()).is_ok());
    }

    #[test]
    fn a_plain_spec_gets_defaults() {
        let attrs = spec().validate(&Limits::default(), &NetworkPolicy::default()).unwrap();
        assert_eq!(attrs.weight, 100);
        assert_eq!(attrs.initial_serving, ServingState::Ready);
        assert_eq!(attrs.ports[0].name.as_str(), "http");
    }

    #[test]
    fn every_rule_has_its_code_and_field() {
        let cases: Vec<(Rejection, &str, &str)> = vec![
            (
                reject(|s| s.addresses.clear()),
                "invalid_address",
                "addresses: at least one",
            ),
            (
                reject(|s| s.addresses[0].ip = "10.0.0.300".into()),
                "invalid_address",
                "addresses[0].ip:",
            ),
            (
                reject(|s| s.addresses.push(s.addresses[0].clone())),
                "invalid_address",
                "addresses[1].ip: 10.0.0.1 is listed twice",
            ),
            (
                reject(|s| s.addresses[0].scope = Some("LAN".into())),
                "invalid_name",
                "addresses[0].scope:",
            ),
            (
                reject(|s| s.addresses = vec![s.addresses[0].clone(); 9]),
                "record_too_large",
                "addresses: 9 exceeds the limit of 8",
            ),
            (
                reject(|s| s.ports[0].name = "http_alt".into()),
                "invalid_name",
                "ports[0].name:",
            ),
            (
                reject(|s| s.ports[0].name = "a-very-long-port".into()),
                "invalid_name",
                "must be 1 to 15 characters, got 16",
            ),
            (
                reject(|s| s.ports.push(s.ports[0].clone())),
                "invalid_name",
                "ports[1].name: 'http' is used twice",
            ),
            (
                reject(|s| s.ports[0].port = 0),
                "invalid_field",
                "ports[0].port: must be 1 to 65535",
            ),
            (
                reject(|s| s.ports = vec![s.ports[0].clone(); 17]),
                "record_too_large",
                "ports: 17 exceeds the limit of 16",
            ),
            (
                reject(|s| s.locality.zone = Some("Zone A".into())),
                "invalid_name",
                "locality.zone:",
            ),
            (
                reject(|s| s.weight = Some(0)),
                "invalid_field",
                "weight: must be 1 to 65535, got 0",
            ),
            (
                reject(|s| s.weight = Some(70_000)),
                "invalid_field",
                "weight: must be 1 to 65535, got 70000",
            ),
            (
                reject(|s| s.source_revision = Some("x".repeat(257))),
                "record_too_large",
                "source_revision: 257 exceeds the limit of 256",
            ),
            (
                reject(|s| s.labels.insert("bad key".into(), "v".into()).map_or((), drop)),
                "label_limit",
                "labels.bad key:",
            ),
        ];
        for (err, code, text) in cases {
            assert_eq!(err.code(), code, "{err}");
            assert!(err.to_string().contains(text), "{err} should contain {text:?}");
        }
    }

    #[test]
    fn out_of_scope_addresses_are_refused() {
        let policy = NetworkPolicy {
            permitted: vec!["10.0.0.0/8".parse().unwrap()],
            ..NetworkPolicy::default()
        };
        let mut outside = spec();
        outside.addresses[0].ip = "192.168.1.1".into();
        let err = outside.validate(&Limits::default(), &policy).unwrap_err();
        assert_eq!(err.code(), "address_out_of_scope");
        assert!(spec().validate(&Limits::default(), &policy).is_ok());
    }

    #[test]
    fn unknown_fields_are_refused() {
        let json = r#"{"addresses":[{"ip":"10.0.0.1"}],"wieght":5}"#;
        let err = serde_json::from_str::<EndpointSpec>(json).unwrap_err();
        assert!(err.to_string().contains("unknown field `wieght`"), "{err}");
    }
}
