//! The pure core of large answers: encoding records to be copied anywhere, the window a
//! reply carries, and the rotation's spread. Replies are read back with hickory's decoder.

use std::net::Ipv4Addr;

use hickory_proto::op::Message;
use hickory_proto::rr::rdata::{A, PTR, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::*;

fn name(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

/// `n` A records at `big.prod.muster.`, 10.1.x.y for record i.
fn a_records(n: usize) -> Precomputed {
    let owner = name("big.prod.muster.");
    let answers = (0..n)
        .map(|i| {
            let ip = Ipv4Addr::new(10, 1, (i / 256) as u8, (i % 256) as u8);
            Answer::alone(Record::from_rdata(owner.clone(), 5, RData::A(A(ip))))
        })
        .collect();
    Precomputed::encode(&owner, RecordType::A, answers).unwrap()
}

/// `n` SRV records at `_http._tcp.big.prod.muster.`, each with its target's A record.
fn srv_records(n: usize) -> Precomputed {
    let owner = name("_http._tcp.big.prod.muster.");
    let answers = (0..n)
        .map(|i| {
            let target = name(&format!("big-{i}.big.prod.muster."));
            Answer {
                record: Record::from_rdata(owner.clone(), 5, RData::SRV(SRV::new(0, 100, 8080, target.clone()))),
                additionals: vec![Record::from_rdata(
                    target,
                    5,
                    RData::A(A(Ipv4Addr::new(10, 1, 0, i as u8))),
                )],
            }
        })
        .collect();
    Precomputed::encode(&owner, RecordType::SRV, answers).unwrap()
}

/// The reply a selection makes (as the zone writes it, without OPT), decoded.
fn reply(answer: &Precomputed, selection: Selection) -> (Message, usize) {
    let mut out = Vec::new();
    match selection {
        Selection::Whole => out.extend_from_slice(answer.whole()),
        Selection::Window { start, answers, groups } => {
            out.extend_from_slice(&answer.whole()[..answer.question_end()]);
            let (an, ar) = answer.write_window(start, answers, groups, &mut out);
            out[6..8].copy_from_slice(&an.to_be_bytes());
            out[10..12].copy_from_slice(&ar.to_be_bytes());
        }
    }
    let message = Message::from_vec(&out).unwrap_or_else(|err| panic!("undecodable {out:?}: {err}"));
    (message, out.len())
}

fn last_octets(message: &Message) -> Vec<usize> {
    message
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::A(a) => usize::from(a.0.octets()[2]) * 256 + usize::from(a.0.octets()[3]),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn an_answer_that_fits_is_sent_whole_in_its_stored_order() {
    let answer = a_records(40);
    assert_eq!(answer.select(7, 1232, 11, usize::from(u16::MAX)), Selection::Whole);
    let (message, len) = reply(&answer, Selection::Whole);
    assert_eq!(last_octets(&message), (0..40).collect::<Vec<_>>());
    // Every record compresses its owner to the question: 16 bytes each.
    assert_eq!(len, answer.question_end() + 40 * 16);
}

#[test]
fn a_large_rrset_gets_the_window_that_fits_from_the_rotations_start() {
    let answer = a_records(5_000);
    // 512 bytes: the header and question (33) and 29 records of 16 bytes.
    // (Records without additional records have empty groups, which always fit.)
    let selection = answer.select(100, 512, 0, usize::from(u16::MAX));
    assert_eq!(
        selection,
        Selection::Window {
            start: 100,
            answers: 29,
            groups: 29
        }
    );
    let (message, len) = reply(&answer, selection);
    assert!(len <= 512, "{len}");
    assert_eq!(last_octets(&message), (100..129).collect::<Vec<_>>());
    // The OPT record's 11 bytes are kept free: exactly 29 records fit 497 bytes, 28 with it.
    assert!(matches!(
        answer.select(100, 497, 0, 65_535),
        Selection::Window { answers: 29, .. }
    ));
    assert!(matches!(
        answer.select(100, 497, 11, 65_535),
        Selection::Window { answers: 28, .. }
    ));
}

#[test]
fn a_window_wraps_round_the_end_and_never_repeats_a_record() {
    let answer = a_records(50);
    let selection = answer.select(45, 65_535, 0, 20);
    assert_eq!(
        selection,
        Selection::Window {
            start: 45,
            answers: 20,
            groups: 20
        }
    );
    let (message, _) = reply(&answer, selection);
    let expected: Vec<usize> = (45..50).chain(0..15).collect();
    assert_eq!(last_octets(&message), expected);
    // A cap above the RRset's size takes every record once, from the start round.
    let (all, _) = reply(
        &answer,
        Selection::Window {
            start: 45,
            answers: 50,
            groups: 0,
        },
    );
    let mut seen = last_octets(&all);
    assert_eq!(seen[..5], [45, 46, 47, 48, 49]);
    seen.sort_unstable();
    assert_eq!(seen, (0..50).collect::<Vec<_>>());
}

#[test]
fn the_cap_bounds_an_answer_that_would_fit_whole() {
    let answer = a_records(10);
    assert_eq!(answer.select(3, 1232, 11, 10), Selection::Whole);
    let selection = answer.select(3, 1232, 11, 3);
    assert_eq!(
        selection,
        Selection::Window {
            start: 3,
            answers: 3,
            groups: 3
        }
    );
    assert_eq!(last_octets(&reply(&answer, selection).0), [3, 4, 5]);
}

#[test]
fn tcp_sized_windows_stay_within_64_kib() {
    let answer = a_records(20_000);
    let selection = answer.select(19_000, 65_535, 11, 65_535);
    let Selection::Window { answers, .. } = selection else {
        panic!("{selection:?}")
    };
    // (65,535 - 11 - 33) / 16 records.
    assert_eq!(answers, 4_093);
    let (message, len) = reply(&answer, selection);
    assert!(len + 11 <= 65_535, "{len}");
    assert_eq!(message.answers.len(), 4_093);
}

#[test]
fn srv_additional_groups_travel_only_with_their_records_as_space_allows() {
    let answer = srv_records(30);
    let whole = answer.whole().len();
    // Room for every SRV but only some of the targets' addresses.
    let selection = answer.select(25, whole - 200, 0, 65_535);
    let Selection::Window {
        start: 25,
        answers: 30,
        groups,
    } = selection
    else {
        panic!("{selection:?}")
    };
    assert!(groups > 0 && groups < 30, "{groups}");
    let (message, len) = reply(&answer, selection);
    assert!(len <= whole - 200);
    let targets: Vec<String> = message
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::SRV(srv) => srv.target.to_ascii(),
            other => panic!("{other:?}"),
        })
        .collect();
    let owners: Vec<String> = message.additionals.iter().map(|r| r.name.to_ascii()).collect();
    // The additional records are those of the window's first `groups` records, in order.
    assert_eq!(owners, targets[..groups]);
    for record in &message.additionals {
        let RData::A(a) = &record.data else {
            panic!("{record:?}")
        };
        let instance = format!("big-{}.big.prod.muster.", a.0.octets()[3]);
        assert_eq!(record.name.to_ascii(), instance, "each address is its own target's");
    }
    // Capped to a few records, all their addresses fit.
    let capped = answer.select(5, 1232, 11, 4);
    assert_eq!(
        capped,
        Selection::Window {
            start: 5,
            answers: 4,
            groups: 4
        }
    );
}

#[test]
fn not_even_one_record_fitting_selects_nothing() {
    let answer = a_records(3);
    let selection = answer.select(0, answer.question_end() + 15, 0, 65_535);
    assert!(
        matches!(
            selection,
            Selection::Window {
                answers: 0,
                groups: 0,
                ..
            }
        ),
        "{selection:?}"
    );
}

#[test]
fn a_record_that_would_point_into_itself_is_stored_uncompressed_and_copies_anywhere() {
    // The PTR's target shares `a.b.muster.` with its owner but not with the question: a
    // compressed target would point into the owner, wrong once the record moves.
    let question = name("q.muster.");
    let record =
        |owner: &str, target: &str| Answer::alone(Record::from_rdata(name(owner), 5, RData::PTR(PTR(name(target)))));
    let answer = Precomputed::encode(
        &question,
        RecordType::PTR,
        vec![
            record("x.a.b.muster.", "y.a.b.muster."),
            record("z.a.b.muster.", "w.a.b.muster."),
        ],
    )
    .unwrap();
    assert_eq!(answer.question(), b"\x01q\x06muster\x00\x00\x0c\x00\x01");
    // Second record first: both still decode to their own names.
    let (message, _) = reply(
        &answer,
        Selection::Window {
            start: 1,
            answers: 2,
            groups: 0,
        },
    );
    let pairs: Vec<(String, String)> = message
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::PTR(ptr) => (r.name.to_ascii(), ptr.0.to_ascii()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("z.a.b.muster.".to_owned(), "w.a.b.muster.".to_owned()),
            ("x.a.b.muster.".to_owned(), "y.a.b.muster.".to_owned()),
        ]
    );
}

