use envoy_types::pb::google::rpc::Status;

use super::*;
use crate::heard::Answer;
use crate::test_support::resource;

const EDS: Kind = Kind::Endpoint;

fn request(subscribe: &[&str], unsubscribe: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: EDS.type_url().to_owned(),
        resource_names_subscribe: subscribe.iter().map(|name| (*name).to_owned()).collect(),
        resource_names_unsubscribe: unsubscribe.iter().map(|name| (*name).to_owned()).collect(),
        response_nonce: nonce.to_owned(),
        ..DeltaDiscoveryRequest::default()
    }
}

fn names(response: &DeltaDiscoveryResponse) -> Vec<(&str, &str)> {
    response
        .resources
        .iter()
        .map(|r| (r.name.as_str(), r.version.as_str()))
        .collect()
}

#[test]
fn subscribe_sends_versions_then_only_changes_and_an_ack_is_recorded() {
    let mut stream = DeltaStream::new();
    stream.on_request(&request(&["api.prod"], &[], ""), 0).unwrap();
    let current = [resource(EDS, "api.prod", 7)];
    let first = stream.respond(EDS, &current, Revision(9)).unwrap();
    assert_eq!(names(&first), [("api.prod", "7")]);
    assert_eq!(first.system_version_info, "9");
    assert_eq!(
        stream.on_request(&request(&[], &[], &first.nonce), 3),
        Ok(Heard {
            kind: EDS,
            answer: Answer::Acked,
            subscribed: false
        })
    );
    assert_eq!(
        stream.ledger().get(EDS, "api.prod").unwrap().acked,
        Some((Revision(7), 3))
    );
    assert_eq!(stream.respond(EDS, &current, Revision(9)), None);
    let next = stream
        .respond(EDS, &[resource(EDS, "api.prod", 10)], Revision(10))
        .unwrap();
    assert_eq!(names(&next), [("api.prod", "10")]);
}

#[test]
fn an_unknown_name_is_removed_at_once_and_one_that_goes_is_removed_too() {
    let mut stream = DeltaStream::new();
    stream
        .on_request(&request(&["api.prod", "nope.prod", "not a name"], &[], ""), 0)
        .unwrap();
    let first = stream
        .respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(7))
        .unwrap();
    assert_eq!(names(&first), [("api.prod", "7")]);
    assert_eq!(first.removed_resources, ["nope.prod", "not a name"]);
    // Said once only.
    assert_eq!(stream.respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(7)), None);
    let gone = stream.respond(EDS, &[], Revision(8)).unwrap();
    assert_eq!(
        (gone.resources.len(), gone.removed_resources.as_slice()),
        (0, ["api.prod".to_owned()].as_slice())
    );
    // It comes back: sent again.
    let back = stream
        .respond(EDS, &[resource(EDS, "api.prod", 12)], Revision(12))
        .unwrap();
    assert_eq!(names(&back), [("api.prod", "12")]);
}

#[test]
fn unsubscribe_stops_pushes_without_a_removal() {
    let mut stream = DeltaStream::new();
    stream
        .on_request(&request(&["api.prod", "web.prod"], &[], ""), 0)
        .unwrap();
    let both = [resource(EDS, "api.prod", 7), resource(EDS, "web.prod", 3)];
    let first = stream.respond(EDS, &both, Revision(7)).unwrap();
    assert_eq!(first.resources.len(), 2);
    stream
        .on_request(&request(&[], &["web.prod"], &first.nonce), 1)
        .unwrap();
    assert!(stream.ledger().get(EDS, "web.prod").is_none());
    assert_eq!(stream.respond(EDS, &both, Revision(7)), None);
    let changed = [resource(EDS, "api.prod", 7), resource(EDS, "web.prod", 4)];
    assert_eq!(stream.respond(EDS, &changed, Revision(8)), None);
}

#[test]
fn initial_versions_that_match_are_not_resent_and_stale_ones_are() {
    let mut stream = DeltaStream::new();
    let mut reconnect = request(&["api.prod", "web.prod"], &[], "");
    reconnect.initial_resource_versions = [
        ("api.prod".to_owned(), "7".to_owned()),
        ("web.prod".to_owned(), "2".to_owned()),
    ]
    .into_iter()
    .collect();
    stream.on_request(&reconnect, 0).unwrap();
    let first = stream
        .respond(
            EDS,
            &[resource(EDS, "api.prod", 7), resource(EDS, "web.prod", 3)],
            Revision(9),
        )
        .unwrap();
    assert_eq!(names(&first), [("web.prod", "3")]);
    assert!(first.removed_resources.is_empty());
}

