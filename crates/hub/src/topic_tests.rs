use muster_core::{Digest, Revision, ServiceKey};

use super::*;

fn api() -> ServiceKey {
    ServiceKey::new("acme", "prod", "api").unwrap()
}

/// An update of `api` at `revision` without events (the topic never looks inside).
fn update(revision: u64) -> Arc<ServiceUpdate> {
    Arc::new(ServiceUpdate {
        key: api(),
        revision: Revision(revision),
        prev_revision: Revision(revision - 1),
        digest: Digest(revision),
        events: Vec::new(),
    })
}

fn frame(text: &'static str) -> Bytes {
    Bytes::from_static(text.as_bytes())
}

/// A topic and the resync count it reports to.
fn topic(bound: usize) -> (Topic, Arc<CutCounts>) {
    let cuts = Arc::new(CutCounts::default());
    (Topic::new(bound, Arc::clone(&cuts)), cuts)
}

fn count(cuts: &CutCounts) -> u64 {
    cuts.resyncs.load(Ordering::Relaxed)
}

#[test]
fn a_watcher_that_falls_a_bound_behind_lags_once() {
    let (topic, resyncs) = topic(2);
    let slow = topic.join();
    for text in ["1", "2", "3"] {
        topic.append(frame(text), update(1));
    }
    let backlog = topic.backlog();
    assert_eq!((backlog.watchers, count(&resyncs)), (0, 1), "cut by the look");
    assert!(topic.lock().slots.is_empty(), "the cut watcher's slots are released");
    assert_eq!(topic.read(slow, None), Read::Lagged);
    assert_eq!(count(&resyncs), 1, "counted once");
}

#[test]
fn a_reader_finds_its_own_lag() {
    let (topic, resyncs) = topic(1);
    let slow = topic.join();
    topic.append(frame("1"), update(1));
    topic.append(frame("2"), update(1));
    assert_eq!(topic.read(slow, None), Read::Lagged);
    assert_eq!(count(&resyncs), 1);
    assert_eq!(topic.backlog().watchers, 0, "not counted again by the look");
    assert_eq!(count(&resyncs), 1);
    assert!(topic.leave(slow), "leaving after the cut is harmless");
}

#[test]
fn closing_comes_after_unread_frames_and_resync_replaces_them() {
    let (topic, resyncs) = topic(4);
    let watcher = topic.join();
    topic.append(frame("1"), update(1));
    topic.end_with_closing(frame("closing"));
    topic.end_with_resync(frame("ignored: the first end wins"));
    topic.append(frame("dropped: ended"), update(1));
    assert_eq!(topic.read(watcher, None), Read::Frame(frame("1")));
    assert_eq!(topic.read(watcher, None), Read::Last(frame("closing")));

    assert_eq!(count(&resyncs), 0, "closing is no resync");

    let (reset, resyncs) = self::topic(4);
    let watcher = reset.join();
    reset.append(frame("1"), update(1));
    reset.end_with_resync(frame("resync"));
    assert_eq!(count(&resyncs), 1, "one resync per watcher");
    assert_eq!(reset.read(watcher, None), Read::Last(frame("resync")));
    assert!(reset.leave(watcher));
    assert_eq!(count(&resyncs), 1);
}

