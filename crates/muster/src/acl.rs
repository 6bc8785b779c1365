//! `muster acl ...`: the one-time bootstrap and token management (SPEC S1, S2).
//!
//! ```text
//!  muster acl bootstrap [--json]                      first operator token (once per cluster)
//!  muster acl token create --tenant T --allow 'NS/SVC=VERB,...' [--deny ...] [--san URI] [--json]
//!  muster acl token create --operator --allow '*/*=*' an operator token
//!  muster acl token create --tenant T --role owner|app|checker ...   the authority it speaks with
//!  muster acl token list [--json]
//!  muster acl token revoke ACCESSOR
//!  muster acl self [--json]                            the token you hold
//! ```
//!
//! Rules are checked here with the server's own parser (`muster-auth`), so a typo is refused
//! before anything is sent. `--json` on bootstrap and create prints exactly
//! `{"accessor": ..., "secret": ...}`.

use std::io::Write;

use clap::{Args, Subcommand};
use muster_auth::{Accessor, Effect, Rule};
use muster_client::NewToken;
use muster_core::api::TokenListReply;

use crate::args::parse_tenant;
use crate::cli::ServerArgs;
use crate::commands::{connect_to, emit};
use crate::error::CliError;
use crate::table::Table;

/// `muster acl ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum AclCommand {
    /// Make the first operator token of a fresh cluster and print it (works once).
    Bootstrap(BootstrapArgs),
    /// Create, list or revoke tokens (needs an admin token).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Show the token you hold: its tenant, role and rules (never its secret).
    #[command(name = "self")]
    Whoami(ServerArgs),
}

/// A token's role (SPEC L5), as `--role` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// The lifecycle owner (an orchestrator): its drain holds against the app.
    Owner,
    /// The application itself (the default): owns its readiness within the lifecycle.
    App,
    /// A health checker acting for the application.
    Checker,
}

impl From<Role> for muster_core::Actor {
    fn from(role: Role) -> muster_core::Actor {
        match role {
            Role::Owner => muster_core::Actor::Owner,
            Role::App => muster_core::Actor::App,
            Role::Checker => muster_core::Actor::Checker,
        }
    }
}

/// `muster acl bootstrap`.
#[derive(Debug, Clone, Args)]
pub struct BootstrapArgs {
    /// The server, and how to reach it.
    #[command(flatten)]
    pub server: ServerArgs,
    /// The server's bootstrap secret (`[auth] bootstrap_secret_file` there); without one the
    /// server accepts a bootstrap only from its own host.
    #[arg(long, env = "MUSTER_BOOTSTRAP_SECRET", value_name = "SECRET", hide_env_values = true)]
    pub bootstrap_secret: Option<muster_core::Secret>,
}

/// `muster acl token ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once.
    Create(TokenCreateArgs),
    /// List the tokens you may manage (never their secrets).
    List(ServerArgs),
    /// Revoke a token: every node refuses it from the revision the revocation commits at.
    Revoke(TokenRevokeArgs),
}

/// `muster acl token create`.
#[derive(Debug, Clone, Args)]
pub struct TokenCreateArgs {
    /// The tenant the token belongs to.
    #[arg(
        long = "tenant",
        value_name = "T",
        required_unless_present = "operator",
        conflicts_with = "operator"
    )]
    pub token_tenant: Option<String>,
    /// An operator token instead: every tenant, and the cluster-wide routes.
    #[arg(long)]
    pub operator: bool,
    /// Allow rules: `NAMESPACE/SERVICE=VERB,...` (names exact, `prefix*` or `*`; verbs read,
    /// watch, register, renew, set_state, deregister, admin, metrics, or `*`). Repeatable.
    #[arg(long, value_name = "RULE")]
    pub allow: Vec<String>,
    /// Deny rules, same form; a deny wins a tie with an allow. Repeatable.
    #[arg(long, value_name = "RULE")]
    pub deny: Vec<String>,
    /// A client certificate SAN (e.g. `spiffe://acme.internal/ns/prod/sa/api`) that
    /// authenticates as this token over mutual TLS.
    #[arg(long, value_name = "SAN")]
    pub san: Option<String>,
    /// What the token is for.
    #[arg(long, default_value = "", value_name = "TEXT")]
    pub description: String,
    /// The authority it speaks with: `owner` (an orchestrator; its drain holds against the
    /// app), `app` (the default) or `checker`. `X-Muster-Actor` may narrow it, never widen
    /// it. An operator token speaks as any role.
    #[arg(long, value_enum, value_name = "ROLE")]
    pub role: Option<Role>,
    /// Server and token.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `muster acl token revoke`.
