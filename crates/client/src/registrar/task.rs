//! [`Registrar`]: the handle an application holds, and the task behind it — a thin shell
//! that reads the clock, asks the [`RegistrarMachine`] what to do, makes the HTTP call and
//! reports the outcome back, publishing the machine's status after every step.

use std::time::Duration;

use muster_core::api::LeaseRequest;
use muster_core::{EndpointSpec, ErrorCode, Incarnation, InstanceId, ServiceKey, ServingState};
use rand_core::RngCore;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::http::{Client, Deregistration, Drain, Registration, ServingChange};
use crate::registrar::config::{LeaseLossPolicy, RegistrarConfig};
use crate::registrar::machine::RegistrarMachine;
use crate::registrar::outcome::{Action, Outcome};
use crate::registrar::status::{LiveRegistration, RegistrarStatus};
use crate::seed::SplitMix64;

/// The serving state the application asks for, with its reason.
type Desired = (ServingState, String);

/// A registration kept alive by a background task. Dropping it without
/// [`shutdown`](Registrar::shutdown) stops the task as a crash would: renewals stop and the
/// registry removes the endpoint when the lease expires.
#[derive(Debug)]
pub struct Registrar {
    status: watch::Receiver<RegistrarStatus>,
    desired: watch::Sender<Desired>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<RegistrarStatus>>,
}

/// Builds a [`Registrar`]: identity, record and incarnation are required; the rest defaults
/// to [`RegistrarConfig::default`] and a jitter RNG seeded from the identity.
pub struct RegistrarBuilder {
    client: Client,
    key: ServiceKey,
    instance: InstanceId,
    endpoint: EndpointSpec,
    incarnation: Incarnation,
    /// Whether the registration named a lease to attach to, and an expected revision: both
    /// unused, warned about at start.
    unused: (bool, bool),
    config: RegistrarConfig,
    rng: Option<Box<dyn RngCore + Send>>,
}

impl std::fmt::Debug for RegistrarBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrarBuilder")
            .field("server", &self.client.server())
            .field("key", &self.key)
            .field("instance", &self.instance)
            .field("incarnation", &self.incarnation)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RegistrarBuilder {
    /// Replaces the whole configuration.
    #[must_use]
    pub fn config(mut self, config: RegistrarConfig) -> Self {
        self.config = config;
        self
    }

    /// The lease TTL to ask for.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// How long `draining` is published before deregistering at shutdown.
    #[must_use]
    pub fn drain_grace(mut self, grace: Duration) -> Self {
        self.config.drain_grace = grace;
        self
    }

    /// What to do when the lease is lost.
    #[must_use]
    pub fn lease_loss(mut self, policy: LeaseLossPolicy) -> Self {
        self.config.lease_loss = policy;
        self
    }

    /// At shutdown, end the drain grace once `fraction` of the service's live subscribers
    /// applied the drain (SPEC O3, L6); the grace stays the upper bound. A fraction outside
    /// (0, 1] counts as all of them. Converged callers send no *new* work; requests already
    /// in flight are the application's to finish before it exits.
    #[must_use]
    pub fn drain_until_converged(mut self, fraction: f64) -> Self {
        let fraction = if fraction > 0.0 && fraction <= 1.0 {
            fraction
        } else {
            1.0
        };
        self.config.drain_until_converged = Some(fraction);
        self
    }

    /// The source of renewal jitter (tests and the lab inject a seeded one).
    #[must_use]
    pub fn rng(mut self, rng: impl RngCore + Send + 'static) -> Self {
        self.rng = Some(Box::new(rng));
        self
    }

    /// Starts the task on the current Tokio runtime; the first registration is attempted at
    /// once. Wait for it with [`Registrar::registered`].
    pub fn start(self) -> Registrar {
        if self.unused.0 || self.unused.1 {
            tracing::warn!(
                service = %self.key,
                instance = %self.instance,
                "the registration's attached lease or expected revision is not used: the registrar grants \
                 and renews a lease of its own, and fences its writes by the incarnation"
            );
        }
        let rng = self.rng.unwrap_or_else(|| {
            let identity = (self.key.to_string(), self.instance.to_string(), self.incarnation.0);
            Box::new(SplitMix64::from_identity(&identity))
        });
        let initial = self.config.initial_serving;
        let converged_fraction = self.config.drain_until_converged;
        let machine = RegistrarMachine::new(self.config, self.incarnation, Instant::now(), rng);
        let (status_tx, status) = watch::channel(machine.status());
        let (desired, desired_rx) = watch::channel((initial, String::new()));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let span = tracing::info_span!(
            "registrar",
            service = %self.key,
            instance = %self.instance,
            incarnation = self.incarnation.0,
        );
        let renew_client = self.client.clone().with_timeout(machine.renew_timeout());
        let shell = Shell {
            client: self.client,
            renew_client,
            key: self.key,
            instance: self.instance,
            endpoint: self.endpoint,
            converged_fraction,
        };
        let task = tokio::spawn(run(shell, machine, desired_rx, shutdown_rx, status_tx).instrument(span));
        Registrar {
            status,
            desired,
            shutdown,
            task: Some(task),
        }
    }
}

