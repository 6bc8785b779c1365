//! openraft's async runtime for Muster: tokio, with an election-timeout generator that a
//! deterministic simulation can seed (STYLE.md rule 3: randomness is an input).
//!
//! openraft draws each election timeout from `AsyncRuntime::thread_rng()`. Its default
//! runtime hands out `rand::thread_rng()`, which no caller can seed, so a simulated cluster
//! cannot replay its elections. [`MusterRuntime`] is tokio in every other respect; its
//! generator is a per-thread SplitMix64 whose state a simulation sets with
//! [`seed_election_rng`] before it starts its nodes on that thread (a current-thread tokio
//! runtime runs every node on one thread, so one seed fixes every draw, in order). A thread
//! nobody seeded starts from the standard library's per-process random hash keys, as
//! unpredictable as `thread_rng` for choosing 300–600 ms timeouts.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioInstant};

/// Tokio, with a seedable election-timeout generator.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct MusterRuntime;

thread_local! {
    /// This thread's generator state; `None` until seeded or first used.
    static STATE: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Seeds this thread's election-timeout generator: every node started on this thread from
/// now on draws its timeouts from one sequence determined by `seed`.
pub fn seed_election_rng(seed: u64) {
    STATE.with(|state| state.set(Some(seed)));
}

fn unpredictable_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::thread::current().id())
}

/// A handle on this thread's generator (what `thread_rng()` returns).
#[derive(Debug, Clone, Copy, Default)]
pub struct ElectionRng;

impl rand::RngCore for ElectionRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        STATE.with(|state| {
            // SplitMix64: one add and three mixes per draw; good enough for timeouts, and
            // the same sequence on every platform.
            let seed = state.get().unwrap_or_else(unpredictable_seed);
            let next = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            state.set(Some(next));
            let mut z = next;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl AsyncRuntime for MusterRuntime {
    type JoinError = <openraft::TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <openraft::TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <openraft::TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <openraft::TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <openraft::TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = ElectionRng;
    type OneshotSender<T: OptionalSend> = <openraft::TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <openraft::TokioRuntime as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: OptionalSend> = <openraft::TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        openraft::TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        openraft::TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        openraft::TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        openraft::TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        openraft::TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        openraft::TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        ElectionRng
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        openraft::TokioRuntime::oneshot()
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    #[test]
    fn a_seeded_thread_draws_the_same_election_timeouts_again() {
        let draw = || {
            let mut rng = MusterRuntime::thread_rng();
            (0..8).map(|_| rng.gen_range(300..600)).collect::<Vec<u64>>()
        };
        seed_election_rng(7);
        let first = draw();
        seed_election_rng(7);
        assert_eq!(draw(), first);
        seed_election_rng(8);
        assert_ne!(draw(), first);
        assert!(first.iter().all(|t| (300..600).contains(t)));
    }
}
