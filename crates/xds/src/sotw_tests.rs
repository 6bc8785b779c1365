use envoy_types::pb::google::rpc::Status;

use super::*;
use crate::heard::Answer;
use crate::test_support::resource;

fn ask(kind: Kind, names: &[&str], nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: kind.type_url().to_owned(),
        resource_names: names.iter().map(|name| (*name).to_owned()).collect(),
        response_nonce: nonce.to_owned(),
        ..DiscoveryRequest::default()
    }
}

fn nack(kind: Kind, names: &[&str], nonce: &str, message: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        error_detail: Some(Status {
            code: 3,
            message: message.to_owned(),
            details: Vec::new(),
        }),
        ..ask(kind, names, nonce)
    }
}

const EDS: Kind = Kind::Endpoint;

#[test]
fn a_first_request_is_answered_with_the_revision_as_version_and_an_ack_is_not() {
    let mut stream = SotwStream::new();
    assert_eq!(
        stream.on_request(&ask(EDS, &["api.prod"], ""), 0),
        Ok(Heard {
            kind: EDS,
            answer: Answer::None,
            subscribed: true
        })
    );
    let response = stream
        .respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(9))
        .unwrap();
    assert_eq!((response.version_info.as_str(), response.resources.len()), ("7", 1));
    assert_eq!(response.type_url, EDS.type_url());
    assert_eq!(stream.ledger().get(EDS, "api.prod").unwrap().sent, Some(Revision(7)));
    assert_eq!(stream.ledger().get(EDS, "api.prod").unwrap().acked, None);

    assert_eq!(
        stream.on_request(&ask(EDS, &["api.prod"], &response.nonce), 50),
        Ok(Heard {
            kind: EDS,
            answer: Answer::Acked,
            subscribed: false
        })
    );
    assert_eq!(
        stream.ledger().get(EDS, "api.prod").unwrap().acked,
        Some((Revision(7), 50))
    );
    // Nothing changed: no answer to the ACK.
    assert_eq!(stream.respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(9)), None);
    // A change is pushed with a fresh nonce.
    let next = stream
        .respond(EDS, &[resource(EDS, "api.prod", 12)], Revision(12))
        .unwrap();
    assert_eq!(next.version_info, "12");
    assert_ne!(next.nonce, response.nonce);
}

#[test]
fn a_nack_is_recorded_keeps_the_acked_revision_and_the_refused_one_is_not_resent() {
    let mut stream = SotwStream::new();
    stream.on_request(&ask(EDS, &["api.prod"], ""), 0).unwrap();
    let first = stream
        .respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(7))
        .unwrap();
    stream.on_request(&ask(EDS, &["api.prod"], &first.nonce), 10).unwrap();
    let second = stream
        .respond(EDS, &[resource(EDS, "api.prod", 8)], Revision(8))
        .unwrap();
    let heard = stream.on_request(&nack(EDS, &["api.prod"], &second.nonce, "bad weight"), 20);
    let Ok(Heard {
        answer: Answer::Nacked(refusal),
        ..
    }) = heard
    else {
        panic!("not a NACK: {heard:?}");
    };
    assert_eq!(
        (refusal.revision, refusal.message.as_str()),
        (Revision(8), "bad weight")
    );
    let state = stream.ledger().get(EDS, "api.prod").unwrap();
    assert_eq!((state.acked, state.nacks), (Some((Revision(7), 10)), 1));
    assert_eq!(state.last_nack.as_ref().unwrap().at_ms, 20);
    assert_eq!(stream.respond(EDS, &[resource(EDS, "api.prod", 8)], Revision(8)), None);
    assert!(
        stream
            .respond(EDS, &[resource(EDS, "api.prod", 9)], Revision(9))
            .is_some()
    );
}

