//! Splitting a watch body into NDJSON lines, whatever the chunking.

use muster_cli::watch::LineSplitter;

fn drain(splitter: &mut LineSplitter) -> Vec<String> {
    std::iter::from_fn(|| splitter.next_line())
        .map(|line| String::from_utf8(line).unwrap())
        .collect()
}

#[test]
fn lines_split_across_and_within_chunks_come_out_whole() {
    let mut splitter = LineSplitter::new(1024);
    splitter.push(b"{\"a\":1}\n{\"b\"").unwrap();
    assert_eq!(drain(&mut splitter), ["{\"a\":1}"]);
    splitter.push(b":2}\n\n\r\n{\"c\":3}\r\n{\"d\"").unwrap();
    assert_eq!(drain(&mut splitter), ["{\"b\":2}", "{\"c\":3}"]);
    splitter.push(b":4}").unwrap();
    assert_eq!(drain(&mut splitter), Vec::<String>::new());
    assert_eq!(splitter.finish(), Some(b"{\"d\":4}".to_vec()));
    assert_eq!(splitter.finish(), None);
}

#[test]
fn byte_at_a_time_delivery_gives_the_same_lines() {
    let mut splitter = LineSplitter::new(1024);
    let mut lines = Vec::new();
    for byte in b"one\ntwo\nthree\n" {
        splitter.push(&[*byte]).unwrap();
        lines.extend(drain(&mut splitter));
    }
    assert_eq!(lines, ["one", "two", "three"]);
}

#[test]
fn a_line_past_the_limit_is_refused_instead_of_buffered_forever() {
    let mut splitter = LineSplitter::new(8);
    splitter.push(b"12345678\n1234").unwrap();
    assert_eq!(drain(&mut splitter), ["12345678"]);
    splitter.push(b"5678").unwrap();
    let err = splitter.push(b"9").unwrap_err();
    assert!(err.contains("longer than 8 bytes"), "{err}");
}
