//! The admin API and `/metrics`, behind `admin.token` (Bearer), or open to
//! loopback peers when no token is set. Never answers a page of another origin.
//!
//! - `GET /admin/tenants`: each tenant's sessions, agents, scopes,
//!   subscriptions and replay log size.
//! - `GET /admin/sessions|agents|scopes|subscriptions[?tenant=ID]`.
//! - `DELETE /admin/sessions/{id}`: end a session now.
//! - `GET /admin/plugins`: loaded plugins, and per tenant their calls,
//!   instances, health and recent failures.
//! - `POST /admin/reload`: re-read the configuration and swap plugins, in
//!   the background: 202 with `{"reload": {id, state}}` and a `Location` to
//!   poll. `?wait=true` waits instead: 200 with the plugin status, or 422.
//! - `GET /admin/reload[/{id}]`: the latest reload (or that one): `running`,
//!   `done` with the plugin status, or `failed` with the error.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::reply::{error_json, full, method_not_allowed, Body};
use map_core::{Gateway, ReloadState};

fn ok_json(v: Value) -> Response<Body> {
    full(StatusCode::OK, "application/json", v.to_string())
}

/// The `tenant` query parameter, if given.
fn tenant_param(req: &Request<Incoming>) -> Option<String> {
    let query = req.uri().query()?;
    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "tenant").map(|(_, v)| v.into_owned())
}

/// Whether the peer may use the admin API; the refusal otherwise (a whole
/// response, built on the cold path only).
#[allow(clippy::result_large_err)]
fn authorise(gw: &Gateway, peer: SocketAddr, req: &Request<Incoming>) -> Result<(), Response<Body>> {
    let cross_site = req.headers().get("sec-fetch-site").is_some_and(|v| v.as_bytes() != b"same-origin" && v.as_bytes() != b"none");
    if cross_site || super::headers::foreign_origin(req.headers()).is_some() {
        return Err(error_json(StatusCode::FORBIDDEN, "the admin API does not answer cross-origin requests"));
    }
    let token = &gw.config.admin.token;
    let allowed = if token.is_empty() {
        super::headers::is_loopback(&peer)
    } else {
        if let Err(e) = gw.tenants.throttle.check(peer.ip()) {
            return Err(error_json(StatusCode::TOO_MANY_REQUESTS, &e.message));
        }
        let ok =
            super::headers::header_credentials(req.headers()).is_some_and(|(kind, t)| kind == "bearer" && map_protocol::ids::secrets_equal(&t, token.expose()));
        if !ok {
            gw.tenants.throttle.failed(peer.ip());
        }
        ok
    };
    if allowed {
        return Ok(());
    }
    let why = if token.is_empty() { "the admin API answers loopback peers only (set admin.token to open it)" } else { "admin token required" };
    Err(error_json(StatusCode::UNAUTHORIZED, why))
}

