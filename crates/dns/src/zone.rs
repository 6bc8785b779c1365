//! The zone: every name of one tenant's view with its precomputed answers, and the answer
//! function over it. Pure: no I/O, no clock, no locks.
//!
//! ```text
//!  update(service, snapshot) ──▶ Builder ──▶ names the service owns (+ their answers)
//!        │ replaces the service's old names; rebuilds its namespace's DNS-SD browse list
//!        ▼
//!  names: lower-case wire name ──▶ Node { answers by type, how many owned names at/below }
//!        ▲
//!  answer(packet, transport, rotation) ──parse──▶ lookup ──▶ copy the precomputed bytes (the
//!        whole answer, or a rotating window of it), patch the ID, flags and question;
//!        or NODATA / NXDOMAIN with the SOA; or REFUSED, FORMERR, drop
//! ```
//!
//! # Large RRsets (SPEC D2)
//! An answer that fits the limit (UDP: the client's buffer, at most `max_udp_payload`; TCP:
//! 65,535 bytes) and, over UDP, holds at most `max_answers` records is sent whole. Otherwise:
//! - **Cut by size, over UDP** (`large_rrsets = "truncate"`, the default): TC set, as RFC 2181
//!   section 9 asks when an RRset is cut, so the resolver asks again over TCP, which carries
//!   everything up to 64 KiB. The records that fit travel too, from the first, the same ones
//!   every time: a client that acts on a truncated answer anyway (HAProxy over UDP) sees a
//!   steady set rather than one that changes with every answer.
//! - **Cut by size, `large_rrsets = "rotate"`, or cut by the `max_answers` count** (the
//!   operator's cap, as Consul's `a_record_limit`): a window, the records from a start chosen
//!   by the caller's `rotation`, wrapping round, as many as fit and (over UDP) at most
//!   `max_answers`, TC clear: the window is the answer this server gives, and successive
//!   queries spread over every record. TC is set only when not even one record fits.
//! - **Additional records** (an SRV's target addresses) travel with their records as space
//!   allows; leaving some out never sets TC (RFC 2181 section 9).
//! - Over TCP an RRset beyond 64 KiB is a window too, TC clear: there is no larger transport
//!   to retry on.
//!
//! A name exists (NOERROR, possibly NODATA) while some owned name is at or below it, so empty
//! non-terminals like `<ns>.<d>` or `_tcp.<service>.<ns>.<d>` never answer NXDOMAIN (RFC
//! 8020): each node counts the owned names at or below it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use muster_core::{Label, Revision, ServiceKey, ServiceSnapshot};

use crate::precomputed::{self, Precomputed, Selection};
use crate::records::{Builder, Owned};
use crate::wire::{self, HEADER_LEN, Query, QueryError, Rcode, class, rtype};
use crate::{ConfigError, LargeRrsets, ZoneConfig};

/// Largest DNS message: TCP's two-byte length prefix.
const MAX_MESSAGE: usize = 65_535;

/// How an answer travels: UDP is bounded by the client's buffer, TCP by 64 KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Datagrams: an RRset over the client's size sets TC (or, configured so, is answered
    /// with a window of it); one over `max_answers` is answered with a window.
    Udp,
    /// A stream: every answer is complete up to 64 KiB, a window of the RRset beyond.
    Tcp,
}

/// What [`Zone::answer`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A reply is in the output buffer.
    Answered {
        /// Its response code.
        rcode: Rcode,
        /// Whether TC is set (not even one record fitted: the client should retry over TCP).
        /// A window of a large RRset is not truncation.
        truncated: bool,
    },
    /// Nothing to send: the packet is not a query.
    Dropped(QueryError),
}

#[derive(Default)]
struct Node {
    /// Owned names at or below this one.
    refs: u32,
    answers: Vec<(u16, Arc<Precomputed>)>,
}

/// One tenant's view under one domain. See the module docs.
pub struct Zone {
    config: ZoneConfig,
    apex_labels: Vec<String>,
    apex: Box<[u8]>,
    revision: Revision,
    /// The SOA record (owner = apex, uncompressed), re-encoded when the revision changes.
    soa: Vec<u8>,
    /// Names owned: per namespace, per service; and each namespace's browse list.
    services: BTreeMap<Label, BTreeMap<Label, ServiceUnit>>,
    browse: BTreeMap<Label, Vec<Box<[u8]>>>,
    names: HashMap<Box<[u8]>, Node>,
}

struct ServiceUnit {
    owned: Vec<Box<[u8]>>,
    transports: BTreeSet<&'static str>,
}

/// An SOA's refresh, retry and expire: a secondary server is not how Muster replicates, so
/// these only need to be plausible (RFC 1912 ranges).
const SOA_REFRESH_S: u32 = 3600;
const SOA_RETRY_S: u32 = 600;
const SOA_EXPIRE_S: u32 = 86_400;

