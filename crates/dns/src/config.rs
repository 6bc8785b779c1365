//! What a DNS view answers: its domain, its tenant, its TTLs and which endpoints it may name.

use muster_core::{Label, Rejection};
use serde::{Deserialize, Serialize};

/// The settings of one DNS view (one tenant under one domain).
///
/// Every field has a default, so `ZoneConfig::default()` serves tenant `default` under
/// `muster.` with 5-second TTLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ZoneConfig {
    /// The zone's apex, e.g. `muster.` (a trailing dot is optional). Names outside it are
    /// refused.
    pub domain: String,
    /// The one tenant this view shows (SPEC S3: a listener never mixes tenants).
    pub tenant: Label,
    /// TTL of every positive answer, in seconds.
    pub ttl_s: u32,
    /// TTL of a negative answer (the SOA's minimum and its own TTL, RFC 2308), in seconds.
    pub negative_ttl_s: u32,
    /// The largest UDP answer we send, whatever a client's EDNS buffer says.
    pub max_udp_payload: u16,
    /// The most records of one RRset (A, AAAA, SRV, PTR) a UDP answer carries: a larger
    /// RRset is answered with a rotating window of at most this many, as many as fit the
    /// client's buffer, TC clear. TCP answers carry as many as fit 64 KiB. 65535 (the
    /// default, DNS's own maximum) means no count limit, only the size; at least 1.
    pub max_answers: u16,
    /// What a UDP answer does with an RRset too large for the client's buffer: `"truncate"`
    /// (the default) sets TC, as RFC 2181 section 9 asks, so the resolver asks again over
    /// TCP and gets the whole RRset (up to 64 KiB); the records that fit travel too, always
    /// the same ones. `"rotate"` answers a rotating window of the records instead, TC clear:
    /// it spreads A/AAAA load over clients that take what one answer gives and never retry
    /// over TCP, but a client that needs every record (HAProxy's `server-template` over SRV)
    /// sees them come and go with each answer.
    pub large_rrsets: LargeRrsets,
    /// Whether `degraded` endpoints are answered (SPEC M3); `ready` ones always are.
    pub accept_degraded: bool,
    /// Network scopes whose addresses this view may hand out, besides unscoped addresses
    /// (which everyone reaches). Empty: unscoped addresses only.
    pub reachable_scopes: Vec<Label>,
}

/// Five seconds: short enough that a drained endpoint leaves resolver caches within a few
/// seconds of leaving the registry, long enough that a busy client does not ask on every
/// connection. Clients that need faster reaction use watches, not DNS.
const DEFAULT_TTL_S: u32 = 5;

/// 1,232 bytes: the DNS Flag Day 2020 size, the largest UDP payload that avoids IP
/// fragmentation on practically every path (1,280-byte IPv6 minimum MTU less headers).
const DEFAULT_MAX_UDP_PAYLOAD: u16 = 1232;

/// 65,535: no limit beyond the size, as Consul's `a_record_limit` of 0. A UDP answer is
/// bounded by the client's buffer anyway (about 75 A records at 1,232 bytes, 29 at 512), and
/// a fixed smaller number would hand every client fewer addresses to spread its connections
/// over for no gain; operators who want Consul's old three-record answers set it.
const DEFAULT_MAX_ANSWERS: u16 = u16::MAX;

/// What a UDP answer does with an RRset too large for it ([`ZoneConfig::large_rrsets`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LargeRrsets {
    /// TC set, with the records that fit from the first: the resolver retries over TCP.
    #[default]
    Truncate,
    /// A rotating window of the records that fit, TC clear.
    Rotate,
}

/// RFC 1035's UDP limit, which every client accepts without EDNS.
pub(crate) const CLASSIC_UDP_PAYLOAD: u16 = 512;

impl Default for ZoneConfig {
    fn default() -> Self {
        ZoneConfig {
            domain: "muster.".to_owned(),
            tenant: Label::new("tenant", "default").expect("a valid label"),
            ttl_s: DEFAULT_TTL_S,
            negative_ttl_s: DEFAULT_TTL_S,
            max_udp_payload: DEFAULT_MAX_UDP_PAYLOAD,
            max_answers: DEFAULT_MAX_ANSWERS,
            large_rrsets: LargeRrsets::default(),
            accept_degraded: false,
            reachable_scopes: Vec::new(),
        }
    }
}

