//! A look at a request's protobuf encoding before it is decoded (SPEC W4).
//!
//! Decoding a request makes one `String` per resource name: a 2 MiB message of three-letter
//! names is about 400,000 of them, some 16 MiB on the heap, for a request that is refused
//! once decoded because it names more than a stream may hold. Counting the names first, on
//! the encoded bytes, refuses it at the cost of one pass over them.
//!
//! Both ADS requests keep their names in length-delimited fields (`resource_names`,
//! `resource_names_subscribe` and `_unsubscribe`, `initial_resource_versions`, the
//! locators), so the count is per field number, of length-delimited fields, at the top level.

/// A message with more than the allowed number of one length-delimited field (or a group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than {max} entries of field {field} in one request")]
pub struct TooMany {
    /// The field's number.
    pub field: u32,
    /// The most allowed.
    pub max: usize,
}

/// The field numbers counted: every field of both ADS requests is below it.
const FIELDS: usize = 16;

/// The field both ADS requests name their resources in (`resource_names`,
/// `resource_names_subscribe`).
pub const NAMES: usize = 3;

/// Checks that no top-level length-delimited field of `message` occurs more than `max`
/// times. A truncated encoding passes (the decoder that follows refuses it); a group (wire
/// types 3 and 4, which no ADS request holds, and which prost would skip as an unknown
/// field) is refused, so nothing can hide the count from this pass.
pub fn within(message: &[u8], max: usize) -> Result<[usize; FIELDS], TooMany> {
    let mut counts = [0_usize; FIELDS];
    let mut rest = message;
    while let Some(key) = varint(&mut rest) {
        let field = key >> 3;
        let skip = match key & 7 {
            0 => varint(&mut rest).map(|_| 0),
            1 => Some(8),
            2 => {
                let Ok(slot) = usize::try_from(field) else {
                    return Ok(counts);
                };
                if let Some(count) = counts.get_mut(slot) {
                    *count += 1;
                    if *count > max {
                        return Err(TooMany {
                            field: u32::try_from(field).unwrap_or(u32::MAX),
                            max,
                        });
                    }
                }
                varint(&mut rest).and_then(|len| usize::try_from(len).ok())
            }
            5 => Some(4),
            _ => {
                return Err(TooMany {
                    field: u32::try_from(field).unwrap_or(u32::MAX),
                    max,
                });
            }
        };
        match skip {
            Some(skip) if skip <= rest.len() => rest = &rest[skip..],
            _ => return Ok(counts),
        }
    }
    Ok(counts)
}

/// Reads one base-128 varint off the front of `bytes`.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0_u64;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};

    fn sotw(names: usize) -> Vec<u8> {
        DiscoveryRequest {
            version_info: "7".into(),
            type_url: crate::Kind::Endpoint.type_url().into(),
            response_nonce: "3".into(),
            resource_names: (0..names).map(|i| format!("s{i}.prod")).collect(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn counts_the_names_of_a_state_of_the_world_request() {
        assert_eq!(within(&sotw(10), 10).map(|counts| counts[NAMES]), Ok(10));
        assert_eq!(within(&sotw(11), 10), Err(TooMany { field: 3, max: 10 }));
        assert_eq!(
            within(&sotw(0), 0).map_err(|e| e.field),
            Err(1),
            "version_info counts as one"
        );
    }

    #[test]
    fn counts_each_field_of_a_delta_request_apart() {
        let request = DeltaDiscoveryRequest {
            type_url: crate::Kind::Endpoint.type_url().into(),
            resource_names_subscribe: (0..10).map(|i| format!("s{i}.prod")).collect(),
            resource_names_unsubscribe: (0..10).map(|i| format!("u{i}.prod")).collect(),
            initial_resource_versions: (0..10).map(|i| (format!("s{i}.prod"), i.to_string())).collect(),
            ..Default::default()
        }
        .encode_to_vec();
        assert!(within(&request, 10).is_ok());
        assert_eq!(within(&request, 9).map_err(|e| e.max), Err(9));
    }

    #[test]
    fn a_malformed_message_is_left_to_the_decoder() {
        let mut message = sotw(3);
        message.truncate(message.len() - 2);
        assert!(within(&message, 3).is_ok());
        assert!(within(&[0xff; 12], 0).is_ok(), "a varint past ten bytes");
        // A group hides nothing: an empty one (field 15) before 3 names is refused.
        let mut grouped = vec![0x7b, 0x7c];
        grouped.extend(sotw(3));
        assert_eq!(within(&grouped, 100).map_err(|e| e.field), Err(15));
        assert!(DiscoveryRequest::decode(&message[..]).is_err());
    }
}
