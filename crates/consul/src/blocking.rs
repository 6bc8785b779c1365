//! Blocking queries and the `X-Consul-*` headers of every read (SPEC E1, R3).
//!
//! ```text
//!  ?index=I&wait=W ─▶ consistency ready? ─▶ Waiter(scope): Notified enabled ─▶ read: (index N, result)
//!       N + 1 > I, or no I ─▶ answer (X-Consul-Index: N + 1)
//!       else wait: scope notified (a wake-up) ─▶ read again
//!                  W + jitter passed, or the server stops ─▶ answer what is there (same N)
//! ```
//!
//! - The index is the revision of the result plus one ([`consul_index`]): the service's last
//!   change for a query on one service, the newest change among a namespace's services for a
//!   namespace-wide one. It moves only when the result can have changed, and exactly then.
//!   The one is added because clients treat 0 (and a missing header) as "no index" and would
//!   never see a change, and a fresh registry is at revision 0 with its first write at 1: an
//!   index of "at least 1" would give the empty answer and the first write the same index,
//!   and a client blocked on it would miss that write.
//! - With authentication on, a caller without credentials blocks for at most
//!   [`NOBODY_MAX_WAIT`]: the Consul listener shares the HTTP API's connection budget, and an
//!   anonymous client must not hold connections for ten minutes each (SPEC S6).
//! - `wait` is a Go duration (`120000ms`, `5m`, `1m30s`, `1.5s`; `agent_duration`): 5 min
//!   when absent or 0, at most 10 min, plus a jitter of up to wait/16 so that clients that
//!   started together do not come back together (Consul's `JitterFraction`). The jitter's
//!   randomness is drawn by the caller and passed in ([`with_jitter`]; STYLE rule 3).
//! - `stale` / default / `consistent` are the native read modes
//!   ([`Consistency`](muster_gate::consistency::Consistency)): a default read on a node cut off from
//!   its leader is refused (503 `stale`, where Consul answers 500 `No cluster leader`) rather
//!   than served stale; `stale` is always served. Replies say `X-Consul-KnownLeader`,
//!   `X-Consul-LastContact` (ms since this node heard from its leader; 0 on the leader) and
//!   `X-Consul-Effective-Consistency`.

use std::time::Duration;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use muster_registry::Registry;
use serde::Serialize;

use super::ConsulView;
use super::agent_duration::parse_go_duration;
use super::error::ConsulError;
use crate::params::Params;
use muster_auth::Verb;
use muster_gate::Hold;

use super::token::{ConsulCaller, FILTERED_HEADER};
use super::waiters::WaitScope;
use crate::app::ConsulApp;
use muster_gate::consistency::Consistency;
use muster_gate::parked::Woken;

/// A wait that names none (or 0): 5 minutes, Consul's `defaultQueryTime`.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(5 * 60);
/// The longest wait honoured; longer ones are shortened, as Consul's `maxQueryTime` (10 min)
/// does. It bounds how long a request pins a connection.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(10 * 60);
/// The jitter is up to wait / 16, Consul's `JitterFraction`: a 5-minute wait spreads over
/// about 19 s, enough to break up a herd of clients started together.
const JITTER_FRACTION: u32 = 16;
/// The longest a caller without credentials blocks while authentication is on: a second,
/// so holding connections costs it a request per connection per second, no more than any
/// other flood of requests.
pub(crate) const NOBODY_MAX_WAIT: Duration = Duration::from_secs(1);

/// The `X-Consul-Index` of a result at `revision`: one more, so that it is never 0 and a
/// fresh registry's empty answer (revision 0) and its first write (revision 1) differ.
pub(crate) fn consul_index(revision: u64) -> u64 {
    revision.saturating_add(1)
}

/// The header carrying the result's index.
pub(crate) const INDEX_HEADER: &str = "x-consul-index";
const KNOWN_LEADER_HEADER: &str = "x-consul-knownleader";
const LAST_CONTACT_HEADER: &str = "x-consul-lastcontact";
const CONSISTENCY_HEADER: &str = "x-consul-effective-consistency";

/// What a read asks of its freshness and whether it blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// Answer once the result's index is above this (`None` or 0: answer at once).
    pub(crate) index: Option<u64>,
    /// The longest wait, before jitter.
    pub(crate) wait: Duration,
    /// The read mode.
    pub(crate) consistency: Consistency,
}

