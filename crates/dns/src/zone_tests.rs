//! Internals of the zone the public API cannot see: what an update rebuilds, and the empty
//! non-terminal counts.

use std::sync::Arc;

use muster_core::Revision;

use super::*;
use crate::wire::push_name;

#[path = "../tests/it/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use fixture::{endpoint, key, snapshot};

fn wire(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    push_name(&mut out, name.trim_end_matches('.').split('.'));
    out
}

fn a_answer(zone: &Zone, name: &str) -> Arc<Precomputed> {
    let node = &zone.names[wire(name).as_slice()];
    Arc::clone(&node.answers.iter().find(|(t, _)| *t == rtype::A).unwrap().1)
}

#[test]
fn an_update_rebuilds_only_the_service_it_touches() {
    let mut zone = Zone::new(ZoneConfig::default()).unwrap();
    let (api, web) = (key("default", "prod", "api"), key("default", "prod", "web"));
    zone.update(&api, Some(&snapshot(&api, 1, vec![endpoint("api-0", &["10.0.0.1"])])));
    zone.update(&web, Some(&snapshot(&web, 2, vec![endpoint("web-0", &["10.0.1.1"])])));
    let (api_before, web_before) = (a_answer(&zone, "api.prod.muster."), a_answer(&zone, "web.prod.muster."));
    zone.update(&web, Some(&snapshot(&web, 3, vec![endpoint("web-0", &["10.0.1.2"])])));
    zone.set_revision(Revision(3));
    assert!(
        Arc::ptr_eq(&api_before, &a_answer(&zone, "api.prod.muster.")),
        "api was not rebuilt"
    );
    assert!(
        !Arc::ptr_eq(&web_before, &a_answer(&zone, "web.prod.muster.")),
        "web was"
    );
}

#[test]
fn shared_parents_live_as_long_as_any_name_below_them() {
    let mut zone = Zone::new(ZoneConfig::default()).unwrap();
    let (api, web) = (key("default", "prod", "api"), key("default", "prod", "web"));
    zone.update(&api, Some(&snapshot(&api, 1, vec![endpoint("api-0", &["10.0.0.1"])])));
    zone.update(&web, Some(&snapshot(&web, 2, vec![endpoint("web-0", &["10.0.1.1"])])));
    let parent = wire("prod.muster.");
    let shared = zone.names[parent.as_slice()].refs;
    zone.update(&api, None);
    assert!(zone.names[parent.as_slice()].refs < shared);
    assert!(!zone.names.contains_key(wire("api.prod.muster.").as_slice()));
    zone.update(&web, None);
    assert!(zone.names.is_empty(), "{:?}", zone.names.keys().collect::<Vec<_>>());
}
