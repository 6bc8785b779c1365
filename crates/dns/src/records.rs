//! From a service's snapshot to the names it owns in the zone and their precomputed answers.
//!
//! ```text
//!  <service>.<ns>.<d>              A, AAAA   every eligible endpoint's reachable addresses
//!  <instance>.<service>.<ns>.<d>   A, AAAA   that endpoint's (the SRV targets)
//!  _<port>._<tcp|udp>.<service>.<ns>.<d>
//!                                  SRV       priority = failover tier, weight, port, target;
//!                                            the targets' A/AAAA in the additional section
//!  DNS-SD (RFC 6763), with <ns>.<d> as the browsing domain:
//!  _services._dns-sd._udp.<ns>.<d> PTR       → _<service>._<tcp|udp>.<ns>.<d>  (one per type)
//!  _<service>._<tcp|udp>.<ns>.<d>  PTR       → <instance>._<service>._<tcp|udp>.<ns>.<d>
//!  <instance>._<service>._<tcp|udp>.<ns>.<d>
//!                                  SRV, TXT  its first port of that transport; labels k=v
//! ```
//!
//! Names follow what the service *has* (every endpoint, every named port), records follow
//! what is *eligible* now: a service whose endpoints are all draining still owns its names,
//! and answers NODATA rather than NXDOMAIN, never the old addresses.
//!
//! Every answer is encoded once here ([`Precomputed::encode`]): each record with the
//! additional records that serve it (an SRV's target addresses), so the query path can send
//! the whole answer with one copy or, when it does not fit, a window of its records with
//! their additional groups as space allows (see `precomputed`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::rdata::{A, AAAA, PTR, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use muster_core::{Endpoint, Label, ServiceSnapshot};

use crate::ZoneConfig;
use crate::precomputed::{Answer, Precomputed};
use crate::wire::{self, rtype};

/// A name in both forms: hickory's, for encoding, and lower-case wire bytes, for lookups.
#[derive(Clone)]
pub(crate) struct OwnerName {
    pub(crate) name: Name,
    pub(crate) wire: Box<[u8]>,
}

/// A name a unit of the zone owns, with its answers by record type (possibly none: the name
/// exists, every type is NODATA).
pub(crate) struct Owned {
    pub(crate) wire: Box<[u8]>,
    pub(crate) rrsets: Vec<(u16, Arc<Precomputed>)>,
}

/// What the zone needs to know to build names.
pub(crate) struct Builder<'a> {
    pub(crate) config: &'a ZoneConfig,
    pub(crate) apex: &'a [String],
}

/// An endpoint that may be answered, with the addresses this view may hand out.
struct Eligible<'a> {
    endpoint: &'a Endpoint,
    addresses: Vec<IpAddr>,
}

/// A service's contribution: its names, and the DNS-SD types it offers (`tcp`/`udp`).
pub(crate) struct ServiceNames {
    pub(crate) owned: Vec<Owned>,
    pub(crate) transports: BTreeSet<&'static str>,
}

