//! Any bytes through the whole answer path (parse, lookup, patch, truncate), over UDP and
//! TCP: no panic, and a reply that is absent or decodes as a DNS response with the query's
//! ID within the transport's size. Run: `cargo fuzz run answer` (nightly), or on stable
//! `cargo fuzz run -s none answer`; the corpus is replayed by `cargo test -p muster-dns`.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/it/fixture.rs"]
#[allow(dead_code)]
mod fixture;
#[path = "../../tests/it/wellformed.rs"]
mod wellformed;

static ZONE: OnceLock<muster_dns::Zone> = OnceLock::new();

fuzz_target!(|packet: &[u8]| {
    let zone = ZONE.get_or_init(wellformed::sample_zone);
    wellformed::check(zone, packet);
});