#[test]
fn a_stale_nonce_is_ignored_whole() {
    let mut stream = SotwStream::new();
    stream.on_request(&ask(EDS, &["api.prod"], ""), 0).unwrap();
    let first = stream
        .respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(7))
        .unwrap();
    let second = stream
        .respond(EDS, &[resource(EDS, "api.prod", 8)], Revision(8))
        .unwrap();
    // An answer to the first response, asking for another name too: stale, ignored.
    assert_eq!(
        stream.on_request(&ask(EDS, &["api.prod", "web.prod"], &first.nonce), 5),
        Ok(Heard {
            kind: EDS,
            answer: Answer::Stale,
            subscribed: false
        })
    );
    assert_eq!(stream.ledger().get(EDS, "api.prod").unwrap().acked, None);
    assert!(!stream.subscription(EDS).unwrap().covers("web.prod"));
    assert_eq!(
        stream.on_request(&ask(EDS, &["api.prod"], &second.nonce), 6),
        Ok(Heard {
            kind: EDS,
            answer: Answer::Acked,
            subscribed: false
        })
    );
    assert_eq!(
        stream.ledger().get(EDS, "api.prod").unwrap().acked,
        Some((Revision(8), 6))
    );
}

#[test]
fn a_subscription_change_is_answered_and_an_unsubscribed_name_is_forgotten() {
    let mut stream = SotwStream::new();
    stream.on_request(&ask(EDS, &["api.prod"], ""), 0).unwrap();
    let both = [resource(EDS, "api.prod", 7), resource(EDS, "web.prod", 3)];
    let first = stream.respond(EDS, &both, Revision(7)).unwrap();
    assert_eq!(first.resources.len(), 1, "only what is subscribed");
    stream
        .on_request(&ask(EDS, &["api.prod", "web.prod"], &first.nonce), 1)
        .unwrap();
    let second = stream.respond(EDS, &both, Revision(7)).unwrap();
    assert_eq!(second.resources.len(), 2);
    stream.on_request(&ask(EDS, &["web.prod"], &second.nonce), 2).unwrap();
    assert!(stream.ledger().get(EDS, "api.prod").is_none());
    // A change of a service the stream no longer watches sends nothing.
    let later = [resource(EDS, "api.prod", 9), resource(EDS, "web.prod", 3)];
    let third = stream.respond(EDS, &later, Revision(9)).unwrap();
    assert_eq!((third.resources.len(), third.version_info.as_str()), (1, "3"));
    assert_eq!(stream.respond(EDS, &later, Revision(9)), None);
}

#[test]
fn full_state_kinds_leave_out_what_is_gone_and_an_empty_list_is_the_wildcard() {
    let mut stream = SotwStream::new();
    stream.on_request(&ask(Kind::Listener, &["api.prod"], ""), 0).unwrap();
    // It does not exist: an empty full-state answer says so, versioned by the registry.
    let none = stream.respond(Kind::Listener, &[], Revision(4)).unwrap();
    assert_eq!((none.resources.len(), none.version_info.as_str()), (0, "4"));
    let appeared = stream
        .respond(Kind::Listener, &[resource(Kind::Listener, "api.prod", 5)], Revision(5))
        .unwrap();
    assert_eq!(appeared.resources.len(), 1);
    let gone = stream.respond(Kind::Listener, &[], Revision(6)).unwrap();
    assert!(gone.resources.is_empty());

    let mut wildcard = SotwStream::new();
    wildcard.on_request(&ask(Kind::Cluster, &[], ""), 0).unwrap();
    assert!(wildcard.subscription(Kind::Cluster).unwrap().is_wildcard());
    let mut endpoints = SotwStream::new();
    endpoints.on_request(&ask(EDS, &[], ""), 0).unwrap();
    assert!(!endpoints.subscription(EDS).unwrap().is_wildcard());
}

#[test]
fn nothing_is_sent_for_a_type_never_asked_and_unknown_types_are_named() {
    let mut stream = SotwStream::new();
    assert_eq!(stream.respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(7)), None);
    let secret = DiscoveryRequest {
        type_url: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret".into(),
        ..DiscoveryRequest::default()
    };
    assert!(matches!(stream.on_request(&secret, 0), Err(UnknownType(_))));
}

