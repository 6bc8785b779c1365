//! The query side of the wire format, parsed by hand on the hot path: no allocation, every
//! length checked against the packet, every loop bounded by the packet's size.
//!
//! ```text
//!  header (12) │ question: name (labels, no pointers) type class │ answer/authority RRs
//!              │                                                  │ (skipped) │ additional:
//!              │                                                  │           │ OPT (EDNS)
//! ```
//!
//! What a query may not be, and what it earns ([`QueryError::reply`]): too short to hold a
//! header, or a response itself → dropped (answering responses invites loops); an opcode
//! other than QUERY → NOTIMP; anything else malformed → FORMERR.

/// The DNS header's length.
pub(crate) const HEADER_LEN: usize = 12;
/// RFC 1035: a name holds at most 255 octets on the wire.
pub(crate) const MAX_NAME_LEN: usize = 255;

/// Record types this server knows by number.
pub(crate) mod rtype {
    pub(crate) const A: u16 = 1;
    pub(crate) const SOA: u16 = 6;
    pub(crate) const PTR: u16 = 12;
    pub(crate) const TXT: u16 = 16;
    pub(crate) const AAAA: u16 = 28;
    pub(crate) const SRV: u16 = 33;
    pub(crate) const OPT: u16 = 41;
    pub(crate) const IXFR: u16 = 251;
    pub(crate) const AXFR: u16 = 252;
    pub(crate) const ANY: u16 = 255;
}

/// Classes this server knows by number.
pub(crate) mod class {
    pub(crate) const IN: u16 = 1;
    pub(crate) const ANY: u16 = 255;
}

/// A response code, including EDNS's extended BADVERS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rcode {
    /// The answer (possibly empty: NODATA).
    NoError,
    /// The query was malformed.
    FormErr,
    /// The name does not exist in the zone.
    NxDomain,
    /// The opcode is not supported.
    NotImp,
    /// Outside the zone, another class, or a zone transfer.
    Refused,
    /// The query's EDNS version is above 0 (RFC 6891).
    BadVers,
}

impl Rcode {
    /// The 12-bit value (the low 4 bits go in the header, the rest in the OPT record).
    pub fn value(self) -> u16 {
        match self {
            Rcode::NoError => 0,
            Rcode::FormErr => 1,
            Rcode::NxDomain => 3,
            Rcode::NotImp => 4,
            Rcode::Refused => 5,
            Rcode::BadVers => 16,
        }
    }
}

/// Why a packet is not a query this server can answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// Shorter than a DNS header.
    #[error("packet of {0} bytes is shorter than a DNS header")]
    TooShort(usize),
    /// The QR bit is set: a response, not a query.
    #[error("packet is a response, not a query")]
    NotAQuery,
    /// An opcode other than QUERY (0).
    #[error("opcode {0} is not supported")]
    Opcode(u8),
    /// QDCOUNT is not 1.
    #[error("{0} questions; exactly one is supported")]
    QuestionCount(u16),
    /// The question's name is cut short, compressed, or longer than 255 octets.
    #[error("the question's name is malformed")]
    BadName,
    /// The packet ends inside a field.
    #[error("the packet ends inside a record")]
    Truncated,
    /// An OPT record that is not at the root, or a second one.
    #[error("the EDNS OPT record is malformed or repeated")]
    BadOpt,
}

impl QueryError {
    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            QueryError::TooShort(_) => "too_short",
            QueryError::NotAQuery => "not_a_query",
            QueryError::Opcode(_) => "unsupported_opcode",
            QueryError::QuestionCount(_) => "question_count",
            QueryError::BadName => "bad_name",
            QueryError::Truncated => "truncated",
            QueryError::BadOpt => "bad_opt",
        }
    }

    /// What to answer: `None` drops the packet.
    pub fn reply(&self) -> Option<Rcode> {
        match self {
            QueryError::TooShort(_) | QueryError::NotAQuery => None,
            QueryError::Opcode(_) => Some(Rcode::NotImp),
            _ => Some(Rcode::FormErr),
        }
    }
}

/// The query's EDNS(0) options that matter to an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Edns {
    /// The client's UDP buffer size.
    pub(crate) udp_size: u16,
    /// The EDNS version asked for.
    pub(crate) version: u8,
}

/// A parsed query: where its question lies in the packet, and its name in lower case.
pub(crate) struct Query {
    pub(crate) id: u16,
    /// The query's RD bit (0x01) and CD bit (0x10 of the second byte), echoed in answers.
    pub(crate) rd: bool,
    pub(crate) cd: bool,
    /// The question's bytes (name, type, class) in the packet: echoed as sent.
    pub(crate) question_end: usize,
    pub(crate) qtype: u16,
    pub(crate) qclass: u16,
    pub(crate) edns: Option<Edns>,
    lower: [u8; MAX_NAME_LEN],
    lower_len: usize,
    /// Offsets in `lower` at which a label starts, `labels` of them.
    label_starts: [u8; 128],
    labels: usize,
}