/// Why a [`ZoneConfig`] cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The domain is empty, too long, or holds a label that is not a DNS hostname label.
    #[error("dns domain: '{domain}' {reason}")]
    InvalidDomain {
        /// The domain as configured.
        domain: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `max_udp_payload` is below the 512 bytes every DNS client must accept.
    #[error("dns max_udp_payload: {0} is below the 512-byte minimum of RFC 1035")]
    UdpPayloadTooSmall(u16),
    /// `max_answers` is 0: every positive answer would be empty.
    #[error("dns max_answers: 0 would answer no records; use at least 1 (65535: as many as fit)")]
    NoAnswers,
}

impl ConfigError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::InvalidDomain { .. } => "invalid_dns_domain",
            ConfigError::UdpPayloadTooSmall(_) => "invalid_dns_udp_payload",
            ConfigError::NoAnswers => "invalid_dns_max_answers",
        }
    }
}

/// The apex as lower-case labels, validated: 1 to 127 labels of `a-z`, `0-9` and `-` (upper
/// case is folded), at most 255 octets on the wire.
pub(crate) fn domain_labels(domain: &str) -> Result<Vec<String>, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidDomain {
        domain: domain.to_owned(),
        reason,
    };
    let trimmed = domain.strip_suffix('.').unwrap_or(domain);
    if trimmed.is_empty() {
        return Err(invalid(
            "is empty: the view needs a domain of its own (e.g. muster.)".into(),
        ));
    }
    let mut labels = Vec::new();
    let mut wire_len = 1;
    for label in trimmed.split('.') {
        let lower = label.to_ascii_lowercase();
        Label::new("domain", &lower).map_err(|err: Rejection| invalid(err.to_string()))?;
        wire_len += 1 + lower.len();
        labels.push(lower);
    }
    if wire_len > 255 {
        return Err(invalid(format!(
            "is {wire_len} octets on the wire, over the 255 allowed"
        )));
    }
    Ok(labels)
}

impl ZoneConfig {
    /// Checks the settings without building anything.
    pub fn validate(&self) -> Result<(), ConfigError> {
        domain_labels(&self.domain)?;
        if self.max_udp_payload < CLASSIC_UDP_PAYLOAD {
            return Err(ConfigError::UdpPayloadTooSmall(self.max_udp_payload));
        }
        if self.max_answers == 0 {
            return Err(ConfigError::NoAnswers);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_fold_case_and_take_an_optional_trailing_dot() {
        assert_eq!(domain_labels("Muster.").unwrap(), ["muster"]);
        assert_eq!(domain_labels("svc.example.com").unwrap(), ["svc", "example", "com"]);
    }

    #[test]
    fn bad_domains_small_payloads_and_zero_answers_are_refused_with_codes() {
        for bad in [
            "",
            ".",
            "a..b",
            "under_score.",
            "-x.",
            &format!("{}.", vec!["a".repeat(63); 5].join(".")),
        ] {
            let config = ZoneConfig {
                domain: bad.to_owned(),
                ..ZoneConfig::default()
            };
            assert_eq!(config.validate().unwrap_err().code(), "invalid_dns_domain", "{bad:?}");
        }
        let small = ZoneConfig {
            max_udp_payload: 511,
            ..ZoneConfig::default()
        };
        assert_eq!(small.validate().unwrap_err().code(), "invalid_dns_udp_payload");
        let none = ZoneConfig {
            max_answers: 0,
            ..ZoneConfig::default()
        };
        assert_eq!(none.validate().unwrap_err().code(), "invalid_dns_max_answers");
        let one = ZoneConfig {
            max_answers: 1,
            ..ZoneConfig::default()
        };
        assert!(one.validate().is_ok());
        assert!(ZoneConfig::default().validate().is_ok());
    }
}
