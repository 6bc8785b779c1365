//! What each subcommand does: parse names strictly (nothing is sent for an invalid one),
//! make the call, print the reply as a table or as the API's JSON.

use std::collections::BTreeMap;
use std::io::Write;

use muster_client::{
    Actor, CheckReport, Client, ClientBuilder, ClientError, ClientErrorCode, Deregistration, Drain, LeaseGrant,
    Registration, ServingChange,
};
use muster_core::api::{AddMemberRequest, Frame, SnapshotReply};
use muster_core::{
    AddressSpec, CheckSpec, Digest, EndpointSpec, ErrorCode, Incarnation, LocalitySpec, PortSpec, Revision,
    ServingState,
};
use muster_registry::RegistryConfig;
use serde::Serialize;

use crate::args::{parse_instance, parse_namespace_key, parse_service_key, parse_tenant, protocol_for_port_name};
use crate::cli::{
    CheckArgs, Cli, ClientArgs, ClusterCommand, Command, DeregisterArgs, DrainArgs, FederationCommand, LeaseCommand,
    PolicyCommand, RegisterArgs, ResolveArgs, ServicesArgs, SetStateArgs, WatchArgs,
};
use crate::duration::millis;
use crate::error::CliError;
use crate::render;

/// Runs the parsed command line, printing results on `out`.
pub async fn run(cli: Cli, out: &mut dyn Write) -> Result<(), CliError> {
    let json = cli.json;
    match cli.command {
        Command::Serve(args) => crate::serve::serve(args, json, out).await,
        Command::Register(args) => register(args, json, out).await,
        Command::SetState(args) => set_state(args, json, out).await,
        Command::Drain(args) => drain(args, json, out).await,
        Command::Deregister(args) => deregister(args, json, out).await,
        Command::Check(args) => check(args, json, out).await,
        Command::Resolve(args) => resolve(args, json, out).await,
        Command::Watch(args) => watch(args, json, out).await,
        Command::Convergence(args) => crate::convergence::convergence(args, json, out).await,
        Command::WaitConverged(args) => crate::convergence::wait_converged(args, json, out).await,
        Command::Services(args) => services(args, json, out).await,
        Command::Lease(command) => lease(command, json, out).await,
        Command::Cluster(command) => cluster(command, json, out).await,
        Command::Federation(FederationCommand::Status(args)) => {
            let client = connect(&args.client)?;
            let reply = client.federation_status().await?;
            emit(out, json, &reply, || render::federation_text(&reply))
        }
        Command::Policy(command) => policy(command, json, out).await,
        Command::Audit(args) => crate::audit::run(args, json, out).await,
        Command::Acl(command) => crate::acl::run(command, json, out).await,
        Command::Status(args) => {
            let client = connect(&args.client)?;
            let status = client.status().await?;
            emit(out, json, &status, || render::status_text(client.server(), &status))
        }
        Command::Bench(args) => {
            let report = muster_bench::run(args).await?;
            let text = if json {
                report.render_json()
            } else {
                report.render_table()
            };
            print(out, &text).map(drop)
        }
        Command::Proxy(args) => crate::proxy::run(args, json, out).await,
        Command::Lab(args) => Ok(muster_lab::run(args, json, out).await?),
    }
}

