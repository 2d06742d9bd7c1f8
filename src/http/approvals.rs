//! The approval API on the main listener, behind the same authentication as `/mcp` (the
//! decider's identity is what four eyes and tenant isolation rest on; the admin listener
//! has no authentication): `GET /approvals[?tenant=]`, `GET /approvals/{id}`,
//! `POST /approvals/{id}/approve` and `POST /approvals/{id}/deny` with
//! `{"reason": "…"}`. A principal sees and decides only its own tenant's approvals, and only
//! as `approval.approvers` allows.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::{Value, json};

use crate::approval::{DecideError, Decider, OutOfBand, PendingApproval};
use crate::audit::Auditor;
use crate::audit::record::timestamp;
use crate::auth::Principal;
use crate::safe_text::escape_inline;

#[derive(Clone)]
struct Api {
    oob: Arc<OutOfBand>,
    audit: Option<Auditor>,
}

/// The routes, without authentication (the caller adds it, as for `/mcp`).
pub fn routes(oob: Arc<OutOfBand>, audit: Option<Auditor>) -> Router {
    Router::new()
        .route("/approvals", get(list))
        .route("/approvals/{id}", get(show))
        .route("/approvals/{id}/approve", post(approve))
        .route("/approvals/{id}/deny", post(deny))
        .with_state(Api { oob, audit })
}

fn at(ms: u64) -> String {
    timestamp(UNIX_EPOCH + Duration::from_millis(ms))
}

/// An approval as the API (and the CLI's JSON) shows it: the SQL escaped onto one line.
pub fn view(oob: &OutOfBand, approval: &PendingApproval) -> Value {
    let r = &approval.request;
    json!({
        "id": r.id,
        "tenant": r.tenant,
        "state": approval.state_now().as_str(),
        "tool": r.tool,
        "class": r.class,
        "mode": r.mode,
        "requester": {
            "subject": r.requester.subject,
            "issuer": (!r.requester.issuer.is_empty()).then_some(&r.requester.issuer),
            "method": r.requester.method,
        },
        "sql": r.sql.as_deref().map(escape_inline),
        "arguments_sha256": r.arguments_sha256,
        "plan": {
            "hash": format!("sha256:{}", r.plan_hash),
            "writes": r.writes,
            "requests": r.requests,
        },
        "prompt": r.prompt,
        "created_at": at(r.created_at_ms),
        "expires_at": at(r.expires_at_ms),
        "link": oob.link(&r.id),
        "decision": approval.decision.as_ref().map(|d| json!({
            "by": d.by,
            "method": d.method.as_str(),
            "reason": escape_inline(&d.reason),
            "at": at(d.at_ms),
        })),
    })
}

fn error(err: &DecideError) -> Response {
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(json!({"error": {"code": err.code().as_str(), "message": err.to_string()}})),
    )
        .into_response()
}

async fn list(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    RawQuery(query): RawQuery,
) -> Response {
    let query: HashMap<String, String> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let tenant = query
        .get("tenant")
        .cloned()
        .unwrap_or_else(|| principal.tenant.clone());
    if let Err(err) = api.oob.may_view(&principal, &tenant) {
        return error(&err);
    }
    match api.oob.store().list(&tenant).await {
        Ok(list) => {
            let approvals: Vec<Value> = list.iter().map(|a| view(&api.oob, a)).collect();
            Json(json!({ "tenant": tenant, "approvals": approvals })).into_response()
        }
        Err(err) => error(&DecideError::Store(err)),
    }
}

async fn show(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Response {
    match api
        .oob
        .show(Decider::Principal(&principal), &principal.tenant, &id)
        .await
    {
        Ok(approval) => Json(view(&api.oob, &approval)).into_response(),
        Err(err) => error(&err),
    }
}

async fn approve(
    state: State<Api>,
    principal: Extension<Principal>,
    id: Path<String>,
    body: axum::body::Bytes,
) -> Response {
    decide(state, principal, id, body, true).await
}

async fn deny(
    state: State<Api>,
    principal: Extension<Principal>,
    id: Path<String>,
    body: axum::body::Bytes,
) -> Response {
    decide(state, principal, id, body, false).await
}

async fn decide(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
    approve: bool,
) -> Response {
    // The body is optional: `{"reason": "…"}`.
    let reason = if body.is_empty() {
        String::new()
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(map)) => match map.get("reason") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(reason)) => reason.clone(),
                Some(_) => {
                    return error(&DecideError::Invalid("reason must be a string".into()));
                }
            },
            _ => {
                return error(&DecideError::Invalid(
                    "the body must be a JSON object, e.g. {\"reason\": \"…\"}".into(),
                ));
            }
        }
    };
    match api
        .oob
        .decide(
            Decider::Principal(&principal),
            &principal.tenant,
            &id,
            approve,
            &reason,
            api.audit.as_ref(),
        )
        .await
    {
        Ok(approval) => Json(view(&api.oob, &approval)).into_response(),
        Err(err) => error(&err),
    }
}
