//! Bounded metadata labels (SPEC M4): descriptive key/value pairs, never a routing language.
//!
//! Stored packed in one allocation (`key=value` pairs joined by `\n`, sorted by key) because
//! a registry holds millions of records and a map per record costs more than the record.
//! Keys cannot hold `=` and neither keys nor values hold control characters, so the packing
//! is unambiguous.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Limits, Rejection};

/// A record's labels, sorted by key, keys unique.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Labels(Box<str>);

impl Labels {
    /// Validates `labels` against `limits`.
    pub fn new(labels: &BTreeMap<String, String>, limits: &Limits) -> Result<Labels, Rejection> {
        if labels.len() > limits.max_labels {
            return Err(Rejection::label_limit(
                "labels",
                format!("{} labels exceed the limit of {}", labels.len(), limits.max_labels),
            ));
        }
        let mut total = 0;
        for (key, value) in labels {
            check_pair(key, value, limits.max_label_key_bytes, limits.max_label_value_bytes)?;
            total += key.len() + value.len();
        }
        if total > limits.max_label_bytes {
            return Err(Rejection::label_limit(
                "labels",
                format!(
                    "{total} bytes of keys and values exceed the limit of {}",
                    limits.max_label_bytes
                ),
            ));
        }
        Ok(Labels::pack(labels))
    }

    fn pack(labels: &BTreeMap<String, String>) -> Labels {
        let mut packed = String::new();
        for (key, value) in labels {
            if !packed.is_empty() {
                packed.push('\n');
            }
            packed.push_str(key);
            packed.push('=');
            packed.push_str(value);
        }
        Labels(packed.into_boxed_str())
    }

    /// These labels with `key` set to `value`, unchecked against any limit: for records the
    /// registry derives (a failover tier's, SPEC G1), never for what a caller sends. `key`
    /// must be a valid key and `value` hold no control character.
    pub fn with(&self, key: &str, value: &str) -> Labels {
        let mut labels: BTreeMap<String, String> = self.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        labels.insert(key.to_owned(), value.to_owned());
        Labels::pack(&labels)
    }

    /// The pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .split('\n')
            .filter(|pair| !pair.is_empty())
            .filter_map(|pair| pair.split_once('='))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// How many labels there are.
    pub fn len(&self) -> usize {
        if self.0.is_empty() {
            0
        } else {
            self.0.split('\n').count()
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The packed form (`k=v` lines, sorted): also what the record's fingerprint hashes.
    pub fn packed(&self) -> &str {
        &self.0
    }
}

fn check_pair(key: &str, value: &str, max_key: usize, max_value: usize) -> Result<(), Rejection> {
    if key.is_empty() || key.len() > max_key {
        return Err(Rejection::label_limit(
            format!("labels.{}", key.escape_debug()),
            format!("key must be 1 to {max_key} bytes, got {}", key.len()),
        ));
    }
    if let Some(bad) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
    {
        return Err(Rejection::label_limit(
            format!("labels.{}", key.escape_debug()),
            format!("key may hold only A-Z, a-z, 0-9, '.', '_', '-' and '/', found {bad:?}"),
        ));
    }
    if value.len() > max_value {
        return Err(Rejection::label_limit(
            format!("labels.{key}"),
            format!("value of {} bytes exceeds the limit of {max_value}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Rejection::label_limit(
            format!("labels.{key}"),
            "value must not hold control characters",
        ));
    }
    Ok(())
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Labels {
    /// Checks the characters that keep the packing unambiguous; size limits are the
    /// registry's to enforce on input, not a reader's to re-judge.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(deserializer)?;
        for (key, value) in &map {
            check_pair(key, value, usize::MAX, usize::MAX).map_err(D::Error::custom)?;
        }
        Ok(Labels::pack(&map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn packs_sorted_and_reads_back() {
        let labels = Labels::new(&map(&[("version", "v=2"), ("team", "core")]), &Limits::default()).unwrap();
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            vec![("team", "core"), ("version", "v=2")]
        );
        assert_eq!(labels.get("version"), Some("v=2"));
        assert_eq!(labels.len(), 2);
        assert_eq!(
            serde_json::to_string(&labels).unwrap(),
            r#"{"team":"core","version":"v=2"}"#
        );
        let back: Labels = serde_json::from_str(r#"{"team":"core","version":"v=2"}"#).unwrap();
        assert_eq!(back, labels);
        assert!(Labels::default().is_empty());
        assert_eq!(Labels::default().len(), 0);
    }

    #[test]
    fn with_sets_one_label_beside_the_others() {
        let labels = Labels::new(&map(&[("team", "core")]), &Limits::default()).unwrap();
        let tiered = labels.with(crate::federation::SPILLED_FROM, "a");
        assert_eq!(tiered.get(crate::federation::SPILLED_FROM), Some("a"));
        assert_eq!(tiered.get("team"), Some("core"));
    }

    #[test]
    fn each_bound_is_enforced_and_named() {
        let limits = Limits::default();
        let cases: Vec<(BTreeMap<String, String>, &str)> = vec![
            (
                (0..33).map(|i| (format!("k{i}"), String::new())).collect(),
                "33 labels exceed the limit of 32",
            ),
            (map(&[(&"k".repeat(64), "v")]), "key must be 1 to 63 bytes, got 64"),
            (map(&[("", "v")]), "key must be 1 to 63 bytes, got 0"),
            (map(&[("a=b", "v")]), "key may hold only"),
            (
                map(&[("k", &"v".repeat(192))]),
                "value of 192 bytes exceeds the limit of 191",
            ),
            (map(&[("k", "line\nbreak")]), "control characters"),
            (
                (0..12).map(|i| (format!("key{i:02}"), "v".repeat(180))).collect(),
                "bytes of keys and values exceed the limit of 2048",
            ),
        ];
        for (labels, expected) in cases {
            let err = Labels::new(&labels, &limits).unwrap_err();
            assert_eq!(err.code(), "label_limit");
            assert!(err.to_string().contains(expected), "{err} / {expected}");
        }
    }
}
