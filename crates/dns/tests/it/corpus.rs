//! The fuzz target's corpus (`fuzz/corpus/answer`, written by `fuzz/gen_corpus.py` and grown
//! by fuzzing) replayed through the real answer path on every `cargo test`.

use std::path::Path;

use crate::wellformed::{check, sample_zone};

#[test]
fn every_corpus_packet_gets_a_well_formed_reply_or_none() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/answer");
    let zone = sample_zone();
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display())) {
        let path = entry.unwrap().path();
        let packet = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&zone, &packet));
        assert!(outcome.is_ok(), "{} broke the answer path", path.display());
        replayed += 1;
    }
    // The seeds alone are 47 packets: fewer means the corpus went missing.
    assert!(replayed >= 47, "only {replayed} corpus files in {}", dir.display());
}
