//! Token management (SPEC S1, S2): the one-time bootstrap, create, list, revoke, and who
//! the caller is.
//!
//! Secrets are drawn from the OS here (the shell) and only their SHA-256 enters the log. Who
//! may manage what: an operator token allowed `admin` cluster-wide manages every token; a
//! tenant's token allowed `admin` on the whole tenant (`*/*=admin`) manages that tenant's
//! tokens and can create no operator token, so no token can make one stronger than itself
//! outside its tenant.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use muster_auth::{Accessor, Effect, Request, Rule, Scope, Secret, SecretHash, Token, TokenSpec, Verb};
use muster_core::api::{TokenCreateRequest, TokenInfo, TokenListReply, TokenRevokeReply, TokenSecretReply};
use muster_core::{Actor, Label};
use muster_registry::{AclBootstrap, CreateToken, RevokeToken};
use ring::rand::{SecureRandom, SystemRandom};

use crate::Native;
use muster_gate::Caller;
use muster_http::error::ApiError;
use muster_http::extract::{JsonBody, Segments};
use muster_http::peer::Peer;

/// `POST /v1/acl/bootstrap`: the first operator token (`*/*=*` everywhere). Works once per
/// cluster: after it commits, `409 already_bootstrapped`. Only with the bootstrap secret
/// (`X-Muster-Bootstrap-Secret`) when the server has one, else only from a loopback address
/// (`Gate::admit_bootstrap`, SPEC S1).
pub async fn bootstrap(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    headers: axum::http::HeaderMap,
) -> Result<(StatusCode, Json<TokenSecretReply>), ApiError> {
    require_auth_on(&app)?;
    let presented = headers
        .get(muster_core::api::BOOTSTRAP_SECRET_HEADER)
        .map(|value| value.to_str().unwrap_or_default());
    app.gate.admit_bootstrap(peer.as_deref(), presented)?;
    let rules = for_format(
        app.gate.format(),
        vec![Rule::parse("*/*=*", Effect::Allow).expect("a valid rule")],
    )?;
    let (spec, secret) = new_token(None, rules, None, "bootstrap operator token".into())?;
    let accessor = spec.accessor.to_string();
    app.gate
        .propose(
            AclBootstrap { token: spec }.into(),
            app.gate.meta(Actor::Owner, &caller),
        )
        .await?;
    tracing::info!(%accessor, "acl bootstrapped: the first operator token was made");
    Ok((
        StatusCode::CREATED,
        Json(TokenSecretReply {
            accessor,
            secret: secret.as_str().to_owned(),
        }),
    ))
}