impl Builder<'_> {
    /// `labels` followed by the apex.
    pub(crate) fn name(&self, labels: &[&str]) -> Option<OwnerName> {
        let all: Vec<&str> = labels
            .iter()
            .copied()
            .chain(self.apex.iter().map(String::as_str))
            .collect();
        let mut wire = Vec::new();
        wire::push_name(&mut wire, all.iter().copied());
        if wire.len() > wire::MAX_NAME_LEN {
            return None;
        }
        let mut name = Name::from_labels(all.iter().map(|l| l.as_bytes())).ok()?;
        name.set_fqdn(true);
        Some(OwnerName {
            name,
            wire: wire.into_boxed_slice(),
        })
    }

    fn ttl(&self) -> u32 {
        self.config.ttl_s
    }

    fn eligible<'e>(&self, endpoint: &'e Endpoint) -> Option<Eligible<'e>> {
        if !endpoint.serving.is_eligible(self.config.accept_degraded) {
            return None;
        }
        let addresses: Vec<IpAddr> = endpoint
            .addresses
            .iter()
            .filter(|address| match &address.scope {
                None => true,
                Some(scope) => self.config.reachable_scopes.contains(scope),
            })
            .map(|address| address.ip)
            .collect();
        (!addresses.is_empty()).then_some(Eligible { endpoint, addresses })
    }

    fn address_records(&self, owner: &Name, addresses: impl IntoIterator<Item = IpAddr>) -> (Vec<Record>, Vec<Record>) {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        let mut seen = BTreeSet::new();
        for ip in addresses {
            if !seen.insert(ip) {
                continue;
            }
            match ip {
                IpAddr::V4(ip) => v4.push(Record::from_rdata(owner.clone(), self.ttl(), RData::A(A(ip)))),
                IpAddr::V6(ip) => v6.push(Record::from_rdata(owner.clone(), self.ttl(), RData::AAAA(AAAA(ip)))),
            }
        }
        (v4, v6)
    }

    /// A name's A and AAAA answers (none where there are no addresses of that family).
    fn address_rrsets(&self, owner: &OwnerName, addresses: impl IntoIterator<Item = IpAddr>) -> Owned {
        let (v4, v6) = self.address_records(&owner.name, addresses);
        let mut rrsets = Vec::new();
        for (rtype, records) in [(rtype::A, v4), (rtype::AAAA, v6)] {
            if !records.is_empty()
                && let Some(answer) = precompute(&owner.name, rtype, records.into_iter().map(Answer::alone).collect())
            {
                rrsets.push((rtype, answer));
            }
        }
        Owned {
            wire: owner.wire.clone(),
            rrsets,
        }
    }

    /// Every name a service owns in the zone.
    pub(crate) fn service(&self, snapshot: &ServiceSnapshot) -> ServiceNames {
        let key = snapshot.key();
        let (service, namespace) = (key.service.as_str(), key.namespace.as_str());
        let mut owned = Vec::new();
        let mut transports = BTreeSet::new();
        let Some(service_name) = self.name(&[service, namespace]) else {
            return ServiceNames { owned, transports };
        };
        let eligible: Vec<Eligible<'_>> = snapshot.iter().filter_map(|e| self.eligible(e)).collect();
        let by_instance: BTreeMap<&str, &Eligible<'_>> =
            eligible.iter().map(|e| (e.endpoint.instance.as_str(), e)).collect();
        owned.push(self.address_rrsets(&service_name, eligible.iter().flat_map(|e| e.addresses.iter().copied())));

        // Instance names: every endpoint's exists; only an eligible one has addresses.
        let mut targets: BTreeMap<&str, (OwnerName, Vec<IpAddr>)> = BTreeMap::new();
        for endpoint in snapshot.iter() {
            if let Some(target) = self.name(&[endpoint.instance.as_str(), service, namespace]) {
                targets.insert(endpoint.instance.as_str(), (target, Vec::new()));
            }
        }
        for e in &eligible {
            if let Some((_, addresses)) = targets.get_mut(e.endpoint.instance.as_str()) {
                addresses.clone_from(&e.addresses);
            }
        }
        for (target, addresses) in targets.values() {
            owned.push(self.address_rrsets(target, addresses.iter().copied()));
        }

        // SRV per named port, over every port name any endpoint has.
        let mut ports: BTreeSet<(&str, &'static str)> = BTreeSet::new();
        for endpoint in snapshot.iter() {
            for port in endpoint.ports.iter() {
                ports.insert((port.name.as_str(), port.protocol.transport()));
                transports.insert(port.protocol.transport());
            }
        }
        for (port_name, transport) in ports {
            let (port_label, transport_label) = (format!("_{port_name}"), format!("_{transport}"));
            let Some(owner) = self.name(&[&port_label, &transport_label, service, namespace]) else {
                continue;
            };
            let mut answers = Vec::new();
            for e in &eligible {
                let Some(port) = e
                    .endpoint
                    .ports
                    .iter()
                    .find(|p| p.name.as_str() == port_name && p.protocol.transport() == transport)
                else {
                    continue;
                };
                let Some((target, _)) = targets.get(e.endpoint.instance.as_str()) else {
                    continue;
                };
                let (v4, v6) = self.address_records(&target.name, e.addresses.iter().copied());
                answers.push(Answer {
                    record: self.srv(&owner.name, e.endpoint, port.port, &target.name),
                    additionals: v4.into_iter().chain(v6).collect(),
                });
            }
            owned.push(self.owned_with(&owner, rtype::SRV, answers));
        }

        // DNS-SD: one service type per transport, one instance per endpoint offering it.
        let service_type = format!("_{service}");
        for &transport in &transports {
            let transport_label = format!("_{transport}");
            let Some(type_name) = self.name(&[&service_type, &transport_label, namespace]) else {
                continue;
            };
            let mut pointers = Vec::new();
            for endpoint in snapshot.iter() {
                let Some(port) = endpoint.ports.iter().find(|p| p.protocol.transport() == transport) else {
                    continue;
                };
                let instance = endpoint.instance.as_str();
                let Some(instance_name) = self.name(&[instance, &service_type, &transport_label, namespace]) else {
                    continue;
                };
                let (Some(e), Some((target, _))) = (by_instance.get(instance), targets.get(instance)) else {
                    owned.push(Owned {
                        wire: instance_name.wire,
                        rrsets: Vec::new(),
                    });
                    continue;
                };
                let srv = self.srv(&instance_name.name, endpoint, port.port, &target.name);
                let txt = self.txt(&instance_name.name, endpoint);
                let (v4, v6) = self.address_records(&target.name, e.addresses.iter().copied());
                let addresses: Vec<Record> = v4.into_iter().chain(v6).collect();
                let mut rrsets = Vec::new();
                let srv_answer = Answer {
                    record: srv.clone(),
                    additionals: addresses.clone(),
                };
                if let Some(answer) = precompute(&instance_name.name, RecordType::SRV, vec![srv_answer]) {
                    rrsets.push((rtype::SRV, answer));
                }
                if let Some(answer) = precompute(&instance_name.name, RecordType::TXT, vec![Answer::alone(txt.clone())])
                {
                    rrsets.push((rtype::TXT, answer));
                }
                owned.push(Owned {
                    wire: instance_name.wire.clone(),
                    rrsets,
                });
                // RFC 6763 section 12.1: the SRV, TXT and addresses of every instance.
                pointers.push(Answer {
                    record: Record::from_rdata(
                        type_name.name.clone(),
                        self.ttl(),
                        RData::PTR(PTR(instance_name.name.clone())),
                    ),
                    additionals: [srv, txt].into_iter().chain(addresses).collect(),
                });
            }
            owned.push(self.owned_with(&type_name, rtype::PTR, pointers));
        }
        ServiceNames { owned, transports }
    }

    /// The namespace's DNS-SD service-type enumeration (RFC 6763 section 9).
    pub(crate) fn browse<'t>(
        &self,
        namespace: &Label,
        types: impl IntoIterator<Item = (&'t str, &'t str)>,
    ) -> Vec<Owned> {
        let namespace = namespace.as_str();
        let Some(owner) = self.name(&["_services", "_dns-sd", "_udp", namespace]) else {
            return Vec::new();
        };
        let pointers = types
            .into_iter()
            .filter_map(|(service, transport)| {
                self.name(&[&format!("_{service}"), &format!("_{transport}"), namespace])
            })
            .map(|target| {
                Answer::alone(Record::from_rdata(
                    owner.name.clone(),
                    self.ttl(),
                    RData::PTR(PTR(target.name)),
                ))
            })
            .collect();
        vec![self.owned_with(&owner, rtype::PTR, pointers)]
    }

    fn owned_with(&self, owner: &OwnerName, rtype: u16, answers: Vec<Answer>) -> Owned {
        let mut rrsets = Vec::new();
        if !answers.is_empty()
            && let Some(answer) = precompute(&owner.name, RecordType::from(rtype), answers)
        {
            rrsets.push((rtype, answer));
        }
        Owned {
            wire: owner.wire.clone(),
            rrsets,
        }
    }

    fn srv(&self, owner: &Name, endpoint: &Endpoint, port: u16, target: &Name) -> Record {
        let srv = SRV::new(
            u16::from(endpoint.locality.priority),
            endpoint.weight,
            port,
            target.clone(),
        );
        Record::from_rdata(owner.clone(), self.ttl(), RData::SRV(srv))
    }

    /// The endpoint's labels as `key=value` strings; RFC 6763 section 6.1 wants one empty
    /// string when there are none.
    fn txt(&self, owner: &Name, endpoint: &Endpoint) -> Record {
        let mut strings: Vec<String> = endpoint
            .labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            // A character-string holds 255 octets; the default limits always fit, a
            // configured larger value is left out rather than cut.
            .filter(|pair| pair.len() <= 255)
            .collect();
        if strings.is_empty() {
            strings.push(String::new());
        }
        Record::from_rdata(owner.clone(), self.ttl(), RData::TXT(TXT::new(strings)))
    }
}

/// Encodes one answer, shared by every node that holds it.
fn precompute(qname: &Name, qtype: impl Into<RecordType>, answers: Vec<Answer>) -> Option<Arc<Precomputed>> {
    Precomputed::encode(qname, qtype, answers).map(Arc::new)
}