#[test]
fn slots_are_freed_by_the_last_reader() {
    let (topic, _) = topic(4);
    let one = topic.join();
    let two = topic.join();
    topic.append(frame("1"), update(1));
    assert_eq!(topic.read(one, None), Read::Frame(frame("1")));
    assert_eq!(topic.lock().slots.len(), 1);
    assert_eq!(topic.read(two, None), Read::Frame(frame("1")));
    assert!(topic.lock().slots.is_empty());
    assert_eq!(topic.read(two, None), Read::Empty);
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Counting(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn an_empty_read_registers_once_and_the_next_append_wakes() {
    let (topic, _) = topic(4);
    let watcher = topic.join();
    let counting = Arc::new(Counting::default());
    let waker = Waker::from(Arc::clone(&counting));
    assert_eq!(topic.read(watcher, Some(&waker)), Read::Empty);
    assert_eq!(
        topic.read(watcher, Some(&waker)),
        Read::Empty,
        "polled again: still one waker"
    );
    assert_eq!(topic.lock().waiting.len(), 1);
    topic.append(frame("1"), update(1));
    assert_eq!(counting.0.load(Ordering::SeqCst), 1);
    assert_eq!(topic.read(watcher, Some(&waker)), Read::Frame(frame("1")));
    assert_eq!(
        topic.read(watcher, Some(&waker)),
        Read::Empty,
        "registers for the next round"
    );
    topic.end_with_closing(frame("closing"));
    assert_eq!(counting.0.load(Ordering::SeqCst), 2);
    assert_eq!(topic.read(watcher, None), Read::Last(frame("closing")));
}

#[test]
fn a_watcher_far_enough_behind_gets_its_backlog_coalesced_once_for_all_at_its_place() {
    let (topic, resyncs) = topic(64);
    let (one, two, current) = (topic.join(), topic.join(), topic.join());
    topic.append(frame("1"), update(1));
    assert_eq!(
        topic.read(current, None),
        Read::Frame(frame("1")),
        "one behind: the shared frame"
    );
    for revision in 2..=COALESCE_BEHIND + 1 {
        topic.append(frame("n"), update(revision));
    }
    let Read::Behind { from, to, updates } = topic.read(one, None) else {
        panic!("one is {} frames behind", COALESCE_BEHIND + 1);
    };
    assert_eq!(
        (from, to, updates.len() as u64),
        (0, COALESCE_BEHIND + 1, COALESCE_BEHIND + 1)
    );
    let coalesced: Arc<[Bytes]> = vec![frame("coalesced")].into();
    let taken = topic.take_coalesced(one, from, to, Arc::clone(&coalesced)).unwrap();
    assert!(Arc::ptr_eq(&taken, &coalesced));
    assert_eq!(topic.read(one, None), Read::Empty, "the backlog is taken");
    let Read::Coalesced(shared) = topic.read(two, None) else {
        panic!("two is at the same place");
    };
    assert!(Arc::ptr_eq(&shared, &coalesced), "encoded once for both");
    assert_eq!(
        topic.lock().slots.len(),
        COALESCE_BEHIND as usize,
        "current has yet to read 2.."
    );
    let Read::Behind { from, .. } = topic.read(current, None) else {
        panic!("current is {COALESCE_BEHIND} behind");
    };
    assert_eq!(from, 1, "elsewhere: its own backlog");
    assert_eq!(
        topic.take_coalesced(current, 0, COALESCE_BEHIND + 1, coalesced),
        None,
        "not its place"
    );
    assert_eq!(count(&resyncs), 0);
}

#[test]
fn a_backlog_evicted_while_it_was_coalesced_is_still_taken_but_a_cut_watcher_resyncs() {
    let (topic, resyncs) = topic(COALESCE_BEHIND as usize);
    let (evicted, cut) = (topic.join(), topic.join());
    for revision in 1..=COALESCE_BEHIND {
        topic.append(frame("n"), update(revision));
    }
    let (Read::Behind { from, to, .. }, Read::Behind { .. }) = (topic.read(evicted, None), topic.read(cut, None))
    else {
        panic!("a whole bound behind, not yet past it");
    };
    topic.append(frame("evicts the first"), update(COALESCE_BEHIND + 1));
    // The frames were built from the updates taken with the backlog: nothing is lost.
    assert!(
        topic
            .take_coalesced(evicted, from, to, vec![frame("c")].into())
            .is_some()
    );
    assert_eq!(topic.read(evicted, None), Read::Frame(frame("evicts the first")));
    // The stats' look cuts a watcher whose cursor fell off the log: it must resync.
    let _ = topic.backlog();
    assert_eq!(count(&resyncs), 1);
    assert_eq!(topic.take_coalesced(cut, from, to, vec![frame("c")].into()), None);
    assert_eq!(topic.read(cut, None), Read::Lagged);
    assert_eq!(count(&resyncs), 1);
}
