//! Small value types: revisions, incarnations, lease ids and set digests.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The registry's one global, monotonic revision (SPEC W1). Every applied command that
/// changes state gets the next one; revision 0 is "before anything".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Revision(pub u64);

impl Revision {
    /// Before the first change. As an expected revision it means "the record must not exist".
    pub const ZERO: Revision = Revision(0);

    /// The revision after this one.
    pub fn next(self) -> Revision {
        Revision(self.0 + 1)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The fencing token of one run of an instance (SPEC L2). A restarted process registers
/// with a higher incarnation; mutations from a lower one are rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Incarnation(pub u64);

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A lease, allocated by the registry when it is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseId(pub u64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An order-independent digest of a set of endpoints: the wrapping sum of each record's
/// [`Endpoint::fingerprint`](crate::Endpoint::fingerprint).
///
/// A sum, not a hash of the sorted list, so that changing one endpoint updates it in O(1):
/// subtract the old record's fingerprint, add the new one's. The empty set digests to 0.
/// It detects lost or mangled updates (a 2^-64 chance of missing one), it is not a MAC.
/// Serialised as 16 lowercase hex digits, because JSON numbers above 2^53 lose precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Digest(pub u64);

impl Digest {
    /// The digest of the empty set.
    pub const EMPTY: Digest = Digest(0);

    /// The digest with one more record of this fingerprint.
    #[must_use]
    pub fn with(self, fingerprint: u64) -> Digest {
        Digest(self.0.wrapping_add(fingerprint))
    }

    /// The digest with one record of this fingerprint fewer.
    #[must_use]
    pub fn without(self, fingerprint: u64) -> Digest {
        Digest(self.0.wrapping_sub(fingerprint))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        if text.len() != 16 {
            return Err(serde::de::Error::custom("digest must be 16 hex digits"));
        }
        u64::from_str_radix(&text, 16)
            .map(Digest)
            .map_err(|_| serde::de::Error::custom("digest must be 16 hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_order_independent_and_reversible() {
        let (a, b, c) = (0xdead_beef_u64, u64::MAX - 3, 42);
        let abc = Digest::EMPTY.with(a).with(b).with(c);
        assert_eq!(abc, Digest::EMPTY.with(c).with(a).with(b));
        assert_eq!(abc.without(b), Digest::EMPTY.with(a).with(c));
        assert_eq!(abc.without(a).without(b).without(c), Digest::EMPTY);
    }

    #[test]
    fn digest_round_trips_as_hex_text() {
        let digest = Digest(0x0123_4567_89ab_cdef);
        let json = serde_json::to_string(&digest).unwrap();
        assert_eq!(json, "\"0123456789abcdef\"");
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), digest);
        assert!(serde_json::from_str::<Digest>("\"12\"").is_err());
        assert!(serde_json::from_str::<Digest>("\"0123456789abcdeg\"").is_err());
    }
}