impl Query {
    /// The question's name on the wire, in lower case.
    pub(crate) fn lower_name(&self) -> &[u8] {
        &self.lower[..self.lower_len]
    }

    /// Whether the name is `apex` or below it (`apex` in lower-case wire form).
    pub(crate) fn is_within(&self, apex: &[u8]) -> bool {
        let name = self.lower_name();
        if apex.len() > name.len() || !name.ends_with(apex) {
            return false;
        }
        let start = name.len() - apex.len();
        start == 0 || self.label_starts[..self.labels].contains(&(start as u8))
    }
}

fn be16(packet: &[u8], at: usize) -> Result<u16, QueryError> {
    match packet.get(at..at + 2) {
        Some(bytes) => Ok(u16::from_be_bytes([bytes[0], bytes[1]])),
        None => Err(QueryError::Truncated),
    }
}

/// Parses a query. Never panics, whatever the bytes.
pub(crate) fn parse(packet: &[u8]) -> Result<Query, QueryError> {
    if packet.len() < HEADER_LEN {
        return Err(QueryError::TooShort(packet.len()));
    }
    if packet[2] & 0x80 != 0 {
        return Err(QueryError::NotAQuery);
    }
    let opcode = (packet[2] >> 3) & 0x0f;
    if opcode != 0 {
        return Err(QueryError::Opcode(opcode));
    }
    let questions = be16(packet, 4)?;
    if questions != 1 {
        return Err(QueryError::QuestionCount(questions));
    }
    let mut query = Query {
        id: u16::from_be_bytes([packet[0], packet[1]]),
        rd: packet[2] & 0x01 != 0,
        cd: packet[3] & 0x10 != 0,
        question_end: 0,
        qtype: 0,
        qclass: 0,
        edns: None,
        lower: [0; MAX_NAME_LEN],
        lower_len: 0,
        label_starts: [0; 128],
        labels: 0,
    };
    let mut at = HEADER_LEN;
    loop {
        let len = usize::from(*packet.get(at).ok_or(QueryError::BadName)?);
        if len == 0 {
            if query.lower_len + 1 > MAX_NAME_LEN {
                return Err(QueryError::BadName);
            }
            query.lower[query.lower_len] = 0;
            query.lower_len += 1;
            at += 1;
            break;
        }
        // 0xc0: a compression pointer (no earlier name to point at); 0x40/0x80: reserved.
        if len > 63 {
            return Err(QueryError::BadName);
        }
        let label = packet.get(at + 1..at + 1 + len).ok_or(QueryError::BadName)?;
        // The label, its length byte and the root byte still to come must fit 255.
        if query.lower_len + 1 + len + 1 > MAX_NAME_LEN {
            return Err(QueryError::BadName);
        }
        query.label_starts[query.labels] = query.lower_len as u8;
        query.labels += 1;
        query.lower[query.lower_len] = len as u8;
        for (slot, byte) in query.lower[query.lower_len + 1..].iter_mut().zip(label) {
            *slot = byte.to_ascii_lowercase();
        }
        query.lower_len += 1 + len;
        at += 1 + len;
    }
    query.qtype = be16(packet, at)?;
    query.qclass = be16(packet, at + 2)?;
    at += 4;
    query.question_end = at;
    // Answer and authority records have no business in a query: skip them. Then look for
    // the OPT record among the additional ones.
    let skipped = usize::from(be16(packet, 6)?) + usize::from(be16(packet, 8)?);
    for _ in 0..skipped {
        at = skip_record(packet, at)?.next;
    }
    for _ in 0..be16(packet, 10)? {
        let record = skip_record(packet, at)?;
        if record.rtype == rtype::OPT {
            if !record.root_owner || query.edns.is_some() {
                return Err(QueryError::BadOpt);
            }
            query.edns = Some(Edns {
                udp_size: record.class,
                version: (record.ttl >> 16) as u8,
            });
        }
        at = record.next;
    }
    Ok(query)
}

struct Skipped {
    rtype: u16,
    class: u16,
    ttl: u32,
    root_owner: bool,
    next: usize,
}

/// Steps over one resource record, reading its fixed fields.
fn skip_record(packet: &[u8], mut at: usize) -> Result<Skipped, QueryError> {
    let root_owner = packet.get(at) == Some(&0);
    // A name: labels up to a root byte or a pointer. Each step consumes at least a byte, so
    // the loop ends within the packet.
    loop {
        let len = *packet.get(at).ok_or(QueryError::Truncated)?;
        match len {
            0 => {
                at += 1;
                break;
            }
            1..=63 => at += 1 + usize::from(len),
            _ if len & 0xc0 == 0xc0 => {
                at += 2;
                break;
            }
            _ => return Err(QueryError::Truncated),
        }
    }
    let rtype = be16(packet, at)?;
    let class = be16(packet, at + 2)?;
    let ttl = (u32::from(be16(packet, at + 4)?) << 16) | u32::from(be16(packet, at + 6)?);
    let rdlength = usize::from(be16(packet, at + 8)?);
    let next = at + 10 + rdlength;
    if next > packet.len() {
        return Err(QueryError::Truncated);
    }
    Ok(Skipped {
        rtype,
        class,
        ttl,
        root_owner,
        next,
    })
}