#[test]
fn relocatable_accepts_pointers_into_the_question_only() {
    // Owner: a pointer to the question at 12; A data.
    let a = [0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 10, 0, 0, 1];
    assert!(relocatable(&a, 30));
    assert!(!relocatable(&a, 12), "a pointer at or past the question's end is not");
    let into_header = [0xc0, 4, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 10, 0, 0, 1];
    assert!(!relocatable(&into_header, 30), "nor one into the header");
    // PTR whose data points at offset 40, inside the record itself.
    let ptr = [0xc0, 12, 0, 12, 0, 1, 0, 0, 0, 5, 0, 4, 1, b'y', 0xc0, 40];
    assert!(!relocatable(&ptr, 30));
    // An unknown type is not trusted; a cut record neither.
    let mx = [0xc0, 12, 0, 15, 0, 1, 0, 0, 0, 5, 0, 0];
    assert!(!relocatable(&mx, 30));
    assert!(!relocatable(&a[..8], 30));
}

#[test]
fn rotations_spread_starts_evenly_and_consecutive_ones_far_apart() {
    assert_eq!(start(12_345, 0), 0);
    assert_eq!(start(12_345, 1), 0);
    for len in [7, 10, 1_000] {
        let mut hits = vec![0u32; len];
        for rotation in 0..(100 * len as u32) {
            hits[start(rotation, len)] += 1;
        }
        let (low, high) = (hits.iter().min().unwrap(), hits.iter().max().unwrap());
        assert!(*low >= 98 && *high <= 102, "len {len}: {low}..{high}");
    }
    // Two windows of 75 (a 1,232-byte UDP answer) from consecutive rotations never overlap.
    let len = 5_000;
    for rotation in 0..1_000u32 {
        let (a, b) = (start(rotation, len), start(rotation + 1, len));
        let gap = a.abs_diff(b).min(len - a.abs_diff(b));
        assert!(gap >= 75, "rotations {rotation} and next start {a} and {b}");
    }
}
