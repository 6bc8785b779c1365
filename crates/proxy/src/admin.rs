//! The admin listener (SPEC D3, O1): `/metrics` in Prometheus text and `/debug/endpoints`,
//! what each listener sees now — the view's revisions and age, every endpoint with its
//! standing (eligible, ejected, draining ...) and its requests in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use muster_client::balance::{Excluded, Standing, Unhealthy};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use crate::clock;
use crate::target::{Target, key_of};

/// The routes, over the proxy's listeners.
pub fn router(targets: Arc<Vec<Arc<Target>>>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/debug/endpoints", get(endpoints))
        .with_state(targets)
}

type Labels = Vec<(&'static str, String)>;

/// One scrape: a registry built for it from the live counters, each metric one family with a
/// row per listener (label `listener`), so every family is written once.
async fn metrics(State(targets): State<Arc<Vec<Arc<Target>>>>) -> impl IntoResponse {
    let mut registry = Registry::with_prefix("muster_proxy");
    let labels = |target: &Target| -> Labels { vec![("listener", target.config.listen.to_string())] };
    let counter = |registry: &mut Registry, name: &str, help: &str, read: &dyn Fn(&Target) -> &AtomicU64| {
        let family = Family::<Labels, Counter>::default();
        for target in targets.iter() {
            family
                .get_or_create(&labels(target))
                .inc_by(read(target).load(Ordering::Relaxed));
        }
        registry.register(name, help, family);
    };
    counter(
        &mut registry,
        "requests_ok",
        "Requests (HTTP) or connections (TCP) forwarded and answered",
        &|t| &t.stats.ok,
    );
    counter(
        &mut registry,
        "requests_failed",
        "Requests or connections that failed after every allowed attempt",
        &|t| &t.stats.failed,
    );
    counter(
        &mut registry,
        "requests_refused",
        "Requests or connections refused: no view, or no eligible endpoint",
        &|t| &t.stats.refused,
    );
    counter(&mut registry, "retries", "Retries sent to another endpoint", &|t| {
        &t.stats.retries
    });
    counter(
        &mut registry,
        "retry_budget_exhausted",
        "Retries wanted but refused by the retry budget",
        &|t| &t.stats.budget_exhausted,
    );
    counter(&mut registry, "ejections", "Endpoints ejected locally", &|t| {
        &t.stats.ejections
    });
    let revision = Family::<Labels, Gauge>::default();
    let age = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let in_flight = Family::<Labels, Gauge>::default();
    let ejected = Family::<Labels, Gauge>::default();
    let now = clock::now_ms();
    for target in targets.iter() {
        let view = target.resolver().status();
        let labels = labels(target);
        revision
            .get_or_create(&labels)
            .set(view.active.map_or(0, |r| r.0 as i64));
        age.get_or_create(&labels)
            .set(view.age_ms.map_or(-1.0, |ms| ms as f64 / 1_000.0));
        in_flight
            .get_or_create(&labels)
            .set(target.in_flight().values().sum::<u64>() as i64);
        let count = target.resolver().view().active().map_or(0, |set| {
            set.iter().filter(|e| target.picker().is_ejected(e, now)).count()
        });
        ejected.get_or_create(&labels).set(count as i64);
    }
    registry.register(
        "view_revision",
        "The revision of the set the listener routes over (0: none)",
        revision,
    );
    registry.register(
        "view_age_seconds",
        "Seconds since the registry last confirmed the set (-1: no set)",
        age,
    );
    registry.register("in_flight", "Requests or streams in flight", in_flight);
    registry.register("ejected_endpoints", "Endpoints ejected locally now", ejected);
    let mut text = String::new();
    if encode(&mut text, &registry).is_err() {
        text.clear();
    }
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
}

async fn endpoints(State(targets): State<Arc<Vec<Arc<Target>>>>) -> Json<Value> {
    let listeners: Vec<Value> = targets.iter().map(|target| listener_view(target)).collect();
    Json(json!({ "listeners": listeners }))
}

fn listener_view(target: &Target) -> Value {
    let now = clock::now_ms();
    let status = target.resolver().status();
    let view = target.resolver().view();
    let in_flight = target.in_flight();
    let eligibility = target.picker().eligibility();
    let mut eligible = 0;
    let mut ejected = 0;
    let endpoints: Vec<Value> = view.active().map_or_else(Vec::new, |set| {
        set.iter()
            .map(|endpoint| {
                let is_ejected = target.picker().is_ejected(endpoint, now);
                let standing = match eligibility.standing(endpoint, is_ejected) {
                    Standing::Eligible => "eligible",
                    Standing::Unhealthy(Unhealthy::Ejected) => "ejected",
                    Standing::Unhealthy(_) => "unhealthy",
                    Standing::Excluded(Excluded::Unreachable) => "unreachable",
                    Standing::Excluded(_) => "excluded",
                };
                eligible += usize::from(standing == "eligible");
                ejected += usize::from(is_ejected);
                json!({
                    "instance": endpoint.instance.as_str(),
                    "incarnation": endpoint.incarnation.0,
                    "address": target.address(endpoint).map(|a| a.to_string()),
                    "serving": endpoint.serving,
                    "weight": endpoint.weight,
                    "standing": standing,
                    "ejected": is_ejected,
                    "in_flight": in_flight.get(&key_of(endpoint)).copied().unwrap_or(0),
                })
            })
            .collect()
    });
    json!({
        "listen": target.config.listen.to_string(),
        "service": target.config.service.to_string(),
        "protocol": target.config.protocol.as_str(),
        "balancer": target.config.balancer.as_str(),
        "port": target.config.port.as_ref().map(|p| p.as_str()),
        "revision": status.active.map(|r| r.0),
        "received_revision": status.received.0,
        "validated_revision": status.validated.0,
        "age_ms": status.age_ms,
        "resnapshot_pending": status.resnapshot_pending,
        "eligible": eligible,
        "ejected": ejected,
        "in_flight": in_flight.values().sum::<u64>(),
        "endpoints": endpoints,
    })
}
