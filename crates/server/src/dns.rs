//! Feeding the DNS view (SPEC D2) from the apply path (the fan-out is `observers`).
//!
//! ```text
//!  Node (registry write lock) ──applied──▶ Observers ──▶ DnsFeed ──stage(key, Arc snapshot)──▶ LiveZone
//!                                              └──────▶ WatchHub (watch frames)
//! ```
//!
//! DNS goes first: by the time the hub publishes a revision (and a watcher could react to it),
//! the zone has it staged, so DNS never lags what a watch has already shown. Under the lock
//! the feed does one snapshot lookup and one map insert per touched service of its tenant;
//! the answers are rebuilt by the next DNS query (`muster_dns::LiveZone`).

use std::sync::Arc;

use muster_consensus::ApplyObserver;
use muster_core::{ServiceKey, ServiceSnapshot};
use muster_dns::{DnsListener, LiveZone, Zone};
use muster_registry::{Applied, Registry};

use crate::{ServerConfig, ServerError};
use muster_federation::Federation;
use muster_gate::clock::ServerClock;

/// Stages every change of the zone's tenant into the live DNS zone: in a federated region, a
/// service a failover policy covers as served with its failover tier (`muster_federation`'s `tiers`).
pub(crate) struct DnsFeed {
    zone: Arc<LiveZone>,
    federation: Option<(Arc<Federation>, ServerClock)>,
}

impl DnsFeed {
    pub(crate) fn new(zone: Arc<LiveZone>, federation: Option<(Arc<Federation>, ServerClock)>) -> DnsFeed {
        DnsFeed { zone, federation }
    }

    /// The set DNS answers for `key` (nothing is computed for another tenant's service,
    /// which the zone does not show).
    fn served(&self, registry: &Registry, key: &ServiceKey) -> Option<Arc<ServiceSnapshot>> {
        if key.tenant != *self.zone.tenant() {
            return None;
        }
        match &self.federation {
            Some((federation, clock)) => federation.served(registry, key, clock.unix_now_ms()),
            None => registry.known_snapshot(key),
        }
    }
}

impl ApplyObserver for DnsFeed {
    fn applied(&self, registry: &Registry, applied: &Applied) {
        for key in applied.updates.iter().map(|u| &u.key).chain(&applied.mirrored) {
            self.zone.stage(key, self.served(registry, key), applied.revision);
        }
        for key in &applied.released {
            self.zone.stage(key, self.served(registry, key), applied.revision);
        }
    }

    fn reset(&self, registry: &Registry) {
        let tenant = self.zone.tenant();
        let mut keys: Vec<ServiceKey> = registry
            .namespace_keys()
            .filter(|namespace| namespace.tenant == *tenant)
            .flat_map(|namespace| registry.services(namespace))
            .map(|set| set.key().clone())
            .collect();
        // Released services still fenced are known, and empty (NODATA, SPEC W5).
        keys.extend(registry.fenced_only().filter(|key| key.tenant == *tenant).cloned());
        if let Some((federation, _)) = &self.federation {
            keys.extend(federation.covered(registry));
        }
        keys.sort();
        keys.dedup();
        let snapshots: Vec<_> = keys.iter().filter_map(|key| self.served(registry, key)).collect();
        self.zone.stage_reset(snapshots, registry.revision());
    }
}

/// The live zone for `config`, or why its DNS settings are unusable.
pub(crate) fn zone(config: &ServerConfig) -> Result<Arc<LiveZone>, ServerError> {
    // DNS carries no credentials: a listener answers one configured tenant's names
    // (`dns_zone.tenant`, never a mix; SPEC S3) to whoever reaches it. With authentication
    // off it binds loopback only, like the API; with it on, publishing that view on a network
    // is the operator's configured choice.
    if config.dns_enabled && !config.dns.ip().is_loopback() && !config.auth.enabled {
        return Err(ServerError::Config(format!(
            "dns: {} is not a loopback address; without authentication ([auth] enabled = true) \
             the DNS view binds loopback only (e.g. 127.0.0.1:7053)",
            config.dns
        )));
    }
    let zone = Zone::new(config.dns_zone.clone()).map_err(|err| ServerError::Config(err.to_string()))?;
    Ok(Arc::new(LiveZone::new(zone)))
}

/// Starts the listener when DNS is enabled.
pub(crate) async fn listen(config: &ServerConfig, zone: Arc<LiveZone>) -> Result<Option<DnsListener>, ServerError> {
    if !config.dns_enabled {
        return Ok(None);
    }
    DnsListener::bind(config.dns, zone)
        .await
        .map(Some)
        .map_err(|err| ServerError::Bind {
            addr: err.addr,
            source: err.source,
        })
}