#[test]
fn a_nack_keeps_the_acked_version_and_the_refused_one_is_not_resent_and_stale_nonces_ack_nothing() {
    let mut stream = DeltaStream::new();
    stream.on_request(&request(&["api.prod"], &[], ""), 0).unwrap();
    let first = stream
        .respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(7))
        .unwrap();
    stream.on_request(&request(&[], &[], &first.nonce), 1).unwrap();
    let second = stream
        .respond(EDS, &[resource(EDS, "api.prod", 8)], Revision(8))
        .unwrap();
    let mut refuse = request(&[], &[], &second.nonce);
    refuse.error_detail = Some(Status {
        code: 3,
        message: "no".into(),
        details: Vec::new(),
    });
    assert!(matches!(
        stream.on_request(&refuse, 2),
        Ok(Heard {
            answer: Answer::Nacked(_),
            ..
        })
    ));
    let state = stream.ledger().get(EDS, "api.prod").unwrap();
    assert_eq!((state.acked, state.nacks), (Some((Revision(7), 1)), 1));
    assert_eq!(state.last_nack.as_ref().unwrap().revision, Revision(8));
    assert_eq!(stream.respond(EDS, &[resource(EDS, "api.prod", 8)], Revision(8)), None);
    assert_eq!(
        stream.on_request(&request(&[], &[], "999"), 3),
        Ok(Heard {
            kind: EDS,
            answer: Answer::Stale,
            subscribed: false
        })
    );
}

#[test]
fn the_wildcard_follows_every_resource_and_a_first_empty_cluster_request_is_one() {
    let mut stream = DeltaStream::new();
    stream
        .on_request(
            &DeltaDiscoveryRequest {
                type_url: Kind::Cluster.type_url().to_owned(),
                ..DeltaDiscoveryRequest::default()
            },
            0,
        )
        .unwrap();
    assert!(stream.subscription(Kind::Cluster).unwrap().is_wildcard());
    let first = stream
        .respond(
            Kind::Cluster,
            &[
                resource(Kind::Cluster, "api.prod", 1),
                resource(Kind::Cluster, "web.prod", 2),
            ],
            Revision(2),
        )
        .unwrap();
    assert_eq!(first.resources.len(), 2);
    let shrunk = stream
        .respond(Kind::Cluster, &[resource(Kind::Cluster, "api.prod", 1)], Revision(3))
        .unwrap();
    assert_eq!(shrunk.removed_resources, ["web.prod"]);
}

#[test]
fn subscribing_again_to_a_held_resource_is_answered() {
    let mut stream = DeltaStream::new();
    stream.on_request(&request(&["api.prod"], &[], ""), 0).unwrap();
    let current = [resource(EDS, "api.prod", 7)];
    let first = stream.respond(EDS, &current, Revision(7)).unwrap();
    stream.on_request(&request(&[], &[], &first.nonce), 1).unwrap();
    // Envoy dropped it and asks again before its unsubscribe went out.
    let heard = stream.on_request(&request(&["api.prod"], &[], ""), 2).unwrap();
    assert!(heard.subscribed);
    let again = stream.respond(EDS, &current, Revision(7)).unwrap();
    assert_eq!(names(&again), [("api.prod", "7")]);
}

#[test]
fn a_reconnect_s_initial_versions_count_as_acknowledged() {
    let mut stream = DeltaStream::new();
    let mut reconnect = request(&["api.prod"], &[], "");
    reconnect.initial_resource_versions = [("api.prod".to_owned(), "7".to_owned())].into_iter().collect();
    stream.on_request(&reconnect, 40).unwrap();
    assert_eq!(stream.respond(EDS, &[resource(EDS, "api.prod", 7)], Revision(9)), None);
    let state = stream.ledger().get(EDS, "api.prod").unwrap();
    assert_eq!((state.sent, state.acked), (Some(Revision(7)), Some((Revision(7), 40))));
}
