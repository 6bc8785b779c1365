//! The allocator's one setting: freed memory goes back to the OS when it is freed.
//!
//! The binary allocates with mimalloc (`main.rs`). By default mimalloc hands pages it no
//! longer uses back to the OS ("purges" them) a second after they are freed, but only when a
//! later call into its arenas happens to run the due purges; a server whose steady work is
//! small objects in pages it already holds rarely makes one. A snapshot's transient (its
//! encoding, up to tens of MiB, every `snapshot_every` entries) then stayed resident: the
//! 3-node soak showed a node's RSS stepping up 5–15 MiB and staying, with the live heap flat
//! (measured with a counting allocator: 20.4 MiB live throughout, RSS 67 → 78 MiB), and the
//! leader holding about 7 MiB more than with purging at once. SPEC R5; docs/performance.md
//! "Memory over time (soak)".
//!
//! Purging at once costs a `madvise` per freed page run: `muster bench` register, renew and
//! read showed no difference beyond the run-to-run noise, and a 1,100-connection flood
//! (`.ci/hostile.sh`) about 1 ms more bystander p99 (median 1.92 → 2.92 ms).

// A measured need (STYLE.md rule 13): one call into the allocator linked into this binary.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_long};

// Links mimalloc's library, which defines the functions below, into every binary of this
// crate (the tests' too, whose global allocator stays the system's).
use mimalloc as _;

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (`mimalloc.h`, the same index in
/// versions 2 and 3): milliseconds before freed memory is purged; 0 purges at once.
const MI_OPTION_PURGE_DELAY: c_int = 15;

unsafe extern "C" {
    /// mimalloc's option setter, linked by `libmimalloc-sys` (the `mimalloc` crate).
    fn mi_option_set(option: c_int, value: c_long);
    /// mimalloc's option getter.
    fn mi_option_get(option: c_int) -> c_long;
}

/// Makes mimalloc purge freed memory at once; returns the delay now in force (0).
/// Call it first thing in `main`, in a binary whose global allocator is `mimalloc::MiMalloc`.
///
/// # Safety
/// No other thread may exist yet: mimalloc writes the option without synchronisation, and
/// every allocating thread reads it.
pub unsafe fn purge_at_once() -> c_long {
    // SAFETY: plain integers and a valid option index (above); the caller guarantees no
    // other thread reads the option meanwhile.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    purge_delay()
}

/// The purge delay in force, in milliseconds.
fn purge_delay() -> c_long {
    // SAFETY: a read of the option table with a valid index; every writer is
    // `purge_at_once`, whose callers run it before any other thread exists.
    unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_option_set_is_mimalloc_s_purge_delay_and_it_becomes_zero() {
        // The test binary links mimalloc too (a dependency of this crate), so the calls reach
        // the option table the binary's allocator reads. Its default, 1000 ms in mimalloc 3,
        // is no other option's: a wrong index reads back something else here.
        assert_eq!(
            super::purge_delay(),
            1000,
            "mimalloc's default purge delay at this index"
        );
        // SAFETY: the only test of this binary that touches the option table, and mimalloc's
        // own threads (none in this build) never read it.
        assert_eq!(unsafe { super::purge_at_once() }, 0);
    }
}
