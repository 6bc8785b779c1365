//! Every open xDS stream and what it acknowledged (SPEC D5, O2): `GET /v1/xds/clients` and
//! the convergence metrics read it.
//!
//! Each stream owns one [`ClientRecord`] and copies its ledger into it after every step; a
//! reader takes the map's lock only to clone the `Arc`s, then each record's own lock.
//!
//! A reader sees a stream only when its rules let it read everything the stream names
//! (SPEC S3, [`ClientRecord::shown`]): a token allowed one service sees the streams that
//! follow that service alone, never its tenant's others nor another tenant's.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{Kind, Ledger, ServiceName};
use muster_core::{Label, Revision, ServiceKey};

use muster_core::xds_view::{ClientView, ClientsPage, NackView, Protocol, ResourceView};

/// One open stream.
#[derive(Debug)]
pub(crate) struct ClientRecord {
    pub(crate) stream: u64,
    pub(crate) node_id: String,
    pub(crate) cluster: String,
    pub(crate) tenant: Label,
    pub(crate) protocol: Protocol,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) connected_at_ms: u64,
    ledger: Mutex<Ledger>,
}

impl ClientRecord {
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Copies the stream's ledger in, when it changed.
    pub(crate) fn update(&self, ledger: &Ledger) {
        let mut held = self.ledger();
        if *held != *ledger {
            held.clone_from(ledger);
        }
    }

    /// Whether a reader may see this stream (SPEC S3): when it may read all of the stream's
    /// tenant (`reads_tenant`), or when the stream names at least one resource and every
    /// name is a service of its tenant the reader may read (`reads`). A stream that names
    /// nothing yet, or a name that is no service, is shown only to a reader of the whole
    /// tenant: its node id and address are the tenant's, not any one service's.
    pub(crate) fn shown(&self, reads_tenant: impl Fn(&Label) -> bool, reads: impl Fn(&ServiceKey) -> bool) -> bool {
        if reads_tenant(&self.tenant) {
            return true;
        }
        let ledger = self.ledger();
        let mut names = ledger.iter().map(|(_, name, _)| name).peekable();
        names.peek().is_some()
            && names.all(|name| ServiceName::parse(name).is_some_and(|name| reads(&name.key(&self.tenant))))
    }
}

/// The open streams.
#[derive(Debug, Default)]
pub(crate) struct XdsClients {
    streams: Mutex<BTreeMap<u64, Arc<ClientRecord>>>,
    next: AtomicU64,
}

/// A stream's place in [`XdsClients`]; dropping it removes the stream.
pub(crate) struct Registered {
    clients: Arc<XdsClients>,
    pub(crate) record: Arc<ClientRecord>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.clients.lock().remove(&self.record.stream);
    }
}

/// Who a new stream is.
pub(crate) struct Identity {
    pub(crate) node_id: String,
    pub(crate) cluster: String,
    pub(crate) tenant: Label,
    pub(crate) protocol: Protocol,
    pub(crate) peer: Option<SocketAddr>,
}

impl XdsClients {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<ClientRecord>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new stream at `now_ms`.
    pub(crate) fn register(self: &Arc<Self>, identity: Identity, now_ms: u64) -> Registered {
        let stream = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let record = Arc::new(ClientRecord {
            stream,
            node_id: identity.node_id,
            cluster: identity.cluster,
            tenant: identity.tenant,
            protocol: identity.protocol,
            peer: identity.peer,
            connected_at_ms: now_ms,
            ledger: Mutex::new(Ledger::default()),
        });
        self.lock().insert(stream, Arc::clone(&record));
        Registered {
            clients: Arc::clone(self),
            record,
        }
    }

    /// Every open stream.
    pub(crate) fn records(&self) -> Vec<Arc<ClientRecord>> {
        self.lock().values().cloned().collect()
    }

    /// Every open stream's node id and the services of the endpoint resources it follows:
    /// connected and calm, it is a live convergence subscriber (SPEC O3).
    pub(crate) fn followed(&self) -> Vec<(String, Vec<ServiceKey>)> {
        self.records()
            .into_iter()
            .map(|record| {
                let services = record
                    .ledger()
                    .iter()
                    .filter(|(kind, _, _)| *kind == Kind::Endpoint)
                    .filter_map(|(_, name, _)| ServiceName::parse(name).map(|name| name.key(&record.tenant)))
                    .collect();
                (record.node_id.clone(), services)
            })
            .collect()
    }

    /// The page of `GET /v1/xds/clients`: the streams the reader may see
    /// ([`ClientRecord::shown`] with `reads_tenant` and `reads`), at `now_ms`, each resource
    /// beside its service's latest revision (`latest`).
    pub(crate) fn page(
        &self,
        revision: Revision,
        now_ms: u64,
        reads_tenant: impl Fn(&Label) -> bool,
        reads: impl Fn(&ServiceKey) -> bool,
        latest: impl Fn(&ServiceKey) -> Option<Revision>,
    ) -> ClientsPage {
        let clients = self
            .records()
            .into_iter()
            .filter(|record| record.shown(&reads_tenant, &reads))
            .map(|record| {
                let ledger = record.ledger().clone();
                let resources = ledger
                    .iter()
                    .map(|(kind, name, state)| ResourceView {
                        kind: kind.as_str().to_owned(),
                        type_url: kind.type_url().to_owned(),
                        resource: name.to_owned(),
                        sent_revision: state.sent.map(|r| r.0),
                        acked_revision: state.acked.map(|(r, _)| r.0),
                        // Convergence is about endpoints: a listener, route or cluster
                        // changes only with its service's lineage.
                        latest_revision: (kind == Kind::Endpoint)
                            .then(|| ServiceName::parse(name))
                            .flatten()
                            .and_then(|name| latest(&name.key(&record.tenant)))
                            .map(|r| r.0),
                        age_ms: state.acked.map(|(_, at)| now_ms.saturating_sub(at)),
                        nacks: state.nacks,
                        last_nack: state.last_nack.as_ref().map(|nack| NackView {
                            revision: nack.revision.0,
                            message: nack.message.clone(),
                            age_ms: now_ms.saturating_sub(nack.at_ms),
                        }),
                    })
                    .collect();
                ClientView {
                    stream: record.stream,
                    node_id: record.node_id.clone(),
                    cluster: record.cluster.clone(),
                    tenant: record.tenant.as_str().to_owned(),
                    protocol: record.protocol,
                    peer: record.peer.map(|peer| peer.to_string()),
                    connected_ms: now_ms.saturating_sub(record.connected_at_ms),
                    resources,
                }
            })
            .collect();
        ClientsPage {
            revision: revision.0,
            clients,
        }
    }

    /// Per service (tenant, namespace, service): EDS subscribers and those whose acked
    /// revision is the service's latest, for the metrics.
    pub(crate) fn convergence(
        &self,
        latest: impl Fn(&ServiceKey) -> Option<Revision>,
    ) -> BTreeMap<ServiceKey, (u64, u64)> {
        let mut per_service: BTreeMap<ServiceKey, (u64, u64)> = BTreeMap::new();
        for record in self.records() {
            let ledger = record.ledger();
            for (kind, name, state) in ledger.iter() {
                let Some(key) = (kind == Kind::Endpoint).then(|| ServiceName::parse(name)).flatten() else {
                    continue;
                };
                let key = key.key(&record.tenant);
                let at_latest = match (state.acked, latest(&key)) {
                    (Some((acked, _)), Some(latest)) => acked >= latest,
                    _ => false,
                };
                let counts = per_service.entry(key).or_default();
                counts.0 += 1;
                counts.1 += u64::from(at_latest);
            }
        }
        per_service
    }
}
