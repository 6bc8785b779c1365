//! [`SplitMix64`]: the default jitter source (registrar renewals, resolver reconnects) when the
//! caller injects none.
//!
//! Jitter only has to differ between instances, not resist prediction. A registrar has an
//! identity that is unique to its process (service, instance, incarnation), so it is seeded
//! from that ([`SplitMix64::from_identity`]): no extra dependency, and a run can be replayed
//! from its identity. A resolver's identity is only the service it follows, which every
//! client of that service shares: seeded from it alone, a whole fleet would reconnect in
//! step after a registry restart, so it also takes the process's random hash keys
//! ([`SplitMix64::per_process`]).

use std::hash::{BuildHasher, DefaultHasher, Hash, Hasher, RandomState};

use rand_core::RngCore;

/// Sebastiano Vigna's SplitMix64: one add and three xor-multiply steps per draw, and every
/// seed (zero included) gives a full-period sequence.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded from `identity`'s hash.
    pub(crate) fn from_identity(identity: &impl Hash) -> SplitMix64 {
        // `DefaultHasher::new()` has fixed keys, so the seed is the same in every run.
        let mut hasher = DefaultHasher::new();
        identity.hash(&mut hasher);
        SplitMix64 { state: hasher.finish() }
    }

    /// A generator seeded from `identity` and keys drawn at random once per process (std's
    /// `RandomState`), so that processes sharing an identity still draw apart.
    pub(crate) fn per_process(identity: &impl Hash) -> SplitMix64 {
        SplitMix64 {
            state: RandomState::new().hash_one(identity),
        }
    }
}

impl RngCore for SplitMix64 {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_get_different_sequences_and_a_run_can_be_replayed() {
        let a = SplitMix64::from_identity(&("prod/api", "a-1", 7_u64)).next_u64();
        let again = SplitMix64::from_identity(&("prod/api", "a-1", 7_u64)).next_u64();
        let b = SplitMix64::from_identity(&("prod/api", "a-2", 7_u64)).next_u64();
        assert_eq!(a, again);
        assert_ne!(a, b);
        let mut bytes = [0_u8; 11];
        SplitMix64 { state: 0 }.fill_bytes(&mut bytes);
        assert_ne!(bytes, [0; 11]);
    }

    #[test]
    fn clients_sharing_a_service_still_draw_apart() {
        // Two resolvers of one service (standing in for two processes: each `RandomState`
        // gets fresh keys) must not reconnect in step.
        let a = SplitMix64::per_process(&"prod/api").next_u64();
        let b = SplitMix64::per_process(&"prod/api").next_u64();
        assert_ne!(a, b);
    }
}
