//! What each workload sends, for each system: paths and bodies, built from the API contract's
//! own types ([`muster_core::api`]) so the bench cannot drift from the server. Pure.
//!
//! Every run writes under its own names (tenant `bench-<run>`, namespace `bench`; etcd keys
//! under `/muster-bench/<run>/`), so runs against a long-lived server never collide, and each
//! run has a tenant's quotas to itself.

use bytes::Bytes;
use muster_core::api::{GrantLeaseRequest, RegisterRequest};
use muster_core::{AddressSpec, EndpointSpec, Incarnation, PortSpec, Protocol};
use serde_json::json;

use crate::codec::{base64, prefix_range_end};

/// The service the read workload reads.
pub(crate) const READ_SERVICE: &str = "read";
/// The read workload's service holds five endpoints (the "5-endpoint service").
pub(crate) const READ_ENDPOINTS: u64 = 5;
/// The service every fanout watcher watches.
pub(crate) const FANOUT_SERVICE: &str = "fanout";
/// Lease TTL for renewals: a minute, far above the run's length, so that no lease expires
/// mid-run and turns renewals into errors.
pub(crate) const LEASE_TTL_SECS: u64 = 60;

/// The names one run writes under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    /// The run's id (base 36).
    pub(crate) run: String,
    /// The Muster tenant.
    pub(crate) tenant: String,
    /// The Muster namespace.
    pub(crate) namespace: String,
    /// Services the register workload spreads over.
    pub(crate) services: u64,
}

impl Names {
    /// Names for run `run_id` (any number: rendered in base 36).
    pub(crate) fn new(run_id: u64, services: usize) -> Names {
        let run = base36(run_id);
        Names {
            tenant: format!("bench-{run}"),
            namespace: "bench".into(),
            run,
            services: services as u64,
        }
    }

    /// The endpoint registered for operation `n`: one address derived from `n`, one port.
    pub(crate) fn endpoint(&self, n: u64) -> EndpointSpec {
        let ip = format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff);
        EndpointSpec {
            addresses: vec![AddressSpec { ip, scope: None }],
            ports: vec![PortSpec {
                name: "http".into(),
                port: 8080,
                protocol: Protocol::Http,
            }],
            ..EndpointSpec::default()
        }
    }

    fn register_body(&self, n: u64) -> Bytes {
        let request = RegisterRequest {
            incarnation: Incarnation(1),
            endpoint: self.endpoint(n),
            lease: None,
            expected_revision: None,
        };
        Bytes::from(serde_json::to_vec(&request).unwrap_or_default())
    }

    /// Muster: register new instance `i-n` of service `svc-(n mod services)`.
    pub(crate) fn muster_register(&self, n: u64) -> (String, Bytes) {
        self.muster_register_in(&format!("svc-{}", n % self.services), &format!("i-{n}"), n)
    }

    /// Muster: register `instance` of `service` with endpoint `n`.
    pub(crate) fn muster_register_in(&self, service: &str, instance: &str, n: u64) -> (String, Bytes) {
        let path = format!("/v1/registry/{}/{}/{service}/{instance}", self.tenant, self.namespace);
        (path, self.register_body(n))
    }

    /// Muster: grant a lease.
    pub(crate) fn muster_grant(&self) -> (String, Bytes) {
        let body = GrantLeaseRequest {
            ttl_ms: LEASE_TTL_SECS * 1_000,
            service: None,
        };
        (
            format!("/v1/leases/{}", self.tenant),
            Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        )
    }

    /// Muster: renew lease `id`.
    pub(crate) fn muster_renew(&self, id: u64) -> String {
        format!("/v1/leases/{}/{id}/renew", self.tenant)
    }

    /// Muster: read a service's snapshot.
    pub(crate) fn muster_snapshot(&self, service: &str) -> String {
        format!("/v1/registry/{}/{}/{service}", self.tenant, self.namespace)
    }

    /// Muster: watch a service from its current set.
    pub(crate) fn muster_watch(&self, service: &str) -> String {
        format!("/v1/watch/{}/{}/{service}", self.tenant, self.namespace)
    }

    /// etcd: the key prefix of `service`.
    pub(crate) fn etcd_prefix(&self, service: &str) -> String {
        format!("/muster-bench/{}/{service}/", self.run)
    }

    /// etcd: `kv/put` of `instance` under `service`, valued with the same record Muster gets.
    pub(crate) fn etcd_put_in(&self, service: &str, instance: &str, n: u64) -> Bytes {
        let key = format!("{}{instance}", self.etcd_prefix(service));
        let value = serde_json::to_vec(&self.endpoint(n)).unwrap_or_default();
        body(&json!({ "key": base64(key.as_bytes()), "value": base64(&value) }))
    }

    /// etcd: the register workload's put `n`, spread over the same services as Muster's.
    pub(crate) fn etcd_put(&self, n: u64) -> Bytes {
        self.etcd_put_in(&format!("svc-{}", n % self.services), &format!("i-{n}"), n)
    }

    /// etcd: a range over every key of `service`.
    pub(crate) fn etcd_range(&self, service: &str) -> Bytes {
        let prefix = self.etcd_prefix(service);
        body(&json!({
            "key": base64(prefix.as_bytes()),
            "range_end": base64(&prefix_range_end(prefix.as_bytes())),
        }))
    }

    /// etcd: a watch over every key of `service`.
    pub(crate) fn etcd_watch(&self, service: &str) -> Bytes {
        let prefix = self.etcd_prefix(service);
        body(&json!({ "create_request": {
            "key": base64(prefix.as_bytes()),
            "range_end": base64(&prefix_range_end(prefix.as_bytes())),
        }}))
    }
}