impl Zone {
    /// An empty zone (every name below the apex is NXDOMAIN) at revision 0.
    pub fn new(config: ZoneConfig) -> Result<Zone, ConfigError> {
        config.validate()?;
        let apex_labels = crate::config::domain_labels(&config.domain)?;
        let mut apex = Vec::new();
        wire::push_name(&mut apex, apex_labels.iter().map(String::as_str));
        let mut zone = Zone {
            config,
            apex_labels,
            apex: apex.into_boxed_slice(),
            revision: Revision::ZERO,
            soa: Vec::new(),
            services: BTreeMap::new(),
            browse: BTreeMap::new(),
            names: HashMap::new(),
        };
        zone.set_revision(Revision::ZERO);
        Ok(zone)
    }

    /// The settings.
    pub fn config(&self) -> &ZoneConfig {
        &self.config
    }

    /// The registry revision the zone reflects (the SOA serial, modulo 2^32).
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// How many names exist in the zone (owned names and empty non-terminals).
    pub fn name_count(&self) -> usize {
        self.names.len()
    }

    /// Records the registry revision the zone now reflects.
    pub fn set_revision(&mut self, revision: Revision) {
        self.revision = revision;
        let ttl = self.config.negative_ttl_s;
        let mut soa = Vec::with_capacity(2 * self.apex.len() + 48);
        soa.extend_from_slice(&self.apex);
        soa.extend_from_slice(&rtype::SOA.to_be_bytes());
        soa.extend_from_slice(&class::IN.to_be_bytes());
        soa.extend_from_slice(&ttl.to_be_bytes());
        let rname = b"\x0ahostmaster";
        let rdlength = self.apex.len() + rname.len() + self.apex.len() + 20;
        soa.extend_from_slice(&(rdlength as u16).to_be_bytes());
        // MNAME: the apex itself (there is no separate primary); RNAME: hostmaster.<apex>.
        soa.extend_from_slice(&self.apex);
        soa.extend_from_slice(rname);
        soa.extend_from_slice(&self.apex);
        // The serial is the revision's low 32 bits: serial arithmetic (RFC 1982) tolerates
        // the wrap.
        let serial = revision.0 as u32;
        for value in [serial, SOA_REFRESH_S, SOA_RETRY_S, SOA_EXPIRE_S, ttl] {
            soa.extend_from_slice(&value.to_be_bytes());
        }
        self.soa = soa;
    }

    /// Replaces what the zone holds for one service: `None` when the registry no longer
    /// knows it. A service of another tenant is ignored (SPEC S3). Only this service's names
    /// and its namespace's browse list are rebuilt.
    pub fn update(&mut self, key: &ServiceKey, snapshot: Option<&ServiceSnapshot>) {
        if key.tenant != self.config.tenant {
            return;
        }
        let old = self
            .services
            .get_mut(&key.namespace)
            .and_then(|services| services.remove(&key.service));
        if let Some(old) = old {
            self.forget(&old.owned);
        }
        if let Some(snapshot) = snapshot {
            let built = self.builder().service(snapshot);
            let owned = self.adopt(built.owned);
            let unit = ServiceUnit {
                owned,
                transports: built.transports,
            };
            self.services
                .entry(key.namespace.clone())
                .or_default()
                .insert(key.service.clone(), unit);
        }
        self.rebuild_browse(&key.namespace);
    }

    /// Forgets everything (a reset), keeping the settings and the revision.
    pub fn clear(&mut self) {
        self.services.clear();
        self.browse.clear();
        self.names.clear();
    }