/// `POST /v1/acl/tokens`.
pub async fn create(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    JsonBody(request): JsonBody<TokenCreateRequest>,
) -> Result<(StatusCode, Json<TokenSecretReply>), ApiError> {
    require_auth_on(&app)?;
    require_admin(&app, &caller, peer.as_deref(), request.tenant.as_ref())?;
    // A certificate identity is not a tenant's to claim: binding one is an operator's act,
    // so one tenant cannot take over another's workload identities (SPEC S3).
    if request.san.is_some() {
        require_admin(&app, &caller, peer.as_deref(), None)?;
    }
    let mut rules = Vec::with_capacity(request.allow.len() + request.deny.len());
    for (texts, effect) in [(&request.allow, Effect::Allow), (&request.deny, Effect::Deny)] {
        for text in texts {
            rules.push(
                Rule::parse(text, effect)
                    .map_err(|e| ApiError::new(muster_core::ErrorCode::InvalidField, e.to_string()))?,
            );
        }
    }
    // An operator token speaks as any role already; `owner` names just that.
    let role = match (request.role, &request.tenant) {
        (Some(Actor::Owner), None) | (None, _) => Actor::App,
        (Some(role), _) => role,
    };
    let rules = for_format(app.gate.format(), rules)?;
    let (mut spec, secret) = new_token(request.tenant, rules, request.san, request.description)?;
    spec.role = role;
    // The bounds first: the judgment below is quadratic in the rules.
    spec.validate()
        .map_err(|e| ApiError::new(muster_core::ErrorCode::InvalidField, e))?;
    // Minting stays within the minter (SPEC S2): every right the new rules grant, the
    // creating token must hold itself, its deny rules included.
    if let Some(minter) = caller.token_ref() {
        muster_auth::mint::within(minter.tenant(), &minter.spec.rules, spec.tenant.as_ref(), &spec.rules).map_err(
            |lacking| {
                ApiError::new(
                    muster_core::ErrorCode::PermissionDenied,
                    format!("this token cannot create that token: {lacking}"),
                )
            },
        )?;
        // Nor may a role widen: an app's token mints no owner (SPEC L5).
        if !minter.may_speak_as(role) {
            return Err(ApiError::new(
                muster_core::ErrorCode::PermissionDenied,
                format!(
                    "this token cannot create that token: it speaks as {}, not as {}",
                    minter.role(),
                    role
                ),
            ));
        }
    }
    // A role is written into the log only once every member knows the field.
    if role != Actor::App {
        app.gate.require_format(2, "a token with a role")?;
    }
    let accessor = spec.accessor.to_string();
    app.gate
        .propose(CreateToken { token: spec }.into(), app.gate.meta(Actor::Owner, &caller))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(TokenSecretReply {
            accessor,
            secret: secret.as_str().to_owned(),
        }),
    ))
}

/// `GET /v1/acl/tokens`: the tokens the caller may manage.
pub async fn list(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
) -> Result<Json<TokenListReply>, ApiError> {
    let scope = caller.confined_to().cloned();
    require_admin(&app, &caller, peer.as_deref(), scope.as_ref())?;
    let tokens = app.gate.read(|registry| {
        registry
            .acl()
            .tokens()
            .filter(|token| scope.is_none() || token.tenant() == scope.as_ref())
            .map(|token| info(token))
            .collect()
    });
    Ok(Json(TokenListReply { tokens }))
}

/// `GET /v1/acl/self`: the caller's own token.
pub async fn whoami(caller: Caller) -> Result<Json<TokenInfo>, ApiError> {
    caller
        .token_ref()
        .map(|token| Json(info(token)))
        .ok_or_else(|| ApiError::not_found("authentication is off: requests carry no token"))
}

/// `DELETE /v1/acl/tokens/{accessor}`: from the revision it commits at, every node refuses the
/// token, and streams it opened end with an error frame.
pub async fn revoke(
    State(app): State<Arc<Native>>,
    caller: Caller,
    peer: Option<axum::Extension<Peer>>,
    segments: Segments,
) -> Result<Json<TokenRevokeReply>, ApiError> {
    let text = segments.0.first().map_or("", String::as_str);
    let accessor = Accessor::parse(text).map_err(ApiError::bad_request)?;
    let owner = app
        .gate
        .read(|registry| registry.acl().get(&accessor).map(|token| token.tenant().cloned()));
    // A token outside the caller's reach is answered as absent: a probe learns nothing of it.
    let absent = || ApiError::not_found(format!("token {accessor} does not exist"));
    let Some(tenant) = owner else {
        return Err(absent());
    };
    if caller.confined_to().is_some_and(|own| tenant.as_ref() != Some(own)) {
        return Err(absent());
    }
    require_admin(&app, &caller, peer.as_deref(), tenant.as_ref())?;
    let applied = app
        .gate
        .propose(RevokeToken { accessor }.into(), app.gate.meta(Actor::Owner, &caller))
        .await?;
    Ok(Json(TokenRevokeReply {
        revision: applied.revision,
    }))
}