/// etcd: grant a lease.
pub(crate) fn etcd_grant() -> Bytes {
    body(&json!({ "TTL": LEASE_TTL_SECS }))
}

/// etcd: one keepalive of lease `id` (int64 as a string, as the gateway renders them).
pub(crate) fn etcd_keepalive(id: u64) -> Bytes {
    body(&json!({ "ID": id.to_string() }))
}

fn body(value: &serde_json::Value) -> Bytes {
    Bytes::from(value.to_string())
}

/// Lowercase base 36: short, and valid inside a DNS label.
pub(crate) fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use muster_core::{Limits, NetworkPolicy, ServiceKey};

    use super::*;

    fn names() -> Names {
        Names::new(123_456_789, 100)
    }

    #[test]
    fn every_name_is_a_valid_key_of_the_contract() {
        let names = names();
        assert_eq!(names.tenant, "bench-21i3v9");
        for n in [0, 99, 100, 1_000_000] {
            let service = format!("svc-{}", n % 100);
            ServiceKey::new(&names.tenant, &names.namespace, &service).unwrap();
            muster_core::InstanceId::new(&format!("i-{n}")).unwrap();
        }
        ServiceKey::new(&names.tenant, &names.namespace, READ_SERVICE).unwrap();
        ServiceKey::new(&names.tenant, &names.namespace, FANOUT_SERVICE).unwrap();
    }

    #[test]
    fn a_register_body_is_a_valid_contract_request() {
        let (path, body) = names().muster_register(4_242);
        assert_eq!(path, "/v1/registry/bench-21i3v9/bench/svc-42/i-4242");
        let request: RegisterRequest = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            request.lease, None,
            "registrations in the register workload are durable, no lease"
        );
        let attributes = request
            .endpoint
            .validate(&Limits::default(), &NetworkPolicy::default())
            .unwrap();
        assert_eq!(attributes.addresses[0].ip.to_string(), "10.0.16.146");
    }

    #[test]
    fn distinct_operations_get_distinct_addresses() {
        let names = names();
        assert_ne!(names.endpoint(1), names.endpoint(257));
    }

    #[test]
    fn a_grant_body_is_a_valid_contract_request() {
        let (path, body) = names().muster_grant();
        assert_eq!(path, "/v1/leases/bench-21i3v9");
        let request: GrantLeaseRequest = serde_json::from_slice(&body).unwrap();
        assert_eq!(request.ttl_ms, 60_000);
    }

    #[test]
    fn etcd_bodies_carry_base64_keys_under_the_run_prefix() {
        let names = names();
        let put: serde_json::Value = serde_json::from_slice(&names.etcd_put(7)).unwrap();
        assert_eq!(put["key"], base64(b"/muster-bench/21i3v9/svc-7/i-7"));
        let range: serde_json::Value = serde_json::from_slice(&names.etcd_range(READ_SERVICE)).unwrap();
        assert_eq!(range["key"], base64(b"/muster-bench/21i3v9/read/"));
        assert_eq!(range["range_end"], base64(b"/muster-bench/21i3v9/read0"));
        let keepalive: serde_json::Value = serde_json::from_slice(&etcd_keepalive(u64::MAX)).unwrap();
        assert_eq!(
            keepalive["ID"], "18446744073709551615",
            "int64 as text, never a lossy float"
        );
    }
}
