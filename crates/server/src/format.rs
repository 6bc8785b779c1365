//! Raising the registry format (architecture.md "Formats and versions"): a leader duty. What a newer
//! format adds to the log (a token's role, a lease's service) is proposed only once every
//! member — voters and learners — runs a build that applies it; the leader asks each member
//! its build's format and, once all know a newer one than the registry's, commits
//! `RaiseFormat`, after which every replica applies the new rules from the same command.
//! Until then the old behaviour stays, and a node can be downgraded.
//!
//! ```text
//!  every LOOK: registry format < FORMAT? ──▶ POST /raft/format to each member ──▶ next(...)
//!              ──Some(f)──▶ propose RaiseFormat { f } on this leader (never forwarded)
//! ```

use std::sync::Arc;
use std::time::Duration;

use muster_core::{Actor, Principal};
use muster_registry::RaiseFormat;

use crate::app::App;

/// How often the leader looks while a member lags: a rolling upgrade restarts one node at a
/// time, so a few seconds after the last one rejoins is soon enough.
const LOOK: Duration = Duration::from_secs(2);

/// How long a member has to answer.
const ASK: Duration = Duration::from_secs(1);

/// The principal the raise is recorded under.
const RAISER: &str = "muster:format";

/// The format to raise the registry to, from `current` and each member's build's format
/// (`None`: no answer): the lowest every member applies, when every member answered and it
/// is above `current`.
pub(crate) fn next(current: u32, members: &[(u64, Option<u32>)]) -> Option<u32> {
    let lowest = members
        .iter()
        .map(|(_, format)| *format)
        .try_fold(u32::MAX, |lowest, format| format.map(|f| lowest.min(f)))?;
    let target = lowest.min(muster_core::FORMAT);
    (!members.is_empty() && target > current).then_some(target)
}

/// Raises the format once every member can apply it (below [`muster_core::FORMAT`]); ends
/// when the registry is at this build's format. Runs while this node leads.
pub(crate) async fn raise(app: Arc<App>) {
    loop {
        if raise_once(&app).await {
            return;
        }
        tokio::time::sleep(LOOK).await;
    }
}

/// One look: whether the registry is now at this build's format.
pub(crate) async fn raise_once(app: &App) -> bool {
    let current = app.gate.format();
    if current >= muster_core::FORMAT {
        return true;
    }
    let members = app.gate.member_formats(ASK).await;
    let Some(format) = next(current, &members) else {
        tracing::debug!(
            current,
            ?members,
            "registry format: a member's build is older or silent"
        );
        return false;
    };
    let principal = Principal::new(RAISER).expect("a valid principal");
    let meta = app.gate.meta_as(Actor::Owner, &principal);
    match app.gate.propose_as_leader(RaiseFormat { format }.into(), meta).await {
        Ok(Ok(_)) => {
            // Worth an operator's notice in a rolling upgrade; a group of one does it as it starts.
            if app.gate.in_cluster() {
                tracing::info!(
                    from = current,
                    to = format,
                    "registry format raised: every member applies it"
                );
            } else {
                tracing::debug!(from = current, to = format, "registry format raised");
            }
            format >= muster_core::FORMAT
        }
        Ok(Err(rejection)) => {
            tracing::warn!(%rejection, "registry format not raised");
            false
        }
        Err(error) => {
            tracing::debug!(%error, "registry format not raised now; trying again");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u32 = muster_core::FORMAT;

    #[test]
    fn the_format_rises_only_when_every_member_knows_it() {
        // A group of one on this build: at once.
        assert_eq!(next(1, &[(1, Some(NOW))]), Some(NOW));
        // A rolling upgrade: one member still on the second wave (format 1).
        assert_eq!(next(1, &[(1, Some(NOW)), (2, Some(1)), (3, Some(NOW))]), None);
        // A member that did not answer holds it back: it may be the old one.
        assert_eq!(next(1, &[(1, Some(NOW)), (2, None), (3, Some(NOW))]), None);
        // Every member upgraded.
        assert_eq!(next(1, &[(1, Some(NOW)), (2, Some(NOW)), (3, Some(NOW))]), Some(NOW));
        // A newer member does not raise past this build's format.
        assert_eq!(next(1, &[(1, Some(NOW)), (2, Some(NOW + 1))]), Some(NOW));
        // Already there, or no members known: nothing.
        assert_eq!(next(NOW, &[(1, Some(NOW))]), None);
        assert_eq!(next(1, &[]), None);
    }
}
