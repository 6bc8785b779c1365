//! One RRset's answer, encoded once when its service changes, and the pure choice of which of
//! its records a reply carries (SPEC D2: UDP within the client's buffer, TCP within 64 KiB).
//!
//! ```text
//!  bytes:  header │ question (lower case) │ answer 0 │ answer 1 │ … │ group 0 │ group 1 │ …
//!          ID 0,    12 .. question_end      └─ spans[i].answer_end ─┘ └ spans[i].additional_end
//!          full counts                      every record alone,       group i: the additional
//!                                           names pointing only       records of answer i (an
//!                                           into the question         SRV's target addresses)
//! ```
//!
//! Every record is encoded on its own right after the question, so its compression pointers
//! point into the question and nowhere else ([`relocatable`] checks it; a record that would
//! point into itself is encoded uncompressed instead). A reply is then the header, the
//! question as the client spelled it (same length, so every pointer still holds), and any
//! run of records and groups copied as they are.
//!
//! # Which records a reply carries ([`Precomputed::select`])
//! - The whole answer when it fits the limit and holds at most `cap` records: one copy, in
//!   the stored order (the common case, unchanged from a plain precomputed message).
//! - Otherwise a *window*: the records from a start index onwards, wrapping round, as many as
//!   fit the limit and at most `cap`; then the additional groups of the window's records, the
//!   longest prefix of them that still fits. The start comes from the caller's rotation
//!   ([`start`]), so successive queries get different windows and, over time, every record
//!   as often as any other.
//!
//! Both steps are binary searches over the cumulative `spans`, and a window is at most two
//! contiguous runs of answers and two of groups: a reply costs O(log n) and four copies,
//! however large the RRset, and allocates nothing.
//!
//! # Correctness
//! - A window's records are distinct (at most one lap round the RRset) and consecutive in
//!   the stored order modulo its length.
//! - An additional group travels only with its answer record, so every additional record
//!   belongs to an answer in the reply.
//! - The bytes chosen never exceed the budget given: runs are taken only while their
//!   cumulative length fits.

use std::ops::Range;

use hickory_proto::op::Query;
use hickory_proto::rr::{Name, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};

use crate::wire::{HEADER_LEN, rtype};

/// One answer record and the additional records that serve it (an SRV's target addresses;
/// a DNS-SD instance's SRV, TXT and addresses).
pub(crate) struct Answer {
    pub(crate) record: Record,
    pub(crate) additionals: Vec<Record>,
}

impl Answer {
    /// A record with nothing in the additional section.
    pub(crate) fn alone(record: Record) -> Answer {
        Answer {
            record,
            additionals: Vec::new(),
        }
    }
}

/// Where answer record `i` and its additional group end in [`Precomputed::bytes`], and how
/// many additional records groups `0..=i` hold together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    answer_end: u32,
    additional_end: u32,
    additionals: u32,
}

/// One RRset's answer, encoded. See the module docs for the layout.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Precomputed {
    /// Header, question, every answer record, every additional group. When the whole is
    /// over 64 KiB it is storage, never sent whole.
    bytes: Box<[u8]>,
    question_end: u32,
    spans: Box<[Span]>,
}

/// Which records of a [`Precomputed`] one reply carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Selection {
    /// Everything, as stored.
    Whole,
    /// `answers` records from `start` (wrapping), and the additional groups of the first
    /// `groups` of them. `answers` is 0 when not even one record fits.
    Window {
        start: usize,
        answers: usize,
        groups: usize,
    },
}

/// Fibonacci hashing's multiplier, 2^32 / φ: consecutive rotations land about 0.618 of the
/// RRset apart, the most even spread a fixed step can give (the three-distance theorem), so
/// two queries in a row rarely share records and every record is a start equally often.
const ROTATION_STEP: u32 = 0x9E37_79B9;

/// The first record of the window for `rotation`, in `0..len` (0 for an empty RRset).
pub(crate) fn start(rotation: u32, len: usize) -> usize {
    let spread = u64::from(rotation.wrapping_mul(ROTATION_STEP));
    // Multiply-shift onto 0..len: no modulo bias, no division.
    ((spread * len as u64) >> 32) as usize
}