/// Refuses `rules` the cluster's registry `format` cannot store (architecture.md "Formats and
/// versions"): below format 2 a member may not know the `metrics` verb, so a rule naming it
/// (but for `*`, which such a member reads as the verbs it knows) waits for the upgrade
/// (`409 upgrade_pending`).
fn for_format(format: u32, rules: Vec<Rule>) -> Result<Vec<Rule>, ApiError> {
    if format < 2 && rules.iter().any(|rule| rule.verbs.needs_format_2()) {
        return Err(ApiError::from(muster_core::Rejection::UpgradePending {
            what: "the metrics right".into(),
            format,
            needed: 2,
        }));
    }
    Ok(rules)
}

/// Tokens are made only with authentication on: made while it is off (when anyone on the
/// host could), a token would outlive that and hold power once it is turned on.
fn require_auth_on(app: &Native) -> Result<(), ApiError> {
    if app.gate.auth.enabled {
        return Ok(());
    }
    Err(ApiError::new(
        muster_core::ErrorCode::PermissionDenied,
        "authentication is off on this node: set [auth] enabled = true before making tokens",
    ))
}

/// Managing `tenant`'s tokens needs `admin` on the whole tenant; operator tokens (`None`)
/// need an operator's `admin`.
fn require_admin(app: &Native, caller: &Caller, peer: Option<&Peer>, tenant: Option<&Label>) -> Result<(), ApiError> {
    app.gate.require(
        caller,
        peer,
        &Request {
            tenant,
            scope: Scope::Whole,
            verb: Verb::Admin,
        },
    )
}

/// A token's spec with a fresh accessor and secret from the OS's generator.
fn new_token(
    tenant: Option<Label>,
    rules: Vec<Rule>,
    san: Option<String>,
    description: String,
) -> Result<(TokenSpec, Secret), ApiError> {
    let random = SystemRandom::new();
    let mut secret = [0; muster_auth::SECRET_BYTES];
    let mut accessor = [0; 16];
    random
        .fill(&mut secret)
        .and_then(|()| random.fill(&mut accessor))
        .map_err(|_| ApiError::new(muster_core::ErrorCode::Internal, "the OS random generator failed"))?;
    let secret = Secret::from_random(secret);
    Ok((
        TokenSpec {
            accessor: Accessor::from_random(accessor),
            secret_hash: SecretHash::of(secret.as_str()),
            tenant,
            rules,
            san,
            description,
            role: Actor::App,
        },
        secret,
    ))
}

fn info(token: &Token) -> TokenInfo {
    let rules = |effect: Effect| {
        token
            .spec
            .rules
            .iter()
            .filter(|r| r.effect == effect)
            .map(ToString::to_string)
            .collect()
    };
    TokenInfo {
        accessor: token.accessor().to_string(),
        tenant: token.tenant().cloned(),
        allow: rules(Effect::Allow),
        deny: rules(Effect::Deny),
        san: token.spec.san.clone(),
        description: token.spec.description.clone(),
        role: token.role(),
        created_at_ms: token.created_at_ms,
        created_by: token.created_by.clone(),
        principal: token.principal(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        Rule::parse(text, Effect::Allow).unwrap()
    }

    /// Below format 2 a member may not know the `metrics` verb (architecture.md "Formats and
    /// versions"): a rule naming it waits for the raise, `*` (written as the verbs such a
    /// member knows) does not.
    #[test]
    fn a_rule_naming_metrics_waits_for_format_2_and_star_does_not() {
        let refused = for_format(1, vec![rule("*/*=read,metrics")]).unwrap_err();
        assert_eq!(refused.code, muster_core::ErrorCode::UpgradePending);
        assert!(refused.message.contains("the metrics right"), "{}", refused.message);
        for rules in [vec![rule("*/*=*")], vec![rule("prod/*=read,watch")]] {
            assert_eq!(for_format(1, rules.clone()).unwrap(), rules);
        }
        let metrics = vec![rule("*/*=metrics")];
        assert_eq!(for_format(2, metrics.clone()).unwrap(), metrics);
    }
}
