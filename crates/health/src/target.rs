//! Which check targets the checker may probe from this node (SPEC S6): the probe-time half
//! of "a check cannot be aimed at arbitrary hosts".
//!
//! ```text
//!  registration (muster-core, in apply, every replica):  the target is an IP of the
//!      endpoint itself, inside the network policy, on one of its ports       ─▶ else 422
//!  probe (here, on the leader, every turn):  not one of Muster's own listeners, and not
//!      loopback / link-local / metadata unless allowed                        ─▶ else the
//!      probe is not run; the check fails with reason `check_target_refused: ...`
//! ```
//!
//! # Why the split
//! The registration rule reads only the record, so every replica reaches the same verdict.
//! What this policy knows is the probing node's: its listeners' addresses and its operator's
//! exceptions. Putting that into `apply` would make replicas disagree, and a new leader
//! (with other listeners) could not re-decide. Checked at every turn, a config change takes
//! effect without re-registering anything.
//!
//! # The refused classes
//! - Muster's own listeners (HTTP API, DNS, cluster): the checker runs on the leader, so a
//!   check on them would let a registrar drive requests at the registry from inside. A
//!   listener on a wildcard address refuses its port on every address (the node's own
//!   addresses are not known here); never allowed.
//! - Loopback (127.0.0.0/8, ::1): the leader's own host. Allowed by `allow_loopback`, which
//!   holds while authentication is off: the API then binds loopback only, so every caller is
//!   already on this host and could probe its loopback itself, and the registration rule
//!   makes the endpoint's own address loopback, admitted by the network policy. That keeps
//!   `muster serve` on a laptop working out of the box. With authentication on, loopback is
//!   refused unless listed in `allowed`.
//! - Link-local (169.254.0.0/16, fe80::/10), which holds the cloud metadata service
//!   169.254.169.254, and the IPv6 metadata address fd00:ec2::254: refused unless a network
//!   in `allowed` holds the target.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use muster_core::address::host_port;
use muster_core::{CheckKind, Cidr};

/// The EC2 IPv6 instance metadata address (its IPv4 one is link-local).
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// What this node's checker may probe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Loopback targets are probed (true while authentication is off).
    pub allow_loopback: bool,
    /// Networks whose targets are probed even when loopback, link-local or metadata
    /// (`health.check_allowed_networks`).
    pub allowed: Vec<Cidr>,
    /// This node's own listeners: never probed.
    pub own_listeners: Vec<SocketAddr>,
}

impl TargetPolicy {
    /// A policy allowing loopback, with the listed exceptions; the listeners come later
    /// ([`TargetPolicy::with_listeners`]), once bound. An error names a bad network.
    pub fn new(allow_loopback: bool, allowed: &[String]) -> Result<TargetPolicy, String> {
        let allowed = allowed
            .iter()
            .map(|text| Cidr::from_str(text).map_err(|e| format!("health.check_allowed_networks: '{text}': {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TargetPolicy {
            allow_loopback,
            allowed,
            own_listeners: Vec::new(),
        })
    }

    /// The same policy, refusing probes of `listeners` too.
    #[must_use]
    pub fn with_listeners(mut self, listeners: impl IntoIterator<Item = SocketAddr>) -> TargetPolicy {
        self.own_listeners.extend(listeners);
        self
    }

    /// Why a probe of `kind` is refused, or `None` when it may run.
    pub fn refusal(&self, kind: &CheckKind) -> Option<String> {
        let authority = match kind {
            CheckKind::Http { authority, .. } | CheckKind::Tcp { authority } | CheckKind::Grpc { authority, .. } => {
                authority
            }
            CheckKind::Ttl { .. } => return None,
        };
        let refused = |why: String| Some(format!("check_target_refused: {why}"));
        let Some((host, port)) = host_port(authority) else {
            return refused(format!("'{authority}' is not host:port"));
        };
        let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        let Ok(ip) = IpAddr::from_str(literal).map(|ip| ip.to_canonical()) else {
            return refused(format!("'{host}' is not an IP address"));
        };
        if self
            .own_listeners
            .iter()
            .any(|own| own.port() == port && (own.ip().is_unspecified() || own.ip().to_canonical() == ip))
        {
            return refused(format!("{authority} is one of this node's own Muster listeners"));
        }
        if self.allowed.iter().any(|net| net.contains(ip)) {
            return None;
        }
        if ip.is_loopback() && !self.allow_loopback {
            return refused(format!(
                "{ip} is loopback (this node's own host); list it in health.check_allowed_networks to probe it"
            ));
        }
        if is_link_local(ip) || ip == IpAddr::V6(METADATA_V6) {
            return refused(format!(
                "{ip} is a link-local or metadata address; list it in health.check_allowed_networks to probe it"
            ));
        }
        None
    }
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(authority: &str) -> CheckKind {
        CheckKind::Tcp {
            authority: authority.into(),
        }
    }

    #[test]
    fn metadata_link_local_and_own_listeners_are_refused_and_ordinary_targets_are_not() {
        let policy = TargetPolicy::new(true, &[])
            .unwrap()
            .with_listeners(["127.0.0.1:7070".parse().unwrap(), "0.0.0.0:7101".parse().unwrap()]);
        for refused in [
            "169.254.169.254:80",
            "[fd00:ec2::254]:80",
            "[fe80::1]:8080",
            "127.0.0.1:7070",
            "10.0.0.5:7101",
            "[::ffff:127.0.0.1]:7070",
        ] {
            let why = policy.refusal(&tcp(refused));
            assert!(
                why.is_some_and(|w| w.starts_with("check_target_refused: ")),
                "{refused}"
            );
        }
        for allowed in ["10.0.0.5:8080", "127.0.0.1:8080", "[::1]:8080", "[2001:db8::1]:443"] {
            assert_eq!(policy.refusal(&tcp(allowed)), None, "{allowed}");
        }
        assert_eq!(
            policy.refusal(&CheckKind::Ttl {
                ttl: std::time::Duration::from_secs(1)
            }),
            None
        );
    }

    #[test]
    fn loopback_is_refused_when_not_allowed_unless_a_network_lists_it() {
        let strict = TargetPolicy::new(false, &[]).unwrap();
        assert!(strict.refusal(&tcp("127.0.0.1:8080")).is_some());
        assert!(strict.refusal(&tcp("[::1]:8080")).is_some());
        let listed = TargetPolicy::new(false, &["127.0.0.0/8".into(), "169.254.0.0/16".into()]).unwrap();
        assert_eq!(listed.refusal(&tcp("127.0.0.1:8080")), None);
        assert_eq!(listed.refusal(&tcp("169.254.169.254:80")), None);
        assert!(listed.refusal(&tcp("[::1]:8080")).is_some());
        assert!(TargetPolicy::new(false, &["10.1.0.0/8".into()]).is_err());
    }
}
