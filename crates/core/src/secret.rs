//! A secret's text in memory (SPEC S1, S4): a cluster secret, a federation peer's token, a
//! bootstrap secret, a token's secret. It shows itself as `<redacted>` everywhere a value
//! can leak (`Debug`, `Display`, serialisation: logs, `--print-config`, replies, the audit
//! trail); only [`Secret::expose`] gives the text, at the one place that sends or checks it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a secret shows instead of its text.
pub const REDACTED: &str = "<redacted>";

/// A secret's text; see the module docs.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// The secret `text`.
    pub fn new(text: impl Into<String>) -> Secret {
        Secret(text.into())
    }

    /// The text itself: only where it is sent or checked, never to show it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its length in bytes (a setting's minimum is checked on it).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `presented` is this secret, compared in time that does not depend on where
    /// the two first differ (only on the length).
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({REDACTED})")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Secret {
        Secret(text)
    }
}

impl From<&str> for Secret {
    fn from(text: &str) -> Secret {
        Secret(text.to_owned())
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Secret, Self::Err> {
        Ok(Secret::from(text))
    }
}

/// Serialised as [`REDACTED`]: a configuration printed or a value logged as JSON never
/// carries the text. Such output does not read back into the same secret, on purpose.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_a_secret_can_be_shown_redacts_it() {
        let secret = Secret::new("hunter2-hunter2-hunter2");
        let shown = [
            format!("{secret}"),
            format!("{secret:?}"),
            format!("{:?}", Some(&secret)),
            serde_json::to_string(&secret).unwrap(),
        ];
        for text in shown {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains(REDACTED), "{text}");
        }
        assert_eq!(secret.expose(), "hunter2-hunter2-hunter2");
    }

    #[test]
    fn a_secret_matches_only_its_own_text() {
        let secret = Secret::new("s3cret-s3cret");
        assert!(secret.matches("s3cret-s3cret"));
        for other in ["", "s3cret-s3cre", "s3cret-s3cret!", "S3cret-s3cret"] {
            assert!(!secret.matches(other), "{other}");
        }
    }

    #[test]
    fn a_secret_reads_from_its_text() {
        let read: Secret = serde_json::from_str("\"s3cret\"").unwrap();
        assert_eq!(read.expose(), "s3cret");
        assert_eq!("s3cret".parse::<Secret>().unwrap(), read);
    }
}