impl Registrar {
    /// A builder for a registrar that keeps `registration` of `instance` of `key` alive: its
    /// record and its fencing incarnation (see [`incarnation_at_start`](crate::incarnation_at_start)
    /// and [`incarnation_from_counter`](crate::incarnation_from_counter) for choosing one).
    ///
    /// The registrar grants, renews and at shutdown lets go of a lease of its own: the
    /// registration's [`lease_ttl`](Registration::lease_ttl) is that lease's TTL (else
    /// [`DEFAULT_TTL`](crate::DEFAULT_TTL)). A lease the registration attaches to, and an
    /// expected revision, are not used (every write of the registrar is fenced by the
    /// incarnation instead); a WARN says so when the registrar starts.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = muster_testkit::server::InProcess::start().await;
    /// # let client = server.client();
    /// use std::time::Duration;
    /// use muster_client::{InstanceId, Registrar, Registration, incarnation_at_start};
    ///
    /// let registration = Registration::new(incarnation_at_start())
    ///     .address("10.0.0.7")
    ///     .port("http", 8080)
    ///     .lease_ttl(Duration::from_secs(10));
    /// let instance = InstanceId::new("api-1")?;
    /// let registrar = Registrar::builder(client, "prod/api".parse()?, instance, registration)
    ///     .drain_grace(Duration::from_millis(100))
    ///     .start();
    /// let live = registrar.registered().await?; // a refusal is an error naming its cause
    /// registrar.set_ready();
    /// assert_eq!(live.ttl_ms, 10_000);
    /// registrar.shutdown().await; // draining, then deregistered
    /// # Ok(()) }
    /// ```
    pub fn builder(
        client: Client,
        key: ServiceKey,
        instance: InstanceId,
        registration: Registration,
    ) -> RegistrarBuilder {
        let request = registration.into_request();
        let mut config = RegistrarConfig::default();
        if let Some(LeaseRequest::Grant { ttl_ms }) = request.lease {
            config.ttl = Duration::from_millis(ttl_ms);
        }
        RegistrarBuilder {
            client,
            key,
            instance,
            endpoint: request.endpoint,
            incarnation: request.incarnation,
            unused: (
                matches!(request.lease, Some(LeaseRequest::Attach { .. })),
                request.expected_revision.is_some(),
            ),
            config,
            rng: None,
        }
    }

    /// The current status.
    pub fn status(&self) -> RegistrarStatus {
        self.status.borrow().clone()
    }

    /// A receiver of every status change (renewal failing, lease lost, ...).
    pub fn subscribe(&self) -> watch::Receiver<RegistrarStatus> {
        self.status.clone()
    }

    /// Waits until the instance is registered, or the registrar gave up (the status then
    /// says why: refused, superseded, ...).
    pub async fn registered(&self) -> Result<LiveRegistration, RegistrarStatus> {
        let mut status = self.status.clone();
        let settled = status
            .wait_for(|s| s.registration().is_some() || s.is_finished())
            .await
            .map(|s| s.clone())
            .unwrap_or_else(|_| self.status());
        settled.registration().cloned().ok_or(settled)
    }

    /// Reports the application's serving state (SPEC L5: the app owns readiness). Sent as
    /// soon as the instance is registered; the latest call wins.
    pub fn set_serving(&self, state: ServingState, reason: impl Into<String>) {
        self.desired.send_replace((state, reason.into()));
    }

    /// Reports the application ready for traffic.
    pub fn set_ready(&self) {
        self.set_serving(ServingState::Ready, "ready");
    }

    /// Drains, waits the configured grace, deregisters and revokes the lease; returns the
    /// final status ([`RegistrarStatus::Stopped`], or how the registrar had already ended).
    pub async fn shutdown(mut self) -> RegistrarStatus {
        self.shutdown.send_replace(true);
        let Some(task) = self.task.take() else {
            return self.status();
        };
        match task.await {
            Ok(status) => status,
            Err(_) => self.status(),
        }
    }
}

