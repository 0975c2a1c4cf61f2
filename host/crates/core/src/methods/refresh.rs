//! map/auth/refresh: a fresh access token for the session's principal, and
//! the session's credential expiry moved on (`map/auth/expiring` re-armed).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use super::session::{auth_error, credential_renewed, principal, refused};
use crate::{Conn, Gateway, Out};
use map_protocol::ids;
use map_protocol::rpc::{codes, Request, RpcError};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RefreshParams {
    refresh_token: Option<String>,
    method: Option<String>,
    credential: Option<String>,
}

/// Issue a fresh access token (a JWT signed by this gateway, with an
/// expiry) for the session's principal: `{success: true, principal,
/// accessToken, expiresAt, …}`. A credential given here must be the same
/// principal's, else `{success: false, error}`; the answer never contains
/// it. The session's credential then expires when the one given does (a
/// key: never), or without one given, when the new token does (if it
/// expired at all); `principal.expiresAt` says when, in Unix ms.
pub fn refresh(gw: &Arc<Gateway>, conn: &mut Conn, req: &Request) -> Result<Out, RpcError> {
    let active = conn.active()?.clone();
    let p: RefreshParams = req.params()?;
    let mut renewed = None;
    if let Some(presented) = p.refresh_token.or(p.credential) {
        let method = p.method.as_deref().unwrap_or("bearer");
        let who = match gw.authenticate(conn, method, Some(&presented)) {
            Ok(who) => who,
            Err(e) if refused(&e) => return Ok(json!({"success": false, "error": auth_error(gw, method, &e)}).into()),
            Err(e) => return Err(e),
        };
        if !Arc::ptr_eq(&who.tenant, &active.tenant) || !ids::secrets_equal(&who.principal, &active.principal) {
            let error = json!({"code": "invalid_credentials", "message": "The credential belongs to another principal than this session's"});
            return Ok(json!({"success": false, "error": error}).into());
        }
        renewed = Some(who.expires_at);
    }
    if &*active.principal == crate::tenants::ANONYMOUS {
        return Err(RpcError::new(codes::PERMISSION_DENIED, "Anonymous sessions get no access token: connect with a credential"));
    }
    let (token, expires_at) = gw.tenants.tokens.issue(&active.tenant.id, &active.principal);
    let renewed = renewed.unwrap_or_else(|| gw.live(&active.session_id).and_then(|l| l.expiry.expires_at()).map(|_| expires_at));
    credential_renewed(gw, conn, &active, renewed);
    Ok(json!({"success": true, "accessToken": token, "tokenType": "Bearer", "expiresAt": expires_at, "principal": principal(gw, &active)}).into())
}