/// Writes a name given as labels in wire form.
pub(crate) fn push_name<'a>(out: &mut Vec<u8>, labels: impl IntoIterator<Item = &'a str>) {
    for label in labels {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

/// The name one label up (`b.c.` for `a.b.c.`), or `None` at the root.
pub(crate) fn parent(name: &[u8]) -> Option<&[u8]> {
    let len = usize::from(*name.first()?);
    if len == 0 { None } else { name.get(1 + len..) }
}

/// The 11-byte EDNS(0) OPT record of an answer: our payload size, an extended rcode, version 0.
pub(crate) fn push_opt(out: &mut Vec<u8>, udp_payload: u16, rcode: Rcode) {
    out.push(0);
    out.extend_from_slice(&rtype::OPT.to_be_bytes());
    out.extend_from_slice(&udp_payload.to_be_bytes());
    out.push((rcode.value() >> 4) as u8);
    out.extend_from_slice(&[0, 0, 0, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &[&str], qtype: u16) -> Vec<u8> {
        let mut packet = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        push_name(&mut packet, name.iter().copied());
        packet.extend_from_slice(&qtype.to_be_bytes());
        packet.extend_from_slice(&class::IN.to_be_bytes());
        packet
    }

    #[test]
    fn a_query_parses_with_its_name_lowered_and_its_edns() {
        let mut packet = query(&["API", "prod", "muster"], rtype::SRV);
        packet[11] = 1;
        push_opt(&mut packet, 4096, Rcode::NoError);
        let parsed = parse(&packet).unwrap();
        assert_eq!(parsed.id, 0x1234);
        assert!(parsed.rd && !parsed.cd);
        assert_eq!(parsed.lower_name(), b"\x03api\x04prod\x06muster\x00");
        assert_eq!(parsed.qtype, rtype::SRV);
        assert_eq!(
            parsed.edns,
            Some(Edns {
                udp_size: 4096,
                version: 0
            })
        );
        assert!(parsed.is_within(b"\x06muster\x00"));
        assert!(parsed.is_within(b"\x04prod\x06muster\x00"));
        assert!(!parsed.is_within(b"\x03rod\x06muster\x00"), "only at a label boundary");
        assert!(!parsed.is_within(b"\x07example\x00"));
    }

    #[test]
    fn malformed_queries_get_their_error_and_reply() {
        let good = query(&["a", "muster"], rtype::A);
        let cases: Vec<(Vec<u8>, QueryError)> = vec![
            (good[..11].to_vec(), QueryError::TooShort(11)),
            (
                {
                    let mut p = good.clone();
                    p[2] |= 0x80;
                    p
                },
                QueryError::NotAQuery,
            ),
            (
                {
                    let mut p = good.clone();
                    p[2] |= 0x10;
                    p
                },
                QueryError::Opcode(2),
            ),
            (
                {
                    let mut p = good.clone();
                    p[5] = 2;
                    p
                },
                QueryError::QuestionCount(2),
            ),
            (good[..14].to_vec(), QueryError::BadName),
            (
                {
                    let mut p = good.clone();
                    p[12] = 0xc0;
                    p
                },
                QueryError::BadName,
            ),
            (good[..good.len() - 1].to_vec(), QueryError::Truncated),
            (
                {
                    let mut p = good.clone();
                    p[11] = 2;
                    push_opt(&mut p, 512, Rcode::NoError);
                    push_opt(&mut p, 512, Rcode::NoError);
                    p
                },
                QueryError::BadOpt,
            ),
        ];
        for (packet, expected) in cases {
            assert_eq!(parse(&packet).err(), Some(expected), "{packet:?}");
        }
        assert_eq!(QueryError::NotAQuery.reply(), None);
        assert_eq!(QueryError::Opcode(2).reply(), Some(Rcode::NotImp));
        assert_eq!(QueryError::BadName.reply(), Some(Rcode::FormErr));
    }

    #[test]
    fn names_over_255_octets_are_refused() {
        let long = "a".repeat(63);
        let fits = [long.as_str(), &long, &long, &"b".repeat(61)];
        assert!(parse(&query(&fits, rtype::A)).is_ok());
        let over = [long.as_str(), &long, &long, &"b".repeat(62)];
        assert_eq!(parse(&query(&over, rtype::A)).err(), Some(QueryError::BadName));
    }
}