#[test]
fn a_subscription_change_carrying_the_acknowledged_nonce_is_current_not_stale() {
    let mut stream = SotwStream::new();
    stream.on_request(&ask(EDS, &["api.prod"], ""), 0).unwrap();
    let both = [resource(EDS, "api.prod", 7), resource(EDS, "web.prod", 3)];
    let first = stream.respond(EDS, &both, Revision(7)).unwrap();
    assert_eq!(
        stream.on_request(&ask(EDS, &["api.prod"], &first.nonce), 1),
        Ok(Heard {
            kind: EDS,
            answer: Answer::Acked,
            subscribed: false
        })
    );
    // gRPC adds a cluster's assignment to the same request, with the nonce it last saw.
    assert_eq!(
        stream.on_request(&ask(EDS, &["api.prod", "web.prod"], &first.nonce), 2),
        Ok(Heard {
            kind: EDS,
            answer: Answer::None,
            subscribed: true
        })
    );
    assert_eq!(stream.respond(EDS, &both, Revision(7)).unwrap().resources.len(), 2);
    // The ACK time of the first answer is kept: the repeat answered nothing.
    assert_eq!(
        stream.ledger().get(EDS, "api.prod").unwrap().acked,
        Some((Revision(7), 1))
    );
}

#[test]
fn the_wildcard_ends_once_a_client_names_resources_and_gone_resources_leave_the_ledger() {
    let mut stream = SotwStream::new();
    stream.on_request(&ask(Kind::Cluster, &[], ""), 0).unwrap();
    assert!(stream.subscription(Kind::Cluster).unwrap().is_wildcard());
    let both = [
        resource(Kind::Cluster, "api.prod", 1),
        resource(Kind::Cluster, "web.prod", 2),
    ];
    let first = stream.respond(Kind::Cluster, &both, Revision(2)).unwrap();
    assert_eq!(first.resources.len(), 2);
    // web goes: it leaves the response and the ledger, though the wildcard still covers it.
    let second = stream.respond(Kind::Cluster, &both[..1], Revision(3)).unwrap();
    assert_eq!(second.resources.len(), 1);
    assert!(stream.ledger().get(Kind::Cluster, "web.prod").is_none());
    stream
        .on_request(&ask(Kind::Cluster, &["api.prod"], &second.nonce), 1)
        .unwrap();
    assert!(!stream.subscription(Kind::Cluster).unwrap().is_wildcard());
    // Closing its last channel: an empty list now unsubscribes, it is not the wildcard again.
    let third = stream.respond(Kind::Cluster, &both, Revision(3)).unwrap();
    stream.on_request(&ask(Kind::Cluster, &[], &third.nonce), 2).unwrap();
    let subscription = stream.subscription(Kind::Cluster).unwrap();
    assert!(!subscription.is_wildcard() && subscription.names().is_empty());
}

#[test]
fn a_nack_that_also_changes_the_subscription_is_reported_as_both() {
    let mut stream = SotwStream::new();
    stream.on_request(&ask(EDS, &["api.prod"], ""), 0).unwrap();
    let first = stream
        .respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(7))
        .unwrap();
    let heard = stream
        .on_request(&nack(EDS, &["api.prod", "web.prod"], &first.nonce, "bad"), 1)
        .unwrap();
    assert!(heard.subscribed);
    assert!(matches!(heard.answer, Answer::Nacked(_)), "{heard:?}");
}

#[test]
fn an_explicit_wildcard_counts_as_naming_so_a_later_empty_list_unsubscribes() {
    let mut stream = SotwStream::new();
    stream.on_request(&ask(Kind::Cluster, &["*"], ""), 0).unwrap();
    let first = stream
        .respond(Kind::Cluster, &[resource(Kind::Cluster, "api.prod", 1)], Revision(1))
        .unwrap();
    stream.on_request(&ask(Kind::Cluster, &[], &first.nonce), 1).unwrap();
    let subscription = stream.subscription(Kind::Cluster).unwrap();
    assert!(!subscription.is_wildcard() && subscription.names().is_empty());
}

#[test]
fn a_nonce_before_any_response_of_its_type_is_ignored_and_the_request_is_answered() {
    let mut stream = SotwStream::new();
    // A client resuming against a new server with the nonce its old one sent.
    let heard = stream.on_request(&ask(EDS, &["api.prod"], "17"), 0).unwrap();
    assert_eq!((heard.answer, heard.subscribed), (Answer::None, true));
    assert!(
        stream
            .respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(7))
            .is_some()
    );
}
