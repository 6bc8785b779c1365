//! Size limits of an endpoint record (SPEC M4, S5).

use serde::{Deserialize, Serialize};

/// Bounds on what one endpoint record may hold. Every replica must use the same values: they
/// decide whether a logged command is applied or rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Labels per record. 32 is generous for metadata and keeps a DNS-SD TXT record small.
    pub max_labels: usize,
    /// Bytes in a label key: 63, like a DNS label.
    pub max_label_key_bytes: usize,
    /// Bytes in a label value: 191, so that `key=value` always fits one 255-byte TXT string.
    pub max_label_value_bytes: usize,
    /// Bytes of all keys and values together: 2 KiB, a quarter of a typical record budget.
    pub max_label_bytes: usize,
    /// Addresses per record: 8 covers dual-stack on several networks.
    pub max_addresses: usize,
    /// Named ports per record: 16 covers sidecars, admin and metrics ports.
    pub max_ports: usize,
    /// Bytes of the whole record as counted by [`Endpoint::size`](crate::Endpoint::size):
    /// 4 KiB keeps a 10,000-endpoint snapshot under 40 MiB.
    pub max_record_bytes: usize,
    /// Bytes of a free-text field (a reason, a source revision): 256.
    pub max_text_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_labels: 32,
            max_label_key_bytes: 63,
            max_label_value_bytes: 191,
            max_label_bytes: 2048,
            max_addresses: 8,
            max_ports: 16,
            max_record_bytes: 4096,
            max_text_bytes: 256,
        }
    }
}