#[derive(Debug, Clone, Args)]
pub struct TokenRevokeArgs {
    /// The token's accessor (from `create` or `list`).
    pub accessor: String,
    /// Server and token.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Runs an `acl` command.
pub async fn run(command: AclCommand, json: bool, out: &mut dyn Write) -> Result<(), CliError> {
    match command {
        AclCommand::Bootstrap(args) => {
            let server = &args.server;
            let reply = connect_to(
                &server.server,
                server.token.as_ref().map(muster_core::Secret::expose),
                &server.tls,
            )?
            .acl_bootstrap(args.bootstrap_secret.as_ref().map(muster_core::Secret::expose))
            .await?;
            emit(out, json, &reply, || {
                format!(
                    "bootstrapped: the first operator token (keep the secret safe; it is not shown again)\n\
                     accessor  {}\nsecret    {}\n",
                    reply.accessor, reply.secret
                )
            })
        }
        AclCommand::Token(TokenCommand::Create(args)) => {
            let request = create_request(&args)?;
            let client = connect_to(
                &args.server.server,
                args.server.token.as_ref().map(muster_core::Secret::expose),
                &args.server.tls,
            )?;
            let reply = client.create_token(request).await?;
            emit(out, json, &reply, || {
                format!("accessor  {}\nsecret    {}\n", reply.accessor, reply.secret)
            })
        }
        AclCommand::Whoami(args) => {
            let reply = connect_to(
                &args.server,
                args.token.as_ref().map(muster_core::Secret::expose),
                &args.tls,
            )?
            .acl_self()
            .await?;
            emit(out, json, &reply, || {
                list_text(&TokenListReply {
                    tokens: vec![reply.clone()],
                })
            })
        }
        AclCommand::Token(TokenCommand::List(args)) => {
            let reply = connect_to(
                &args.server,
                args.token.as_ref().map(muster_core::Secret::expose),
                &args.tls,
            )?
            .tokens()
            .await?;
            emit(out, json, &reply, || list_text(&reply))
        }
        AclCommand::Token(TokenCommand::Revoke(args)) => {
            let accessor = Accessor::parse(&args.accessor).map_err(|e| CliError::usage("bad_request", e))?;
            let client = connect_to(
                &args.server.server,
                args.server.token.as_ref().map(muster_core::Secret::expose),
                &args.server.tls,
            )?;
            let reply = client.revoke_token(accessor.as_str()).await?;
            emit(out, json, &reply, || {
                format!("revoked {accessor} at revision {}\n", reply.revision)
            })
        }
    }
}

/// The request `create` sends, every rule checked first.
pub fn create_request(args: &TokenCreateArgs) -> Result<NewToken, CliError> {
    for (texts, effect) in [(&args.allow, Effect::Allow), (&args.deny, Effect::Deny)] {
        for text in texts {
            Rule::parse(text, effect).map_err(|e| CliError::usage("invalid_field", e.to_string()))?;
        }
    }
    if args.allow.is_empty() {
        return Err(CliError::usage(
            "invalid_field",
            "--allow: a token needs at least one allow rule (default deny), e.g. --allow 'prod/api=read,watch'",
        ));
    }
    let tenant = args.token_tenant.as_deref().map(parse_tenant).transpose()?;
    let mut token = NewToken::new().description(args.description.clone());
    if let Some(tenant) = tenant {
        token = token.tenant(tenant);
    }
    if let Some(san) = &args.san {
        token = token.san(san.clone());
    }
    if let Some(role) = args.role {
        token = token.role(role.into());
    }
    let token = args.allow.iter().fold(token, |token, rule| token.allow(rule.clone()));
    Ok(args.deny.iter().fold(token, |token, rule| token.deny(rule.clone())))
}

fn list_text(reply: &TokenListReply) -> String {
    let mut table = Table::new(["ACCESSOR", "TENANT", "ROLE", "ALLOW", "DENY", "SAN", "DESCRIPTION"]);
    for token in &reply.tokens {
        table.row([
            token.accessor.clone(),
            token
                .tenant
                .as_ref()
                .map_or_else(|| "(operator)".to_owned(), ToString::to_string),
            token.role.to_string(),
            token.allow.join(" "),
            token.deny.join(" "),
            token.san.clone().unwrap_or_default(),
            token.description.clone(),
        ]);
    }
    table.render()
}