impl Drop for Registrar {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// What the task needs to turn an [`Action`] into a call.
struct Shell {
    client: Client,
    /// The same client with the machine's renewal timeout.
    renew_client: Client,
    key: ServiceKey,
    instance: InstanceId,
    endpoint: EndpointSpec,
    /// The fraction a grace waits for (`RegistrarConfig::drain_until_converged`).
    converged_fraction: Option<f64>,
}

async fn run<R: RngCore>(
    shell: Shell,
    mut machine: RegistrarMachine<R>,
    mut desired: watch::Receiver<Desired>,
    mut shutdown: watch::Receiver<bool>,
    status: watch::Sender<RegistrarStatus>,
) -> RegistrarStatus {
    loop {
        let current = machine.status();
        status.send_if_modified(|published| {
            let changed = *published != current;
            if changed {
                *published = current.clone();
            }
            changed
        });
        if machine.is_finished() {
            tracing::info!(status = ?current, "registrar finished");
            return current;
        }
        if let Some(action) = machine.poll(Instant::now()) {
            tracing::Span::current().record("incarnation", machine.incarnation().0);
            let outcome = shell.perform(&action).await;
            trace_outcome(&action, &outcome);
            machine.complete(Instant::now(), outcome);
            continue;
        }
        let wake = machine.next_wake();
        tokio::select! {
            () = sleep_until(wake) => {}
            changed = desired.changed() => {
                if changed.is_err() {
                    // The handle is gone (it aborts the task as it drops).
                    return machine.status();
                }
                let (state, reason) = desired.borrow_and_update().clone();
                machine.set_serving(state, reason);
            }
            _ = shutdown.wait_for(|stop| *stop), if !machine.is_shutting_down() => {
                tracing::info!("shutdown: draining");
                machine.shutdown(Instant::now());
            }
        }
    }
}

/// Sleeps until `wake`, or forever when the machine waits only for the application.
async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Shell {
    async fn perform(&self, action: &Action) -> Outcome {
        let (key, instance) = (&self.key, &self.instance);
        let written = match action {
            Action::Register {
                incarnation,
                serving,
                ttl_ms,
            } => {
                let registration = Registration::new(*incarnation)
                    .endpoint(self.endpoint.clone())
                    .serving(*serving)
                    .lease_ttl(Duration::from_millis(*ttl_ms));
                self.client.register(key, instance, registration).await
            }
            Action::Renew { lease } => {
                return match self.renew_client.renew_lease(&key.tenant, *lease).await {
                    Ok(reply) => Outcome::Renewed(reply),
                    Err(error) => Outcome::Failed(error),
                };
            }
            Action::SetServing {
                incarnation,
                state,
                reason,
            } => {
                let change = ServingChange::new(*incarnation, *state).reason(reason.clone());
                self.client.set_serving(key, instance, change).await
            }
            Action::Drain { incarnation, reason } => {
                // The registrar deregisters itself when its grace ends: no server-side grace.
                let drain = Drain::new(*incarnation).reason(reason.clone());
                self.client.drain(key, instance, drain).await
            }
            Action::Deregister { incarnation } => {
                let deregistration = Deregistration::new(*incarnation);
                self.client.deregister(key, instance, deregistration).await
            }
            Action::RevokeLease { lease } => self.client.revoke_lease(&key.tenant, *lease).await,
            Action::CheckConvergence { revision } => {
                let query = crate::http::ConvergenceQuery {
                    revision: Some(*revision),
                    cohort: None,
                    fraction: self.converged_fraction,
                };
                return match self.client.convergence(key, &query).await {
                    // Nobody reporting is no evidence that nobody routes here.
                    Ok(reply) => Outcome::Converged(reply.converged && reply.live > 0),
                    Err(error) => Outcome::Failed(error),
                };
            }
        };
        match written {
            Ok(reply) => Outcome::Written(reply),
            Err(error) => Outcome::Failed(error),
        }
    }
}

/// One event per call, inside the registrar's span (service, instance, incarnation).
fn trace_outcome(action: &Action, outcome: &Outcome) {
    match (action, outcome) {
        (Action::Renew { lease }, Outcome::Renewed(reply)) => {
            tracing::debug!(
                lease = lease.0,
                deadline_unix_ms = reply.deadline_unix_ms,
                "lease renewed"
            );
        }
        (Action::Renew { lease }, Outcome::Failed(error)) if error.code() == ErrorCode::LeaseNotFound => {
            tracing::error!(lease = lease.0, %error, "lease lost: the registry removed the endpoint");
        }
        (Action::Renew { lease }, Outcome::Failed(error)) => {
            tracing::warn!(lease = lease.0, code = %error.code(), %error, "lease renewal failed");
        }
        (action, Outcome::Written(reply)) => {
            tracing::info!(
                action = action_name(action),
                revision = reply.revision.0,
                lease = reply.lease.map(|lease| lease.id.0),
                unchanged = reply.unchanged.as_deref(),
                "committed"
            );
        }
        (action, Outcome::Failed(error)) => {
            tracing::warn!(action = action_name(action), code = %error.code(), %error, "call failed");
        }
        (action, Outcome::Renewed(_)) => {
            tracing::warn!(action = action_name(action), "a renewal reply to another call");
        }
        (action, Outcome::Converged(converged)) => {
            tracing::debug!(action = action_name(action), converged, "drain convergence checked");
        }
    }
}

fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Register { .. } => "register",
        Action::Renew { .. } => "renew",
        Action::SetServing { .. } => "set_serving",
        Action::Drain { .. } => "drain",
        Action::Deregister { .. } => "deregister",
        Action::RevokeLease { .. } => "revoke_lease",
        Action::CheckConvergence { .. } => "check_convergence",
    }
}
