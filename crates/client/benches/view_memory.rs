//! Memory of a client view per endpoint (SPEC C target: ≤ 300 bytes): the live heap bytes a
//! 10,000-endpoint view holds, counted by a wrapping allocator, after the registry that
//! produced the records is dropped (the view's records are decoded from JSON, as a client's
//! are, so they share nothing with the server's). The decoded full records are turned into
//! the view's compact ones ([`muster_client::Member`]) on install and dropped, as a
//! resolver's are: what is counted is what the view keeps.
//!
//! Measured: 611 bytes per endpoint with the full records, 192 with the compact ones.
//!
//! Run with `cargo bench -p muster-client --bench view_memory`.

use muster_client::view::View;
use muster_core::ServiceSnapshot;
use muster_testkit::Counting;

mod fixture;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The view size measured.
const ENDPOINTS: u32 = 10_000;
/// The budget.
const TARGET_BYTES_PER_ENDPOINT: usize = 300;

fn main() {
    let wire = {
        let registry = fixture::registry(ENDPOINTS);
        let snapshot = registry.snapshot(&fixture::key()).expect("known");
        serde_json::to_vec(&*snapshot).expect("serialises")
    };
    let before = muster_testkit::live_bytes();
    let mut view = View::new(fixture::key());
    let snapshot: ServiceSnapshot = serde_json::from_slice(&wire).expect("decodes");
    view.install(snapshot, muster_core::Revision(u64::from(ENDPOINTS)), 0);
    let live = muster_testkit::live_bytes() - before;
    let per_endpoint = live / ENDPOINTS as usize;
    let verdict = if per_endpoint <= TARGET_BYTES_PER_ENDPOINT {
        "met"
    } else {
        "MISSED"
    };
    println!("view of {ENDPOINTS} endpoints: {live} live bytes");
    println!("bytes per endpoint: {per_endpoint} (target ≤ {TARGET_BYTES_PER_ENDPOINT}: {verdict})");
    drop(view);
}
