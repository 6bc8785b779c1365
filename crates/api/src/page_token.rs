//! Page tokens: where the next page of a snapshot read continues (SPEC W2).
//!
//! A token pins the revision of the first page and names the last instance sent, so every
//! page is read at one revision. It reads `"<revision>.<instance>"`: instance ids are DNS
//! labels and never hold a dot. Clients must treat it as opaque; its shape may change.

use muster_core::{InstanceId, Revision};

/// Where the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageToken {
    /// The revision every page is read at.
    pub(crate) at: Revision,
    /// The last instance of the previous page.
    pub(crate) after: InstanceId,
}

impl PageToken {
    /// The token's text.
    pub(crate) fn encode(&self) -> String {
        format!("{}.{}", self.at, self.after)
    }

    /// Parses a token; `None` when it is not one this server issues.
    pub(crate) fn decode(text: &str) -> Option<PageToken> {
        let (revision, instance) = text.split_once('.')?;
        if revision.is_empty() || !revision.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(PageToken {
            at: Revision(revision.parse().ok()?),
            after: InstanceId::new(instance).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        let token = PageToken {
            at: Revision(20),
            after: InstanceId::new("api-3").unwrap(),
        };
        assert_eq!(token.encode(), "20.api-3");
        assert_eq!(PageToken::decode(&token.encode()), Some(token));
    }

    #[test]
    fn foreign_tokens_are_refused() {
        for bad in [
            "",
            "20",
            ".api",
            "x.api",
            "+1.api",
            "20.Api",
            "20.a.b",
            "99999999999999999999.api",
        ] {
            assert_eq!(PageToken::decode(bad), None, "{bad:?}");
        }
    }
}
