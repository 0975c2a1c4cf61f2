//! The method table: every MAP core method, by name.

pub(crate) mod agents;
pub(crate) mod credentials;
mod inject;
pub(crate) mod messaging;
mod permissions;
mod refresh;
pub(crate) mod resources;
pub(crate) mod scopes;
pub(crate) mod session;
mod structure;
pub(crate) mod subscriptions;
mod takeover;
pub(crate) mod workspace;

use std::sync::Arc;

use super::{Active, Conn, Gateway, Out};
use crate::ext_registry::plugin_namespace;
use crate::federation::PEER_METHODS;
use map_protocol::rpc::codes;
use map_protocol::rpc::{Request, RpcError};

/// A core method's answer, or `None` for an extension's method: one
/// outside `map/`, or in the `map/` namespace of a registered extension
/// (`map/tasks/`), which a plugin may serve (-32601 when none does).
pub(super) fn dispatch(gw: &Arc<Gateway>, conn: &mut Conn, req: &Request) -> Option<Result<Out, RpcError>> {
    // A flag revoked by map/permissions/update refuses core and extension methods alike.
    if let Err(e) = conn.active().map_or(Ok(()), |active| crate::permissions::check(active, &req.method)) {
        return Some(Err(e));
    }
    if let Some(answer) = credentials::dispatch(conn, req) {
        return Some(answer);
    }
    if workspace::serves(&gw.config.workspace, &req.method) {
        return Some(workspace::call(gw, conn, req));
    }
    if !req.method.starts_with("map/") {
        return None;
    }
    if let Err(e) = walled(conn, req) {
        return Some(Err(e));
    }
    match plugin_namespace(&req.method) {
        Some(_) => None,
        None => Some(route(gw, conn, req)),
    }
}

/// A federated system reaches only the peer methods of `map/`.
fn walled(conn: &Conn, req: &Request) -> Result<(), RpcError> {
    if let Ok(active) = conn.active() {
        let walled = active.tenant.federation().is_some_and(|f| f.shown_to(&active.principal).is_some());
        if walled && !PEER_METHODS.contains(&&*req.method) {
            return Err(RpcError::new(codes::PERMISSION_DENIED, format!("{} is not available to a federated system", req.method)));
        }
    }
    Ok(())
}

fn route(gw: &Arc<Gateway>, conn: &mut Conn, req: &Request) -> Result<Out, RpcError> {
    match &*req.method {
        // The hot path first.
        "map/send" => messaging::send(conn.active()?, req),

        "map/connect" | "map/initialize" => session::connect(gw, conn, req),
        "map/authenticate" => session::authenticate(gw, conn, req),
        "map/auth/refresh" => refresh::refresh(gw, conn, req),
        "map/permissions/update" => permissions::update(gw, conn.active()?, req),
        "map/disconnect" | "map/shutdown" => session::disconnect(gw, conn, req),
        "map/session/list" => session::list(conn),
        "map/session/load" => session::load(gw, conn, req),
        "map/session/close" => session::close(gw, conn, req),

        "map/agents/register" => agents::register(conn.active()?, req, false),
        "map/agents/spawn" => agents::register(conn.active()?, req, true),
        "map/agents/unregister" => agents::unregister(conn.active()?, req),
        "map/agents/update" => agents::update(conn.active()?, req),
        "map/agents/stop" => agents::control(conn.active()?, req, "stopped"),
        "map/agents/suspend" => agents::control(conn.active()?, req, "suspended"),
        "map/agents/resume" => agents::control(conn.active()?, req, "active"),
        "map/agents/list" => agents::list(conn.active()?, req),
        "map/agents/get" => structure::get(conn.active()?, req),
        "map/structure/graph" => structure::graph(conn.active()?, req),
        "map/inject" => inject::inject(conn.active()?, req),

        "map/scopes/create" => scopes::create(conn.active()?, req),
        "map/scopes/list" => scopes::list(conn.active()?, req),
        "map/scopes/get" => scopes::get(conn.active()?, req),
        "map/scopes/delete" => scopes::delete(conn.active()?, req),
        "map/scopes/join" => scopes::join(conn.active()?, req, true),
        "map/scopes/leave" => scopes::join(conn.active()?, req, false),
        "map/scopes/members" => scopes::members(conn.active()?, req),

        "map/subscribe" => subscriptions::subscribe(conn.active()?, req),
        "map/unsubscribe" => match (conn.active(), &conn.left) {
            (Err(_), Some(left)) => subscriptions::unsubscribe(left, req),
            (active, _) => subscriptions::unsubscribe(active?, req),
        },
        "map/subscribe.ack" => subscriptions::ack(conn.active()?, req),
        // The SDK's schema names, and its server's.
        "map/subscriptions/pause" | "map/pause" => subscriptions::pause(conn.active()?, req, true),
        "map/subscriptions/resume" | "map/resume" => subscriptions::pause(conn.active()?, req, false),
        "map/replay" => subscriptions::replay(conn.active()?, req),

        "map/resources/list" => resources::list(conn.active()?, req),
        "map/resources/get" => resources::get(conn.active()?, req),

        "map/federation/connect" | "map/federation/route" => federation(conn.active()?, req),

        other => Err(RpcError::method_not_found(other)),
    }
}

/// `map/federation/connect` and `/route`, for a tenant that is a system of a federation.
fn federation(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let fed = active.tenant.federation().ok_or_else(|| RpcError::new(codes::FEDERATION_UNAVAILABLE, "Federation is not configured for this system"))?;
    let params: serde_json::Value = req.params()?;
    let answer = match &*req.method {
        "map/federation/connect" => fed.connect(active, params),
        _ => fed.route(active, params),
    };
    Ok(Out::Later(Box::pin(async move { answer.await.map(Out::Json) })))
}