    fn builder(&self) -> Builder<'_> {
        Builder {
            config: &self.config,
            apex: &self.apex_labels,
        }
    }

    fn rebuild_browse(&mut self, namespace: &Label) {
        if let Some(old) = self.browse.remove(namespace) {
            self.forget(&old);
        }
        let Some(services) = self.services.get(namespace).filter(|services| !services.is_empty()) else {
            self.services.remove(namespace);
            return;
        };
        let types: Vec<(&str, &str)> = services
            .iter()
            .flat_map(|(service, unit)| unit.transports.iter().map(move |t| (service.as_str(), *t)))
            .collect();
        let built = self.builder().browse(namespace, types);
        let owned = self.adopt(built);
        self.browse.insert(namespace.clone(), owned);
    }

    /// Puts owned names in the tree, counting each at every ancestor down to the apex.
    fn adopt(&mut self, owned: Vec<Owned>) -> Vec<Box<[u8]>> {
        let mut names = Vec::with_capacity(owned.len());
        for Owned { wire: name, rrsets } in owned {
            let mut at: &[u8] = &name;
            loop {
                self.names.entry(Box::from(at)).or_default().refs += 1;
                if *at == *self.apex {
                    break;
                }
                match wire::parent(at) {
                    Some(parent) => at = parent,
                    None => break,
                }
            }
            if let Some(node) = self.names.get_mut(&name) {
                node.answers.extend(rrsets);
            }
            names.push(name);
        }
        names
    }

    /// Takes owned names out of the tree, and the empty non-terminals that only they held.
    fn forget(&mut self, owned: &[Box<[u8]>]) {
        for name in owned {
            if let Some(node) = self.names.get_mut(name) {
                node.answers.clear();
            }
            let mut at: &[u8] = name;
            loop {
                if let Some(node) = self.names.get_mut(at) {
                    node.refs -= 1;
                    if node.refs == 0 {
                        self.names.remove(at);
                    }
                }
                if *at == *self.apex {
                    break;
                }
                match wire::parent(at) {
                    Some(parent) => at = parent,
                    None => break,
                }
            }
        }
    }

    /// Answers one packet into `out` (cleared first). Never panics, whatever the bytes.
    ///
    /// `rotation` picks where the window of a large RRset starts (see the module docs): the
    /// caller's counter, so that successive queries get different records and a test can
    /// say which. It has no effect on answers sent whole.
    pub fn answer(&self, packet: &[u8], transport: Transport, rotation: u32, out: &mut Vec<u8>) -> Outcome {
        out.clear();
        let query = match wire::parse(packet) {
            Ok(query) => query,
            Err(error) => {
                return match error.reply() {
                    Some(rcode) => {
                        error_header(packet, rcode, out);
                        Outcome::Answered {
                            rcode,
                            truncated: false,
                        }
                    }
                    None => Outcome::Dropped(error),
                };
            }
        };
        let limit = match (transport, query.edns) {
            (Transport::Tcp, _) => MAX_MESSAGE,
            (Transport::Udp, None) => usize::from(crate::config::CLASSIC_UDP_PAYLOAD),
            (Transport::Udp, Some(edns)) => usize::from(
                edns.udp_size
                    .clamp(crate::config::CLASSIC_UDP_PAYLOAD, self.config.max_udp_payload),
            ),
        };
        let cap = match transport {
            Transport::Udp => usize::from(self.config.max_answers),
            Transport::Tcp => usize::from(u16::MAX),
        };
        let reply = Reply {
            packet,
            query: &query,
            limit,
            cap,
            rotation,
            payload: self.config.max_udp_payload,
            truncate: transport == Transport::Udp && self.config.large_rrsets == LargeRrsets::Truncate,
        };
        if query.edns.is_some_and(|edns| edns.version > 0) {
            return reply.bare(Rcode::BadVers, out);
        }
        if !matches!(query.qclass, class::IN | class::ANY) || matches!(query.qtype, rtype::AXFR | rtype::IXFR) {
            return reply.bare(Rcode::Refused, out);
        }
        if query.qtype == rtype::OPT {
            return reply.bare(Rcode::FormErr, out);
        }
        if !query.is_within(&self.apex) {
            return reply.bare(Rcode::Refused, out);
        }
        let name = query.lower_name();
        if *name == *self.apex {
            return match query.qtype {
                rtype::SOA | rtype::ANY => reply.with_soa(Section::Answer, Rcode::NoError, &self.soa, out),
                _ => reply.with_soa(Section::Authority, Rcode::NoError, &self.soa, out),
            };
        }
        let Some(node) = self.names.get(name) else {
            return reply.with_soa(Section::Authority, Rcode::NxDomain, &self.soa, out);
        };
        // ANY gets one RRset, as RFC 8482 allows: the first the name has.
        let found = node
            .answers
            .iter()
            .find(|(t, _)| *t == query.qtype || query.qtype == rtype::ANY);
        match found {
            Some((_, answer)) => reply.precomputed(answer, out),
            None => reply.with_soa(Section::Authority, Rcode::NoError, &self.soa, out),
        }
    }
}

enum Section {
    Answer,
    Authority,
}

/// Writes replies to one parsed query.
struct Reply<'a> {
    packet: &'a [u8],
    query: &'a Query,
    /// The largest reply the transport and the client allow.
    limit: usize,
    /// The most answer records of one RRset: `max_answers` over UDP, ANCOUNT's maximum over
    /// TCP.
    cap: usize,
    /// Where a window of a large RRset starts ([`precomputed::start`]).
    rotation: u32,
    /// Our UDP payload size, for the OPT record.
    payload: u16,
    /// An RRset cut by size sets TC (UDP with `large_rrsets = "truncate"`).
    truncate: bool,
}