/// The [`EndpointSpec`] that `muster register` sends.
pub fn endpoint_spec(args: &RegisterArgs) -> Result<EndpointSpec, CliError> {
    // clap requires one `--addr`; a caller building the arguments by hand may not have.
    let Some(port) = args.addrs.first().map(|addr| addr.port()) else {
        return Err(CliError::usage("invalid_address", "give at least one --addr IP:PORT"));
    };
    if let Some(other) = args.addrs.iter().find(|addr| addr.port() != port) {
        return Err(CliError::usage(
            "invalid_address",
            format!(
                "--addr {other}: every address of an endpoint shares its port ({port}); register another instance for another port"
            ),
        ));
    }
    Ok(EndpointSpec {
        addresses: args
            .addrs
            .iter()
            .map(|addr| AddressSpec {
                ip: addr.ip().to_string(),
                scope: None,
            })
            .collect(),
        ports: vec![PortSpec {
            name: args.port_name.clone(),
            port,
            protocol: args
                .protocol
                .map_or_else(|| protocol_for_port_name(&args.port_name), Into::into),
        }],
        locality: LocalitySpec {
            region: args.region.clone(),
            zone: args.zone.clone(),
            ..LocalitySpec::default()
        },
        serving: args.state.map(Into::into),
        weight: args.weight,
        labels: args.labels.iter().cloned().collect::<BTreeMap<_, _>>(),
        checks: check_spec(args)?.into_iter().collect(),
        ..EndpointSpec::default()
    })
}

/// The check `--check URL` or `--check-ttl` asks for, validated here with the server's own
/// rules (same codes), so a bad check is refused before any request.
fn check_spec(args: &RegisterArgs) -> Result<Option<CheckSpec>, CliError> {
    if args.check.is_none() && args.check_ttl.is_none() {
        if args.check_rise.is_some() || args.check_fall.is_some() {
            return Err(CliError::usage(
                "usage",
                "--check-rise and --check-fall need --check URL or --check-ttl",
            ));
        }
        return Ok(None);
    }
    let spec = CheckSpec {
        url: args.check.clone(),
        ttl_ms: args.check_ttl.map(millis),
        interval_ms: args.check_interval.map(millis),
        timeout_ms: args.check_timeout.map(millis),
        rise: args.check_rise,
        fall: args.check_fall,
        ..CheckSpec::default()
    };
    spec.validate("checks[0]")?;
    Ok(Some(spec))
}

async fn cluster(command: ClusterCommand, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let (client, reply) = match command {
        ClusterCommand::Status(args) => {
            let client = connect(&args.client)?;
            let reply = client.cluster().await?;
            (client, reply)
        }
        ClusterCommand::Add(args) => {
            let client = connect(&args.client)?;
            let request = AddMemberRequest {
                id: args.id,
                addr: args.addr,
            };
            let reply = client.add_member(&request).await?;
            (client, reply)
        }
        ClusterCommand::Remove(args) => {
            let client = connect(&args.client)?;
            let reply = client.remove_member(args.id).await?;
            (client, reply)
        }
    };
    emit(out, json, &reply, || render::cluster_text(client.server(), &reply))
}

async fn policy(command: PolicyCommand, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        PolicyCommand::Show(args) => {
            let client = connect(&args.client)?;
            let reply = client.policy::<RegistryConfig>().await?;
            let text = render::policy_text(client.server(), &reply)?;
            emit(out, json, &reply, || text)
        }
        PolicyCommand::Set(args) => {
            // Read and checked here, so a typo is reported before anything is sent.
            let policy = read_policy(&args.file)?;
            policy.validate()?;
            let client = connect(&args.client)?;
            let reply = client.set_policy(&policy).await?;
            emit(out, json, &reply, || {
                format!(
                    "policy set at revision {}: later writes are judged by it\n",
                    reply.revision
                )
            })
        }
    }
}

/// A policy file: JSON for a `.json` file, else TOML, either the `[registry]` section's
/// contents or a config file whose `[registry]` table holds them. Unknown settings are
/// refused (`invalid_policy`), naming the setting.
pub fn read_policy(path: &std::path::Path) -> Result<RegistryConfig, CliError> {
    let invalid = |err: &dyn std::fmt::Display| CliError::usage("invalid_policy", format!("{}: {err}", path.display()));
    let text = std::fs::read_to_string(path)
        .map_err(|err| CliError::usage("cannot_read", format!("cannot read {}: {err}", path.display())))?;
    if path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("json")) {
        return serde_json::from_str(&text).map_err(|err| invalid(&err));
    }
    let mut table: toml::Table = toml::from_str(&text).map_err(|err| invalid(&err))?;
    if table.len() == 1
        && matches!(table.get("registry"), Some(toml::Value::Table(_)))
        && let Some(toml::Value::Table(section)) = table.remove("registry")
    {
        table = section;
    }
    toml::Value::Table(table).try_into().map_err(|err| invalid(&err))
}

