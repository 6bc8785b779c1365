use super::super::stream::{ErrorHead, Kind};
use super::*;

fn head(kind: Kind, code: Option<&str>) -> Head {
    Head {
        kind,
        revision: Some(7),
        error: code.map(|code| ErrorHead { code: code.into() }),
    }
}

#[test]
fn a_resume_is_judged_by_its_first_frame() {
    assert_eq!(Resumption::of(&head(Kind::Progress, None)), Resumption::Resumed);
    assert_eq!(Resumption::of(&head(Kind::Update, None)), Resumption::Resumed);
    // Trace: the server lost its history over the restart and re-lists the service.
    assert_eq!(Resumption::of(&head(Kind::Snapshot, None)), Resumption::Snapshot);
    assert_eq!(
        Resumption::of(&head(Kind::Error, Some("compacted"))),
        Resumption::Compacted
    );
    assert_eq!(
        Resumption::of(&head(Kind::Error, Some("future_revision"))),
        Resumption::Refused
    );
    assert_eq!(Resumption::of(&head(Kind::Resync, None)), Resumption::Refused);
}

#[test]
fn only_resumed_and_re_listed_streams_are_live_again() {
    let mut tally = Tally::default();
    for how in [
        Ok(Resumption::Resumed),
        Ok(Resumption::Resumed),
        Ok(Resumption::Snapshot),
        Ok(Resumption::Compacted),
        Err("connect: refused".to_owned()),
        Err("HTTP 429".to_owned()),
    ] {
        tally.count(how);
    }
    assert_eq!(
        (
            tally.resumed,
            tally.snapshots,
            tally.compacted,
            tally.refused,
            tally.failed
        ),
        (2, 1, 1, 0, 2)
    );
    assert_eq!(tally.live(), 3);
    assert_eq!(tally.first_failure.as_deref(), Some("connect: refused"));
}

#[test]
fn the_notes_give_the_counts_the_kernel_and_the_server_saw() {
    let summary = ReconnectSummary {
        watchers: 1_000,
        services: 100,
        endpoints_per_service: 10,
        opened: 1_000,
        at_latest: 1_000,
        revision: 1_000,
        revision_after_restart: Some(1_000),
        rss_before_kill_bytes: Some(64 << 20),
        restart_ms: 117.0,
        lost: 1_000,
        resumed: 998,
        snapshots: 2,
        compacted: 0,
        refused: 0,
        failed: 0,
        first_failure: None,
        all_live_ms: Some(1_240.0),
        reconnect: None,
        connect: None,
        resume: None,
        rss_at_ready_bytes: Some(44 << 20),
        rss_peak_bytes: Some(60 << 20),
        server_connects: Some(1_000),
        server_resumes: Some(998),
        server_compactions: Some(0),
        listen_overflows: Some(516),
        syn_retransmits: None,
        load: crate::LoadSpan {
            load_average_at_start: Some(1.5),
            load_average_at_end: None,
        },
    };
    let notes = summary.notes();
    assert!(notes.contains("resumed by revision 998, full snapshot 2"), "{notes}");
    assert!(notes.contains("516 listen-queue overflows, ? SYNs"), "{notes}");
    assert!(notes.contains("all live again 1.24 s after go"), "{notes}");
    assert!(notes.contains("peak 60.0 MiB"), "{notes}");
    assert!(notes.contains("1,000 connects, 998 resumes"), "{notes}");
    assert!(notes.contains("load average 1.50 at start, ? at end"), "{notes}");
}