pub async fn route(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    if let Err(refused) = authorise(&gw, peer, &req) {
        return refused;
    }
    let path = req.uri().path();
    let tenant = tenant_param(&req);
    let unknown_tenant = || error_json(StatusCode::NOT_FOUND, &format!("no tenant {:?}", tenant.as_deref().unwrap_or_default()));
    let listing = |v: Option<Value>| v.map_or_else(unknown_tenant, ok_json);
    let listing_text = |v: Option<String>| v.map_or_else(unknown_tenant, |text| full(StatusCode::OK, "application/json", text));
    match (req.method(), path) {
        (&Method::GET, "/metrics") => match map_observe::metrics::render() {
            Some(text) => full(StatusCode::OK, "text/plain; version=0.0.4", text),
            None => full(StatusCode::NOT_FOUND, "text/plain", "metrics are off (server.metrics = false)\n"),
        },
        (&Method::GET, "/admin/tenants") => ok_json(gw.admin_tenants()),
        (&Method::GET, "/admin/sessions") => listing_text(gw.admin_sessions(tenant.as_deref()).await),
        (&Method::GET, "/admin/agents") => listing_text(gw.admin_agents(tenant.as_deref()).await),
        (&Method::GET, "/admin/scopes") => listing_text(gw.admin_scopes(tenant.as_deref()).await),
        (&Method::GET, "/admin/subscriptions") => listing(gw.admin_subscriptions(tenant.as_deref())),
        (&Method::DELETE, p) if p.starts_with("/admin/sessions/") => {
            let id = &p["/admin/sessions/".len()..];
            match gw.admin_disconnect(id) {
                true => ok_json(json!({"disconnected": id})),
                false => error_json(StatusCode::NOT_FOUND, "no such session"),
            }
        }
        (&Method::GET, "/admin/plugins") => match &gw.extensions {
            Some(host) => ok_json(host.status().await),
            None => ok_json(json!({"plugins": [], "tenants": [], "lastError": null})),
        },
        (&Method::POST, "/admin/reload") => reload(&gw, &req).await,
        (&Method::GET, "/admin/reload") => reload_job(&gw, None),
        (&Method::GET, "/admin/rollout") => rollout(&gw, None),
        (&Method::GET, p) if p.starts_with("/admin/rollout/") => rollout(&gw, Some(&p["/admin/rollout/".len()..])),
        (&Method::POST, "/admin/rollback") => match gw.rollback().await {
            Ok(view) => ok_json(json!({"rollout": view})),
            Err(e) => error_json(StatusCode::UNPROCESSABLE_ENTITY, &format!("{e:#}")),
        },
        (&Method::GET, p) if p.starts_with("/admin/reload/") => reload_job(&gw, Some(&p["/admin/reload/".len()..])),
        (_, "/metrics" | "/admin/tenants" | "/admin/sessions" | "/admin/agents" | "/admin/scopes" | "/admin/subscriptions" | "/admin/plugins") => {
            method_not_allowed("GET")
        }
        (_, "/admin/reload") => method_not_allowed("GET, POST"),
        (_, "/admin/rollback") => method_not_allowed("POST"),
        (_, p) if p.starts_with("/admin/rollout") => method_not_allowed("GET"),
        (_, p) if p.starts_with("/admin/reload/") => method_not_allowed("GET"),
        (_, p) if p.starts_with("/admin/sessions/") => method_not_allowed("DELETE"),
        _ => error_json(StatusCode::NOT_FOUND, "no such admin endpoint"),
    }
}

/// Start a reload: 202 and where to follow it; with `?wait=true`, its end.
async fn reload(gw: &Arc<Gateway>, req: &Request<Incoming>) -> Response<Body> {
    let wait = req.uri().query().is_some_and(|q| form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "wait" && (v == "true" || v == "1")));
    let job = gw.start_reload();
    if !wait {
        let mut r = full(StatusCode::ACCEPTED, "application/json", json!({"reload": job.accepted()}).to_string());
        if let Ok(at) = hyper::header::HeaderValue::from_str(&format!("/admin/reload/{}", job.id)) {
            r.headers_mut().insert(hyper::header::LOCATION, at);
        }
        return r;
    }
    match job.ended().await {
        ReloadState::Done { status, .. } => ok_json(status),
        ReloadState::Failed { error, .. } => error_json(StatusCode::UNPROCESSABLE_ENTITY, &error),
        ReloadState::Running => error_json(StatusCode::INTERNAL_SERVER_ERROR, "the reload did not end"),
    }
}

fn reload_job(gw: &Gateway, id: Option<&str>) -> Response<Body> {
    match gw.reload_job(id) {
        Some(job) => ok_json(json!({"reload": job.view()})),
        None if id.is_none() => error_json(StatusCode::NOT_FOUND, "no reload since the gateway started"),
        None => error_json(StatusCode::NOT_FOUND, "no such reload (the latest 16 are kept)"),
    }
}

/// A rollout with every node's report: the latest, or by id.
fn rollout(gw: &Gateway, id: Option<&str>) -> Response<Body> {
    match gw.rollout_view(id) {
        Some(view) => ok_json(json!({"rollout": view})),
        None => error_json(StatusCode::NOT_FOUND, "no such rollout (outside a cluster there are none; the latest 16 are kept)"),
    }
}