async fn check(args: CheckArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let key = parse_service_key(&args.client.tenant, &args.service)?;
    let instance = parse_instance(&args.instance)?;
    let status = args.status.into();
    let report = CheckReport::new(Incarnation(args.incarnation), status);
    let reply = connect(&args.client)?.report_check(&key, &instance, report).await?;
    emit(out, json, &reply, || {
        let changed = reply.revision.map_or_else(
            || "no change".to_owned(),
            |revision| format!("changed at revision {revision}"),
        );
        format!(
            "reported {} for {key} {instance}: {} ({changed})\n",
            render::wire_name(&status),
            render::wire_name(&reply.serving)
        )
    })
}

async fn register(args: RegisterArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let key = parse_service_key(&args.client.tenant, &args.service)?;
    let instance = parse_instance(&args.instance)?;
    let registration = Registration::new(Incarnation(args.incarnation)).endpoint(endpoint_spec(&args)?);
    let mut registration = match (args.ttl, args.lease) {
        (_, Some(id)) => registration.lease(id),
        (Some(ttl), None) => registration.lease_ttl(ttl),
        (None, None) => return Err(CliError::usage("usage", "give --ttl or --lease")),
    };
    if let Some(expected) = args.expected_revision {
        registration = registration.expected_revision(Revision(expected));
    }
    let client = connect_as(&args.client, args.actor.map(Into::into))?;
    let reply = client.register(&key, &instance, registration).await?;
    let what = format!("registered {key} {instance} incarnation {}", args.incarnation);
    emit(out, json, &reply, || render::write_text(&what, &reply))
}

async fn set_state(args: SetStateArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let key = parse_service_key(&args.client.tenant, &args.service)?;
    let instance = parse_instance(&args.instance)?;
    let state: ServingState = args.state.into();
    let mut change = ServingChange::new(Incarnation(args.incarnation), state).reason(args.reason);
    if let Some(expected) = args.expected_revision {
        change = change.expected_revision(Revision(expected));
    }
    let client = connect_as(&args.client, args.actor.map(Into::into))?;
    let reply = client.set_serving(&key, &instance, change).await?;
    let what = format!("set {key} {instance} to {}", render::wire_name(&state));
    emit(out, json, &reply, || render::write_text(&what, &reply))
}

async fn drain(args: DrainArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let key = parse_service_key(&args.client.tenant, &args.service)?;
    let instance = parse_instance(&args.instance)?;
    let mut request = Drain::new(Incarnation(args.incarnation)).reason(args.reason);
    if let Some(expected) = args.expected_revision {
        request = request.expected_revision(Revision(expected));
    }
    if let Some(grace) = args.grace {
        request = request.grace(grace);
    }
    let client = connect_as(&args.client, args.actor.map(Into::into))?;
    let reply = client.drain(&key, &instance, request).await?;
    let what = match args.grace {
        Some(grace) => format!("marked {key} {instance} draining; deregistered in {} ms", millis(grace)),
        None => format!("marked {key} {instance} draining"),
    };
    emit(out, json, &reply, || render::write_text(&what, &reply))
}

async fn deregister(args: DeregisterArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let key = parse_service_key(&args.client.tenant, &args.service)?;
    let instance = parse_instance(&args.instance)?;
    let mut deregistration = Deregistration::new(Incarnation(args.incarnation));
    if let Some(expected) = args.expected_revision {
        deregistration = deregistration.expected_revision(Revision(expected));
    }
    let client = connect_as(&args.client, args.actor.map(Into::into))?;
    let reply = client.deregister(&key, &instance, deregistration).await?;
    let what = format!("deregistered {key} {instance} incarnation {}", args.incarnation);
    emit(out, json, &reply, || render::write_text(&what, &reply))
}