impl Blocking {
    /// `index`, `wait`, `stale` and `consistent` of `params`; an error is a 400 in Consul's
    /// words.
    pub(crate) fn parse(params: &Params) -> Result<Blocking, ConsulError> {
        let index = match params.get("index") {
            None | Some("") => None,
            Some(text) => Some(
                text.parse::<u64>()
                    .map_err(|_| ConsulError::bad_request(format!("Invalid index: '{}'", text.escape_debug())))?,
            ),
        };
        let wait = match params.get("wait") {
            None | Some("") => DEFAULT_WAIT,
            Some(text) => parse_wait(text)?,
        };
        let (stale, consistent) = (params.flag("stale")?, params.flag("consistent")?);
        let consistency = match (stale, consistent) {
            (true, true) => {
                return Err(ConsulError::bad_request(
                    "Cannot specify ?stale with ?consistent, conflicting semantics.",
                ));
            }
            (true, false) => Consistency::Stale,
            (false, true) => Consistency::Consistent,
            (false, false) => Consistency::Default,
        };
        Ok(Blocking {
            index: index.filter(|index| *index > 0),
            wait,
            consistency,
        })
    }
}

/// A `wait`: a Go duration; 0 is the default, more than [`MAX_WAIT`] is [`MAX_WAIT`].
pub(crate) fn parse_wait(text: &str) -> Result<Duration, ConsulError> {
    let wait = parse_go_duration(text).map_err(|why| ConsulError::bad_request(format!("Invalid wait time: {why}")))?;
    Ok(if wait.is_zero() {
        DEFAULT_WAIT
    } else {
        wait.min(MAX_WAIT)
    })
}

/// `wait` plus a jitter of up to wait / 16 taken from `random`.
pub(crate) fn with_jitter(wait: Duration, random: u64) -> Duration {
    let spread = u64::try_from((wait / JITTER_FRACTION).as_millis()).unwrap_or(u64::MAX);
    wait + Duration::from_millis(random % spread.saturating_add(1))
}

/// A read's result with its index (the revision it reflects; raised to 1 on the wire).
pub(crate) struct Indexed<R> {
    /// The index.
    pub(crate) index: u64,
    /// The result.
    pub(crate) result: R,
}

/// Reads with `read` (under the registry's read lock: keep it to cloning `Arc`s), blocking
/// as `blocking` asks on changes of `scope`. Returns what was read last.
pub(crate) async fn read<R>(
    app: &ConsulApp,
    view: &ConsulView,
    caller: &ConsulCaller,
    blocking: &Blocking,
    scope: WaitScope,
    read: impl Fn(&Registry) -> Indexed<R>,
) -> Result<Indexed<R>, ConsulError> {
    app.gate.ready_for(blocking.consistency).await?;
    let Some(want) = blocking.index else {
        return Ok(app.gate.read(&read));
    };
    // Parked, it holds a slot of its principal's budget in the tenant it reads (SPEC W4).
    let tenant = match &scope {
        WaitScope::Service(key) => &key.tenant,
        WaitScope::Namespace(namespace) => &namespace.tenant,
        WaitScope::Nothing => &view.tenant,
    };
    let _permit = app
        .gate
        .admit(caller.caller(), Some(tenant), Hold::Parked, caller.source(), || {
            "Consul blocking query".to_owned()
        })?;
    app.stats.blocking_query();
    let wait_for = if app.gate.auth.enabled && caller.caller().is_nobody() {
        blocking.wait.min(NOBODY_MAX_WAIT)
    } else {
        blocking.wait
    };
    let waiting = app.blocking.begin();
    // A revoked token ends the wait as Consul answers any revoked token, 403 `ACL not found`
    // (SPEC S1); the wait then counts as gone.
    let (woken, found) = app
        .gate
        .unless_revoked(
            caller.caller(),
            Verb::Read,
            caller.source(),
            || "Consul blocking query".to_owned(),
            wait(app, view, wait_for, want, scope, read),
        )
        .await
        .map_err(|_revoked| ConsulError::acl_not_found())?;
    waiting.end(woken);
    Ok(found)
}

/// The waiting of [`read`]: what it read last, and why it stopped waiting.
async fn wait<R>(
    app: &ConsulApp,
    view: &ConsulView,
    wait_for: Duration,
    want: u64,
    scope: WaitScope,
    read: impl Fn(&Registry) -> Indexed<R>,
) -> (Woken, Indexed<R>) {
    let deadline = tokio::time::Instant::now() + with_jitter(wait_for, view.random());
    let waiter = view.waiters.join(scope);
    let mut stopping = app.gate.stopping();
    loop {
        let notified = waiter.notify().notified();
        let mut notified = std::pin::pin!(notified);
        // Enabled before the read: a change applied after the read still wakes it.
        notified.as_mut().enable();
        let found = app.gate.read(&read);
        if consul_index(found.index) > want {
            return (Woken::Changed, found);
        }
        if *stopping.borrow_and_update() {
            return (Woken::Stopped, found);
        }
        tokio::select! {
            () = notified => app.stats.wakeup(),
            () = tokio::time::sleep_until(deadline) => return (Woken::TimedOut, found),
            _ = stopping.changed() => return (Woken::Stopped, found),
        }
    }
}

