//! The watch hub (DESIGN "Encode once, send many"; SPEC W1–W4, K1): every applied command's
//! per-service updates, encoded once and appended to one bounded broadcast log per watched
//! service and namespace, read by each watcher with its own cursor.
//!
//! It sits below the front door: the gate's `subscribe` hands out a [`Subscription`], which
//! is the [`Stream`](futures_util::Stream) of a watch's live NDJSON frames. The node tells
//! the hub of every apply through [`ApplyObserver`](muster_consensus::ApplyObserver), under
//! the registry's write lock.
//!
//! # Layout
//! - `hub`: [`WatchHub`] (topics, the applied revision, progress ticks) and [`Subscription`].
//! - `topic`: one scope's bounded log and its watchers' cursors.
//! - `coalesce`: a lagging watcher's backlog folded into one update per service.
//! - [`frames`]: watch frames as NDJSON lines.

#![forbid(unsafe_code)]

mod coalesce;
pub mod frames;
mod hub;
mod topic;

pub use hub::{Next, Subscription, WatchHub, WatchStats};