async fn resolve(args: ResolveArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let key = parse_service_key(&args.client.tenant, &args.service)?;
    let client = connect(&args.client)?;
    // A current read also shows the service's mirrors of other regions, when federated.
    let read = match args.revision {
        Some(revision) => client.snapshot_all(&key, Some(Revision(revision))).await,
        None => client.snapshot_federated(&key).await,
    };
    // Unknown is not empty (SPEC W5): a service nothing is held of fails `not_found`, so a
    // typo exits non-zero, unless the caller asked to read it as an empty set.
    let mut reply = match read {
        Err(err)
            if args.allow_empty
                && args.revision.is_none()
                && err.code() == ClientErrorCode::Api(ErrorCode::NotFound) =>
        {
            let revision = client.status().await?.revision;
            let reply = SnapshotReply {
                revision,
                service_revision: Revision::ZERO,
                digest: Digest::EMPTY,
                total: 0,
                endpoints: Vec::new(),
                next_page_token: None,
                protection_active: false,
                mirrors: Vec::new(),
                failover: None,
            };
            return emit(out, json, &reply, || {
                format!("{key}: not registered, read as empty (--allow-empty): 0 endpoints at revision {revision}\n")
            });
        }
        read => read?,
    };
    if !args.all {
        reply = render::eligible_only(reply, args.degraded);
    }
    emit(out, json, &reply, || render::resolve_text(&key, &reply, args.all))
}

async fn services(args: ServicesArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let namespace = parse_namespace_key(&args.client.tenant, &args.namespace)?;
    let client = connect(&args.client)?;
    let reply = client.services(&namespace).await?;
    emit(out, json, &reply, || render::services_text(&namespace, &reply))
}

async fn lease(command: LeaseCommand, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        LeaseCommand::Grant(args) => {
            let tenant = parse_tenant(&args.client.tenant)?;
            let mut grant = LeaseGrant::new(args.ttl);
            if let Some(service) = &args.service {
                let key = parse_service_key(&args.client.tenant, service)?;
                grant = grant.service(&key.namespace, &key.service);
            }
            let client = connect(&args.client)?;
            let reply = client.grant_lease(&tenant, grant).await?;
            emit(out, json, &reply, || render::grant_text(&reply))
        }
        LeaseCommand::Renew(args) => {
            let tenant = parse_tenant(&args.client.tenant)?;
            let client = connect(&args.client)?;
            let reply = client.renew_lease(&tenant, args.id).await?;
            emit(out, json, &reply, || {
                format!("renewed {}\n", render::lease_text(&reply))
            })
        }
        LeaseCommand::Revoke(args) => {
            let tenant = parse_tenant(&args.client.tenant)?;
            let client = connect(&args.client)?;
            let reply = client.revoke_lease(&tenant, args.id).await?;
            let what = format!("revoked lease {}", args.id);
            emit(out, json, &reply, || render::write_text(&what, &reply))
        }
    }
}

