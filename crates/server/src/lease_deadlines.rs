//! The lease deadline table (DESIGN "Leases off the log"): pure, time as input. It lives in
//! `muster-registry` ([`muster_registry::LeaseDeadlines`]) so that the lab drives the same
//! table on its virtual clock; the keeper task ([`crate::lease_keeper`]) is its shell here.

pub(crate) use muster_registry::LeaseDeadlines;
