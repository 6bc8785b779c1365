//! A snapshot's checksum, carried inside the snapshot's own JSON so that the file stays
//! one JSON object every build reads (SPEC R1, R7: a corrupt or truncated snapshot is detected,
//! never loaded or rotated over a good one).
//!
//! ```text
//!  serialised snapshot   {"meta":…,"state":…}
//!  sealed                {"checksum":"xxh3-64:<16 hex>","meta":…,"state":…}
//!                                                    └── the sum covers these bytes ──┘
//! ```
//!
//! The checksum is the first member of the object and covers every byte after its comma.
//! A build that predates it reads the file as before (an unknown member is ignored), and this
//! build reads a file an older one wrote, which has no checksum, as unchecked: only its
//! JSON then tells a truncated file from a whole one. Such a file starts with the member
//! every snapshot serialises first, `"meta"`; one that starts with neither is refused, so a
//! flipped bit in the checksum's own name cannot turn the check off.

const PREFIX: &[u8] = b"{\"checksum\":\"xxh3-64:";
/// The hex digits, then `",`.
const SUM_LEN: usize = 16;
const SUFFIX: &[u8] = b"\",";
/// How a snapshot written before the checksum starts.
const UNSEALED: &[u8] = b"{\"meta\":";

/// What [`unseal`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seal {
    /// The checksum is present and holds.
    Holds,
    /// No checksum: written before snapshots carried one.
    Absent,
}

/// Why a sealed snapshot is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SealError {
    /// The bytes after the checksum are not the ones it was computed over.
    #[error(
        "its checksum does not hold (recorded {recorded:016x}, computed {computed:016x}): the file is corrupt or truncated"
    )]
    Mismatch {
        /// The checksum the file records.
        recorded: u64,
        /// The checksum of the bytes it holds.
        computed: u64,
    },
    /// The checksum member itself is damaged.
    #[error("its checksum is unreadable: the file is corrupt")]
    Malformed,
}

/// `json` (one serialised JSON object with at least one member) with its checksum put first.
#[cfg(test)]
pub(crate) fn seal(json: &[u8]) -> Vec<u8> {
    let written: Result<Vec<u8>, std::convert::Infallible> = sealed(0, |bytes| {
        bytes.extend_from_slice(json);
        Ok(())
    });
    written.unwrap_or_else(|never| match never {})
}

/// What `write` serialises (one JSON object with at least one member), sealed in the same
/// buffer: room for the checksum is kept before it, so a snapshot of any size is held once,
/// not copied to add 38 bytes. `capacity`: the buffer's expected size (0: unknown).
pub(crate) fn sealed<E>(capacity: usize, write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> Result<Vec<u8>, E> {
    let head = PREFIX.len() + SUM_LEN + SUFFIX.len();
    // The object's own `{` becomes the header's last byte, the `,` before its first member.
    let mut bytes = Vec::with_capacity(capacity.max(head));
    bytes.resize(head - 1, b' ');
    write(&mut bytes)?;
    if !bytes[head - 1..].starts_with(b"{\"") {
        // Not an object with members: nothing a snapshot serialises to; kept as it is.
        bytes.drain(..head - 1);
        return Ok(bytes);
    }
    let sum = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes[head..]));
    let header = [PREFIX, sum.as_bytes(), SUFFIX].concat();
    bytes[..head].copy_from_slice(&header);
    Ok(bytes)
}

/// Checks the checksum of a snapshot's bytes, if it carries one.
pub(crate) fn unseal(bytes: &[u8]) -> Result<Seal, SealError> {
    let Some(after) = bytes.strip_prefix(PREFIX) else {
        return match bytes.starts_with(UNSEALED) {
            true => Ok(Seal::Absent),
            false => Err(SealError::Malformed),
        };
    };
    let (sum, rest) = after.split_at_checked(SUM_LEN).ok_or(SealError::Malformed)?;
    let rest = rest.strip_prefix(SUFFIX).ok_or(SealError::Malformed)?;
    let computed = xxhash_rust::xxh3::xxh3_64(rest);
    // Compared as written (lowercase), so no flip of a digit's case goes unseen.
    if sum == format!("{computed:016x}").as_bytes() {
        return Ok(Seal::Holds);
    }
    let recorded = std::str::from_utf8(sum)
        .ok()
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .ok_or(SealError::Malformed)?;
    Err(SealError::Mismatch { recorded, computed })
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &[u8] = br#"{"meta":{"last":7},"state":{"services":[1,2,3]}}"#;

    #[test]
    fn a_sealed_snapshot_is_still_the_same_json_object_with_one_member_more() {
        let sealed = seal(JSON);
        assert_eq!(unseal(&sealed), Ok(Seal::Holds));
        let mut read: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&sealed).unwrap();
        assert!(
            read.remove("checksum")
                .unwrap()
                .as_str()
                .unwrap()
                .starts_with("xxh3-64:")
        );
        let original: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(JSON).unwrap();
        assert_eq!(read, original);
    }

    #[test]
    fn a_snapshot_without_a_checksum_is_read_as_an_older_build_wrote_it() {
        assert_eq!(unseal(JSON), Ok(Seal::Absent));
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_refused() {
        let sealed = seal(JSON);
        for at in 0..sealed.len() {
            for bit in 0..8 {
                let mut damaged = sealed.clone();
                damaged[at] ^= 1 << bit;
                assert!(
                    unseal(&damaged).is_err(),
                    "a flip of bit {bit} at byte {at} went unnoticed"
                );
            }
        }
        for len in 0..sealed.len() {
            assert!(
                unseal(&sealed[..len]).is_err(),
                "a truncation to {len} bytes went unnoticed"
            );
        }
    }
}