/// A JSON reply with the read headers; `filtered` says the caller's rights left something
/// out.
pub(crate) fn respond<T: Serialize>(
    app: &ConsulApp,
    blocking: &Blocking,
    index: u64,
    body: &T,
    filtered: bool,
) -> Response {
    let bytes = serde_json::to_vec(body).expect("Consul replies always serialise");
    let mut response = bytes.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    annotate(app, blocking, index, &mut response);
    if filtered {
        response
            .headers_mut()
            .insert(FILTERED_HEADER, HeaderValue::from_static("true"));
    }
    response
}

/// Adds `X-Consul-Index` ([`consul_index`] of the result's revision `index`), `X-Consul-KnownLeader`, `X-Consul-LastContact` and
/// `X-Consul-Effective-Consistency` to a reply.
pub(crate) fn annotate(app: &ConsulApp, blocking: &Blocking, index: u64, response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(INDEX_HEADER, HeaderValue::from(consul_index(index)));
    let known_leader = app.gate.status().leader.is_some();
    headers.insert(
        KNOWN_LEADER_HEADER,
        HeaderValue::from_static(if known_leader { "true" } else { "false" }),
    );
    let last_contact = if app.gate.is_leader() {
        0
    } else {
        app.gate.leader_contact_age_ms().unwrap_or(0)
    };
    headers.insert(LAST_CONTACT_HEADER, HeaderValue::from(last_contact));
    headers.insert(
        CONSISTENCY_HEADER,
        HeaderValue::from_static(match blocking.consistency {
            Consistency::Stale => "stale",
            Consistency::Default => "leader",
            Consistency::Consistent => "consistent",
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> Params {
        Params::of(Some(query))
    }

    #[test]
    fn waits_are_go_durations_defaulted_and_capped() {
        for (text, wait) in [
            ("120000ms", Duration::from_secs(120)),
            ("5m", Duration::from_secs(300)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("0", DEFAULT_WAIT),
            ("0s", DEFAULT_WAIT),
            ("11m", MAX_WAIT),
            ("2h", MAX_WAIT),
        ] {
            assert_eq!(parse_wait(text), Ok(wait), "{text}");
        }
        for bad in ["10", "ten", "-1s", "1x", ""] {
            let error = parse_wait(bad).unwrap_err();
            assert_eq!(error.status, axum::http::StatusCode::BAD_REQUEST, "{bad}");
            assert!(
                error.message.starts_with("Invalid wait time"),
                "{bad}: {}",
                error.message
            );
        }
    }

    #[test]
    fn the_jitter_adds_at_most_a_sixteenth() {
        let wait = Duration::from_secs(160);
        assert_eq!(with_jitter(wait, 0), wait);
        assert_eq!(with_jitter(wait, 10_000), wait + Duration::from_secs(10));
        assert_eq!(with_jitter(wait, 10_001), wait, "wraps within the spread");
        for random in [1, 7_777, u64::MAX] {
            let jittered = with_jitter(wait, random);
            assert!(
                jittered >= wait && jittered <= wait + wait / 16,
                "{random}: {jittered:?}"
            );
        }
        assert_eq!(with_jitter(Duration::from_millis(10), 5), Duration::from_millis(10));
    }

    #[test]
    fn blocking_parameters_read_as_consul_reads_them() {
        let blocking = Blocking::parse(&params("index=42&wait=120000ms&stale")).unwrap();
        assert_eq!(
            blocking,
            Blocking {
                index: Some(42),
                wait: Duration::from_secs(120),
                consistency: Consistency::Stale,
            }
        );
        let plain = Blocking::parse(&params("index=0")).unwrap();
        assert_eq!(plain.index, None, "index 0 does not block");
        assert_eq!(plain.wait, DEFAULT_WAIT);
        assert_eq!(plain.consistency, Consistency::Default);
        assert_eq!(
            Blocking::parse(&params("consistent=true")).unwrap().consistency,
            Consistency::Consistent
        );
        assert!(Blocking::parse(&params("stale&consistent")).is_err());
        assert!(
            Blocking::parse(&params("index=abc"))
                .unwrap_err()
                .message
                .starts_with("Invalid index")
        );
    }

    #[test]
    fn flags_are_bare_or_go_booleans() {
        let given = params("passing&stale=false&near=_agent&tag=a&tag=b&x=maybe");
        assert!(given.flag("passing").unwrap());
        assert!(!given.flag("stale").unwrap());
        assert!(!given.flag("absent").unwrap());
        assert!(given.flag("x").is_err());
        assert_eq!(given.all("tag").collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(params("passing=1").flag("passing"), Ok(true));
    }
}