impl Reply<'_> {
    fn opt_len(&self) -> usize {
        if self.query.edns.is_some() { 11 } else { 0 }
    }

    /// Header and echoed question, with the given counts.
    fn head(&self, rcode: Rcode, counts: [u16; 3], out: &mut Vec<u8>) {
        out.extend_from_slice(&self.query.id.to_be_bytes());
        out.push(self.flags_hi());
        out.push(self.flags_lo(rcode));
        out.extend_from_slice(&1u16.to_be_bytes());
        let additional = counts[2] + u16::from(self.query.edns.is_some());
        for count in [counts[0], counts[1], additional] {
            out.extend_from_slice(&count.to_be_bytes());
        }
        out.extend_from_slice(&self.packet[HEADER_LEN..self.query.question_end]);
    }

    /// QR, AA, the query's RD.
    fn flags_hi(&self) -> u8 {
        0x84 | u8::from(self.query.rd)
    }

    /// The query's CD, the low four bits of the rcode.
    fn flags_lo(&self, rcode: Rcode) -> u8 {
        (if self.query.cd { 0x10 } else { 0 }) | (rcode.value() & 0x0f) as u8
    }

    fn finish(&self, rcode: Rcode, truncated: bool, out: &mut Vec<u8>) -> Outcome {
        if truncated {
            out[2] |= 0x02;
        }
        if self.query.edns.is_some() {
            wire::push_opt(out, self.payload, rcode);
        }
        Outcome::Answered { rcode, truncated }
    }

    /// Header, question, OPT: for errors and truncation.
    fn bare(&self, rcode: Rcode, out: &mut Vec<u8>) -> Outcome {
        out.clear();
        self.head(rcode, [0, 0, 0], out);
        self.finish(rcode, false, out)
    }

    fn truncated(&self, rcode: Rcode, out: &mut Vec<u8>) -> Outcome {
        out.clear();
        self.head(rcode, [0, 0, 0], out);
        self.finish(rcode, true, out)
    }

    fn with_soa(&self, section: Section, rcode: Rcode, soa: &[u8], out: &mut Vec<u8>) -> Outcome {
        let counts = match section {
            Section::Answer => [1, 0, 0],
            Section::Authority => [0, 1, 0],
        };
        self.head(rcode, counts, out);
        if out.len() + soa.len() + self.opt_len() > self.limit {
            return self.truncated(rcode, out);
        }
        out.extend_from_slice(soa);
        self.finish(rcode, false, out)
    }

    fn precomputed(&self, answer: &Precomputed, out: &mut Vec<u8>) -> Outcome {
        // Under the count cap, a set cut by size starts at the first record every time.
        let steady = self.truncate && answer.len() <= self.cap;
        let start = match steady {
            true => 0,
            false => precomputed::start(self.rotation, answer.len()),
        };
        match answer.select(start, self.limit, self.opt_len(), self.cap) {
            Selection::Whole => {
                out.extend_from_slice(answer.whole());
                out[0..2].copy_from_slice(&self.query.id.to_be_bytes());
                out[2] = self.flags_hi();
                out[3] = self.flags_lo(Rcode::NoError);
                // The question as the client spelled it: the same length as the stored
                // lower-case one, so the compression pointers into it still hold.
                let question = &self.packet[HEADER_LEN..self.query.question_end];
                out[HEADER_LEN..HEADER_LEN + question.len()].copy_from_slice(question);
                let additional =
                    u16::from_be_bytes([out[10], out[11]]).saturating_add(u16::from(self.query.edns.is_some()));
                out[10..12].copy_from_slice(&additional.to_be_bytes());
                self.finish(Rcode::NoError, false, out)
            }
            Selection::Window { answers: 0, .. } => self.truncated(Rcode::NoError, out),
            Selection::Window { start, answers, groups } => {
                debug_assert_eq!(answer.question_end(), self.query.question_end);
                self.head(Rcode::NoError, [0, 0, 0], out);
                let (answered, additional) = answer.write_window(start, answers, groups, out);
                out[6..8].copy_from_slice(&answered.to_be_bytes());
                let additional = additional.saturating_add(u16::from(self.query.edns.is_some()));
                out[10..12].copy_from_slice(&additional.to_be_bytes());
                self.finish(Rcode::NoError, steady && answers < answer.len(), out)
            }
        }
    }
}

/// The reply to a query that did not parse: the ID, QR, the opcode, RD, the rcode, no
/// sections (there may be no question to echo).
fn error_header(packet: &[u8], rcode: Rcode, out: &mut Vec<u8>) {
    out.extend_from_slice(&packet[0..2]);
    out.push(0x80 | (packet[2] & 0x79));
    out.push((rcode.value() & 0x0f) as u8);
    out.extend_from_slice(&[0; 8]);
}

#[cfg(test)]
#[path = "zone_tests.rs"]
mod tests;