impl Precomputed {
    /// Encodes `answers` to a question for `qname`/`qtype`. `None` when not one record can
    /// be encoded. Records that cannot (a name over 255 octets) are left out.
    pub(crate) fn encode(qname: &Name, qtype: impl Into<RecordType>, answers: Vec<Answer>) -> Option<Precomputed> {
        let query = Query::query(qname.clone(), qtype.into());
        let mut scratch = Vec::with_capacity(512);
        let question_end = {
            let mut encoder = BinEncoder::new(&mut scratch);
            encoder.emit_vec(&[0; HEADER_LEN]).ok()?;
            query.emit(&mut encoder).ok()?;
            encoder.offset()
        };
        let mut encoded = Vec::new();
        let mut groups = Vec::new();
        let mut counts = Vec::with_capacity(answers.len());
        for answer in &answers {
            let before = encoded.len();
            if !encode_record(&query, &answer.record, &mut scratch, &mut encoded) {
                continue;
            }
            let record_end = encoded.len();
            let mut count = 0u32;
            let group_start = groups.len();
            for additional in &answer.additionals {
                count += u32::from(encode_record(&query, additional, &mut scratch, &mut groups));
            }
            debug_assert!(groups.len() >= group_start && record_end > before);
            counts.push((record_end, groups.len(), count));
        }
        if counts.is_empty() {
            return None;
        }
        let answers_len = encoded.len();
        let mut bytes = Vec::with_capacity(question_end + answers_len + groups.len());
        let total_additionals: u32 = counts.iter().map(|(_, _, count)| count).sum();
        // ID 0, QR and AA (the reply patches the flags), one question, saturated counts: a
        // whole answer is only ever sent when it fits 64 KiB, where the counts are exact.
        bytes.extend_from_slice(&[0, 0, 0x84, 0, 0, 1]);
        bytes.extend_from_slice(&saturate(counts.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&[0, 0]);
        bytes.extend_from_slice(&saturate(total_additionals).to_be_bytes());
        bytes.extend_from_slice(&scratch[HEADER_LEN..question_end]);
        bytes.extend_from_slice(&encoded);
        bytes.extend_from_slice(&groups);
        let base = question_end;
        let mut additionals = 0;
        let spans = counts
            .iter()
            .map(|&(answer_end, additional_end, count)| {
                additionals += count;
                Span {
                    answer_end: (base + answer_end) as u32,
                    additional_end: (base + answers_len + additional_end) as u32,
                    additionals,
                }
            })
            .collect();
        Some(Precomputed {
            bytes: bytes.into_boxed_slice(),
            question_end: question_end as u32,
            spans,
        })
    }

    /// How many answer records the RRset holds.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// Header and question: the bytes every reply starts with.
    pub(crate) fn question_end(&self) -> usize {
        self.question_end as usize
    }

    /// The stored lower-case question (name, type, class).
    #[cfg(test)]
    pub(crate) fn question(&self) -> &[u8] {
        &self.bytes[HEADER_LEN..self.question_end()]
    }

    /// The whole answer: header, question, every record.
    pub(crate) fn whole(&self) -> &[u8] {
        &self.bytes
    }

    fn answer_start(&self, index: usize) -> usize {
        match index {
            0 => self.question_end(),
            _ => self.spans[index - 1].answer_end as usize,
        }
    }

    fn group_start(&self, index: usize) -> usize {
        match index {
            0 => self.answers_end(),
            _ => self.spans[index - 1].additional_end as usize,
        }
    }

    fn answers_end(&self) -> usize {
        self.spans
            .last()
            .map_or(self.question_end(), |span| span.answer_end as usize)
    }

    fn additionals_before(&self, index: usize) -> u32 {
        match index {
            0 => 0,
            _ => self.spans[index - 1].additionals,
        }
    }

    /// What a reply of at most `limit` bytes in all (header, question, records) with at most
    /// `cap` answer records carries, with its window starting at `start` if the whole does
    /// not do. `reserve` bytes are kept free (the OPT record).
    pub(crate) fn select(&self, start: usize, limit: usize, reserve: usize, cap: usize) -> Selection {
        let room = limit.saturating_sub(reserve);
        if self.len() <= cap && self.bytes.len() <= room {
            return Selection::Whole;
        }
        let len = self.len();
        let start = start % len.max(1);
        let mut budget = room.saturating_sub(self.question_end());
        let cap = cap.min(len);
        // Answers: the run from `start` to the end, then (a whole lap at most) from 0.
        let first = self.fit(
            start..len,
            budget,
            cap,
            |this, i| this.spans[i].answer_end,
            Self::answer_start,
        );
        budget -= self.answer_bytes(start..start + first);
        let mut answers = first;
        if start + first == len && first < cap {
            let second = self.fit(
                0..start,
                budget,
                cap - first,
                |this, i| this.spans[i].answer_end,
                Self::answer_start,
            );
            budget -= self.answer_bytes(0..second);
            answers += second;
        }
        // Additional groups: the longest prefix of the window's that fits what is left.
        let (first_run, second_run) = split(start, answers, len);
        let mut groups = self.fit(
            first_run.clone(),
            budget,
            usize::MAX,
            |this, i| this.spans[i].additional_end,
            Self::group_start,
        );
        if groups == first_run.len() {
            budget -= self.group_bytes(first_run);
            groups += self.fit(
                second_run,
                budget,
                usize::MAX,
                |this, i| this.spans[i].additional_end,
                Self::group_start,
            );
        }
        Selection::Window { start, answers, groups }
    }

    /// How many items of `run` (a prefix) fit `budget` bytes, at most `cap`: `end(i)` is where
    /// item `i` ends, `begin(i)` where it starts; both grow with `i`.
    fn fit(
        &self,
        run: Range<usize>,
        budget: usize,
        cap: usize,
        end: impl Fn(&Self, usize) -> u32,
        begin: impl Fn(&Self, usize) -> usize,
    ) -> usize {
        if run.is_empty() {
            return 0;
        }
        let base = begin(self, run.start);
        let candidates = run.start..run.start + run.len().min(cap);
        // The items whose cumulative end is within budget form a prefix: binary search.
        let (mut low, mut high) = (candidates.start, candidates.end);
        while low < high {
            let mid = low + (high - low) / 2;
            if end(self, mid) as usize - base <= budget {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low - run.start
    }

    fn answer_bytes(&self, run: Range<usize>) -> usize {
        if run.is_empty() {
            return 0;
        }
        self.spans[run.end - 1].answer_end as usize - self.answer_start(run.start)
    }

    fn group_bytes(&self, run: Range<usize>) -> usize {
        if run.is_empty() {
            return 0;
        }
        self.spans[run.end - 1].additional_end as usize - self.group_start(run.start)
    }

    fn group_count(&self, run: Range<usize>) -> u32 {
        if run.is_empty() {
            return 0;
        }
        self.spans[run.end - 1].additionals - self.additionals_before(run.start)
    }

    /// The records of a window, appended to `out` (which holds the header and question):
    /// the answers, then the additional groups. Returns (answer count, additional count).
    pub(crate) fn write_window(&self, start: usize, answers: usize, groups: usize, out: &mut Vec<u8>) -> (u16, u16) {
        let len = self.len();
        let (first, second) = split(start, answers, len);
        for run in [first.clone(), second.clone()] {
            if !run.is_empty() {
                out.extend_from_slice(
                    &self.bytes[self.answer_start(run.start)..self.spans[run.end - 1].answer_end as usize],
                );
            }
        }
        let (group_first, group_second) = split(start, groups, len);
        let mut additional = 0;
        for run in [group_first, group_second] {
            if !run.is_empty() {
                additional += self.group_count(run.clone());
                out.extend_from_slice(
                    &self.bytes[self.group_start(run.start)..self.spans[run.end - 1].additional_end as usize],
                );
            }
        }
        (saturate(answers as u32), saturate(additional))
    }
}

/// A window of `count` items from `start` in a ring of `len`, as its (at most) two runs.
fn split(start: usize, count: usize, len: usize) -> (Range<usize>, Range<usize>) {
    let first_end = (start + count).min(len);
    let wrapped = (start + count).saturating_sub(len);
    (start..first_end, 0..wrapped.min(start))
}

fn saturate(count: u32) -> u16 {
    u16::try_from(count).unwrap_or(u16::MAX)
}

/// Encodes `record` right after `query`'s question (a fresh encoder, so the record compresses
/// against the question alone) and appends it to `out`. A record that would point into
/// itself is encoded uncompressed: it must stay valid wherever a reply puts it.
fn encode_record(query: &Query, record: &Record, scratch: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
    for encoding in [NameEncoding::Compressed, NameEncoding::Uncompressed] {
        scratch.clear();
        let mut encoder = BinEncoder::new(scratch);
        let encoded = encoder
            .emit_vec(&[0; HEADER_LEN])
            .and_then(|()| query.emit(&mut encoder))
            .map(|()| encoder.offset())
            .and_then(|question_end| {
                encoder.set_name_encoding(encoding);
                record.emit(&mut encoder).map(|()| question_end)
            });
        let Ok(question_end) = encoded else {
            return false;
        };
        if relocatable(&scratch[question_end..], question_end) {
            out.extend_from_slice(&scratch[question_end..]);
            return true;
        }
    }
    false
}

/// Whether every compression pointer of `record` (encoded right after a question ending at
/// `question_end`) points into the question, so the record means the same wherever it is
/// copied. Knows the names of the types this zone answers; any other type is not trusted.
pub(crate) fn relocatable(record: &[u8], question_end: usize) -> bool {
    let Some(fixed) = name_end(record, 0, question_end) else {
        return false;
    };
    let Some(header) = record.get(fixed..fixed + 10) else {
        return false;
    };
    let rdata = fixed + 10;
    match u16::from_be_bytes([header[0], header[1]]) {
        rtype::A | rtype::AAAA | rtype::TXT => true,
        rtype::SRV => name_end(record, rdata + 6, question_end).is_some(),
        rtype::PTR => name_end(record, rdata, question_end).is_some(),
        _ => false,
    }
}

/// Where the name at `at` ends, if it is well formed and any pointer in it points into the
/// question (past the header, below `question_end`).
fn name_end(bytes: &[u8], mut at: usize, question_end: usize) -> Option<usize> {
    loop {
        let len = *bytes.get(at)?;
        match len {
            0 => return Some(at + 1),
            1..=63 => at += 1 + usize::from(len),
            _ if len & 0xc0 == 0xc0 => {
                let target = usize::from(u16::from_be_bytes([len & 0x3f, *bytes.get(at + 1)?]));
                return (crate::wire::HEADER_LEN..question_end)
                    .contains(&target)
                    .then_some(at + 2);
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
#[path = "precomputed_tests.rs"]
mod tests;
