//! Memory of a client view per endpoint (issue 4 target: ≤ 300 bytes): the live heap bytes a
//! 10,000-endpoint view holds, counted by a wrapping allocator, after the registry that
//! produced the records is dropped (the view's records are decoded from JSON, as a client's
//! are, so they share nothing with the server's).
//!
//! Run with `cargo bench -p muster-client --bench view_memory`.

// A counting allocator must implement `GlobalAlloc`, an unsafe trait: confined to this
// benchmark binary.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use muster_client::view::View;
use muster_core::ServiceSnapshot;

mod fixture;

struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`; the counter only adds up sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        new
    }
}

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
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let mut view = View::new(fixture::key());
    let snapshot: ServiceSnapshot = serde_json::from_slice(&wire).expect("decodes");
    view.install(snapshot, muster_core::Revision(u64::from(ENDPOINTS)), 0);
    let live = LIVE_BYTES.load(Ordering::Relaxed) - before;
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
