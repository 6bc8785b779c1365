//! Canonical addresses and the permitted-network policy (SPEC M5).
//!
//! An address is stored in one canonical form so that two spellings of one host can never
//! be two endpoints: IPv4-mapped IPv6 (`::ffff:10.0.0.1`) becomes IPv4, text is re-rendered
//! by the standard library (`2001:DB8::1` becomes `2001:db8::1`), zone ids and leading zeros
//! are refused. Addresses that can never be a unicast destination (unspecified, multicast,
//! IPv4 broadcast) are refused, and so is anything outside the configured permitted networks.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Label, Rejection, Revision};

/// One address of an endpoint: the IP and the network scope it is reachable in.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Address {
    /// The canonical IP.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "ip"))]
    pub ip: IpAddr,
    /// The reachability scope (e.g. `lan`, `vpc-7`); `None` means reachable from every scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Label>,
}

/// Splits `host:port` (a name or an address, then a port of 1 to 65535): the one rule for
/// check URLs, cluster peers and member addresses. `None` when it is not one.
pub fn host_port(text: &str) -> Option<(&str, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|port| *port > 0)?;
    (!host.is_empty()).then_some((host, port))
}

/// Parses `text` into a canonical unicast IP; `field` names it in the error.
pub fn canonical_ip(field: &str, text: &str) -> Result<IpAddr, Rejection> {
    let invalid = |reason: String| Rejection::InvalidAddress {
        field: field.to_owned(),
        reason,
    };
    if text.contains('%') {
        return Err(invalid(format!(
            "'{}' carries a zone id, which is not allowed",
            text.escape_debug()
        )));
    }
    let ip = IpAddr::from_str(text)
        .map_err(|_| invalid(format!("'{}' is not an IPv4 or IPv6 address", text.escape_debug())))?;
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_unspecified() {
        return Err(invalid(format!("{ip} is the unspecified address")));
    }
    if ip.is_multicast() {
        return Err(invalid(format!("{ip} is a multicast address")));
    }
    if ip == IpAddr::V4(Ipv4Addr::BROADCAST) {
        return Err(invalid(format!("{ip} is the broadcast address")));
    }
    Ok(ip)
}

/// An IP network in CIDR notation, e.g. `10.0.0.0/8` or `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Every IPv4 address.
    pub const ALL_V4: Cidr = Cidr {
        network: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        prefix: 0,
    };
    /// Every IPv6 address.
    pub const ALL_V6: Cidr = Cidr {
        network: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        prefix: 0,
    };

    /// Whether `ip` lies in this network. IPv4 never matches an IPv6 network or back.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = Rejection;

    /// Parses `ip/prefix` (a bare IP is a host route). Host bits must be zero, so that a
    /// typo like `10.1.0.0/8` is caught rather than silently widened.
    fn from_str(text: &str) -> Result<Cidr, Rejection> {
        let invalid = |reason: String| Rejection::InvalidAddress {
            field: "permitted_networks".into(),
            reason,
        };
        let (ip_text, prefix_text) = text.split_once('/').unwrap_or((text, ""));
        let network = IpAddr::from_str(ip_text).map_err(|_| invalid(format!("'{text}' is not a CIDR network")))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = if prefix_text.is_empty() {
            max
        } else {
            prefix_text
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| invalid(format!("'{text}': prefix must be 0 to {max}")))?
        };
        let cidr = Cidr { network, prefix };
        let masked_out = match network {
            IpAddr::V4(v4) => u32::from(v4) & !u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0) != 0,
            IpAddr::V6(v6) => u128::from(v6) & !u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0) != 0,
        };
        if masked_out {
            return Err(invalid(format!("'{text}' has host bits set beyond /{prefix}")));
        }
        Ok(cidr)
    }
}

impl TryFrom<String> for Cidr {
    type Error = Rejection;
    fn try_from(text: String) -> Result<Cidr, Rejection> {
        text.parse()
    }
}

impl From<Cidr> for String {
    fn from(cidr: Cidr) -> String {
        cidr.to_string()
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Which networks endpoint addresses may lie in, and the revision of that policy (recorded
/// in every record's provenance, so a record says which policy admitted it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    /// The permitted networks; an address must lie in at least one.
    pub permitted: Vec<Cidr>,
    /// The policy's revision, chosen by the operator.
    pub revision: Revision,
}

impl Default for NetworkPolicy {
    /// Everything is permitted: a single-node registry on a laptop must just work. Operators
    /// narrow it to their pod and host networks.
    fn default() -> Self {
        NetworkPolicy {
            permitted: vec![Cidr::ALL_V4, Cidr::ALL_V6],
            revision: Revision::ZERO,
        }
    }
}

impl NetworkPolicy {
    /// Checks that `ip` lies in a permitted network.
    pub fn admit(&self, field: &str, ip: IpAddr) -> Result<(), Rejection> {
        if self.permitted.iter().any(|net| net.contains(ip)) {
            return Ok(());
        }
        let permitted = self
            .permitted
            .iter()
            .map(Cidr::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        Err(Rejection::AddressOutOfScope {
            field: field.to_owned(),
            address: ip,
            permitted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn addresses_are_canonicalised() {
        assert_eq!(canonical_ip("ip", "::ffff:10.0.0.1").unwrap(), ip("10.0.0.1"));
        assert_eq!(
            canonical_ip("ip", "2001:DB8:0:0::1").unwrap().to_string(),
            "2001:db8::1"
        );
        assert_eq!(canonical_ip("ip", "127.0.0.1").unwrap(), ip("127.0.0.1"));
    }

    #[test]
    fn unusable_addresses_are_refused() {
        for bad in [
            "",
            "10.0.0",
            "010.0.0.1",
            "fe80::1%eth0",
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "ff02::1",
            "255.255.255.255",
            "host.example",
        ] {
            let err = canonical_ip("addresses[0].ip", bad).unwrap_err();
            assert_eq!(err.code(), "invalid_address", "{bad:?}");
            assert!(err.to_string().starts_with("addresses[0].ip: "), "{err}");
        }
    }

    #[test]
    fn cidr_contains_and_refuses_host_bits() {
        let net: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains(ip("10.255.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(!net.contains(ip("::ffff:10.0.0.1")), "families never mix");
        assert!(Cidr::ALL_V6.contains(ip("2001:db8::1")));
        assert!("10.1.0.0/8".parse::<Cidr>().is_err());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert_eq!("192.168.1.7".parse::<Cidr>().unwrap().to_string(), "192.168.1.7/32");
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
    }

    #[test]
    fn policy_names_the_permitted_networks() {
        let policy = NetworkPolicy {
            permitted: vec!["10.0.0.0/8".parse().unwrap()],
            revision: Revision(3),
        };
        assert!(policy.admit("ip", ip("10.1.2.3")).is_ok());
        let err = policy.admit("addresses[0].ip", ip("192.168.0.1")).unwrap_err();
        assert_eq!(err.code(), "address_out_of_scope");
        assert_eq!(
            err.to_string(),
            "addresses[0].ip: 192.168.0.1 is outside the permitted networks (10.0.0.0/8)"
        );
    }
}
