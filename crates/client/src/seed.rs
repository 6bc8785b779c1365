//! [`SplitMix64`]: the default jitter source (registrar renewals, resolver reconnects) when the
//! caller injects none.
//!
//! Jitter only has to differ between instances, not resist prediction, so the default is
//! seeded from what makes an instance unique (service, instance, incarnation) instead of
//! from OS entropy: no extra dependency, and a run can be replayed from its identity.

use std::hash::{DefaultHasher, Hash, Hasher};

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
}