/// Prints frames as they arrive until the stream ends; the ending decides the exit code.
async fn watch(args: WatchArgs, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    let from = args.from_revision.map(Revision);
    let builder = client_builder(
        &args.client.server,
        args.client.token.as_ref().map(muster_core::Secret::expose),
        &args.client.tls,
    )?;
    let client = args.report.apply(builder).build().map_err(usage)?;
    // A watch of one service from now starts with its snapshot; one that starts with
    // progress instead found nothing of the service held (SPEC W5: unknown is not empty),
    // which the first line says rather than leaving a typo silent.
    let mut unknown = None;
    let mut stream = if args.service.contains('/') {
        let key = parse_service_key(&args.client.tenant, &args.service)?;
        if from.is_none() {
            unknown = Some(key.clone());
        }
        client.watch_service(&key, from, args.idle_timeout).await?
    } else {
        let namespace = parse_namespace_key(&args.client.tenant, &args.service)?;
        client.watch_namespace(&namespace, from, args.idle_timeout).await?
    };
    // What this watch has applied, reported to the server's convergence telemetry (SPEC O3):
    // a frame counts once it is printed.
    let mut applied = crate::convergence::Applied::default();
    loop {
        let Some((raw, frame)) = stream.next_frame().await? else {
            return Err(ClientError::StreamLost {
                server: client.server().to_owned(),
                reason: "the server ended the stream without a final frame".into(),
                source: None,
            }
            .into());
        };
        let ending = match &frame {
            Frame::Error { error, .. } => Some(CliError::Refused(error.clone())),
            Frame::Resync { revision } => Some(CliError::Resync { revision: *revision }),
            Frame::Closing { revision } => Some(CliError::Closing { revision: *revision }),
            Frame::Snapshot { .. } | Frame::Update(_) | Frame::Progress { .. } => None,
        };
        let first = unknown.take();
        if let (Some(key), Frame::Progress { revision }, false) = (first, &frame, json) {
            print(out, &format!("{}\n", render::unknown_line(&key, *revision)))?;
        }
        // In human mode a final frame is reported once, as the error on stderr.
        let reader_gone = if json {
            !print(out, &format!("{raw}\n"))?
        } else if ending.is_none() {
            !print(out, &format!("{}\n", render::frame_line(&frame)))?
        } else {
            false
        };
        if let Some(ending) = ending {
            return Err(ending);
        }
        if reader_gone {
            return Ok(());
        }
        applied.frame(&client, &frame);
    }
}

pub(crate) fn connect(args: &ClientArgs) -> Result<Client, CliError> {
    connect_as(args, None)
}

/// [`connect`], speaking as `actor` when one is given (SPEC L5).
fn connect_as(args: &ClientArgs, actor: Option<Actor>) -> Result<Client, CliError> {
    let builder = client_builder(
        &args.server,
        args.token.as_ref().map(muster_core::Secret::expose),
        &args.tls,
    )?;
    let builder = match actor {
        Some(actor) => builder.actor(actor),
        None => builder,
    };
    builder.build().map_err(usage)
}

/// A client of `server` with an optional bearer token and TLS settings.
pub(crate) fn connect_to(server: &str, token: Option<&str>, tls: &crate::args::TlsArgs) -> Result<Client, CliError> {
    client_builder(server, token, tls)?.build().map_err(usage)
}

pub(crate) fn client_builder(
    server: &str,
    token: Option<&str>,
    tls: &crate::args::TlsArgs,
) -> Result<ClientBuilder, CliError> {
    let mut builder = Client::builder(server);
    if let Some(token) = token {
        builder = builder.token(token);
    }
    if let Some(tls) = tls.client_tls().map_err(usage)? {
        builder = builder.tls(&tls);
    }
    Ok(builder)
}

/// A client that could not be made: bad input, caught before anything was sent (exit 2).
pub(crate) fn usage(err: ClientError) -> CliError {
    CliError::usage(err.code().as_str(), err.to_string())
}

/// Prints `value` as one line of JSON, or the human text.
pub(crate) fn emit<T: Serialize>(
    out: &mut dyn Write,
    json: bool,
    value: &T,
    human: impl FnOnce() -> String,
) -> Result<(), CliError> {
    let text = if json {
        let mut line = serde_json::to_string(value)
            .map_err(|err| CliError::usage("internal", format!("cannot encode the reply: {err}")))?;
        line.push('\n');
        line
    } else {
        human()
    };
    print(out, &text).map(drop)
}

/// Writes and flushes. A closed pipe (`muster watch | head`) is not an error: the result
/// says whether anyone is still reading.
fn print(out: &mut dyn Write, text: &str) -> Result<bool, CliError> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(err) => Err(CliError::usage("output", format!("cannot write the output: {err}"))),
    }
}
