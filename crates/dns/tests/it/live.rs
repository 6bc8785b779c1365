//! The zone as shared with the registry's apply path: staged changes are visible at the
//! next answer, a reset replaces everything, other tenants are never staged.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use muster_core::Revision;
use muster_dns::{LiveZone, Transport};

use crate::fixture::{endpoint, key, snapshot};
use crate::support::{answers, query, rcode, zone};

fn ask(live: &LiveZone, name: &str) -> hickory_proto::op::Message {
    let mut out = Vec::new();
    live.answer(&query(name, RecordType::A, None), Transport::Udp, 0, &mut out);
    hickory_proto::op::Message::from_vec(&out).unwrap()
}

#[test]
fn a_staged_change_is_answered_by_the_next_query() {
    let live = LiveZone::new(zone());
    let api = key("default", "prod", "api");
    assert_eq!(rcode(&ask(&live, "api.prod.muster.")), ResponseCode::NXDomain);
    live.stage(
        &api,
        Some(snapshot(&api, 1, vec![endpoint("api-0", &["10.0.0.1"])])),
        Revision(1),
    );
    assert_eq!(answers(&ask(&live, "api.prod.muster.")), ["10.0.0.1"]);
    live.stage(
        &api,
        Some(snapshot(&api, 2, vec![endpoint("api-0", &["10.0.0.9"])])),
        Revision(2),
    );
    assert_eq!(answers(&ask(&live, "api.prod.muster.")), ["10.0.0.9"]);
    assert_eq!(live.read(|zone| zone.revision()), Revision(2));
}

#[test]
fn a_reset_replaces_everything_and_other_tenants_stay_out() {
    let live = LiveZone::new(zone());
    let (api, web, theirs) = (
        key("default", "prod", "api"),
        key("default", "prod", "web"),
        key("acme", "prod", "db"),
    );
    live.stage(
        &api,
        Some(snapshot(&api, 1, vec![endpoint("api-0", &["10.0.0.1"])])),
        Revision(1),
    );
    assert_eq!(answers(&ask(&live, "api.prod.muster.")), ["10.0.0.1"]);
    live.stage_reset(
        [
            snapshot(&web, 5, vec![endpoint("web-0", &["10.0.1.1"])]),
            snapshot(&theirs, 5, vec![endpoint("db-0", &["10.0.2.1"])]),
        ],
        Revision(5),
    );
    assert_eq!(rcode(&ask(&live, "api.prod.muster.")), ResponseCode::NXDomain);
    assert_eq!(answers(&ask(&live, "web.prod.muster.")), ["10.0.1.1"]);
    assert_eq!(rcode(&ask(&live, "db.prod.muster.")), ResponseCode::NXDomain);
    assert_eq!(live.read(|zone| zone.revision()), Revision(5));
}
