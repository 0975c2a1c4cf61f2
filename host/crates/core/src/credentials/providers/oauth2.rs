//! OAuth 2.0 client credentials (RFC 6749 §4.4): the configured client id
//! and secret (HTTP Basic, §2.3.1) buy a bearer token for a scope at the
//! token endpoint. A token is kept per scope until shortly before it expires.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::future::BoxFuture;
use http::{StatusCode, Uri};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::json;

use super::http::{post_form, Failure};
use super::{Issued, Provider, ProviderError};
use map_config::OAuth2Provider;

/// Scopes with a token slot at most; past it, tokens of new scopes are not kept.
const MAX_SLOTS: usize = 1024;
/// A token is fetched anew this long before it expires (or at half its life, if sooner).
const REFRESH_BEFORE: Duration = Duration::from_secs(60);

pub struct OAuth2 {
    endpoint: Uri,
    /// `Basic …`: holds the client secret.
    authorization: String,
    oauth_scopes: BTreeMap<String, String>,
    timeout: Duration,
    /// MAP scope → the token held for it. One slot per scope, locked across
    /// an exchange, so requests for a scope at once make one exchange.
    slots: Mutex<HashMap<String, Slot>>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Token>>>;

struct Token {
    value: String,
    /// Unix milliseconds, if the endpoint said.
    expires_at: Option<u64>,
    fresh_until: Instant,
}

impl Token {
    fn issued(&self) -> Issued {
        Issued { credential_type: "bearer_token".into(), credential: json!({"token": self.value, "tokenType": "Bearer"}), expires_at: self.expires_at }
    }
}

/// The token endpoint's answer (RFC 6749 §5.1); `expires_in` as a number or a numeric string.
#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    token_type: String,
    expires_in: Option<serde_json::Value>,
}

/// An error answer (§5.2): only its code is repeated, never a description.
#[derive(Deserialize)]
struct ErrorResponse {
    error: String,
}

impl OAuth2 {
    pub fn new(config: &OAuth2Provider) -> anyhow::Result<OAuth2> {
        let secret = config.client_secret.reveal().map_err(|e| anyhow::anyhow!("client_secret: {e}"))?;
        let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", encode(&config.client_id), encode(&secret)));
        Ok(OAuth2 {
            endpoint: config.token_url.parse()?,
            authorization: format!("Basic {basic}"),
            oauth_scopes: config.oauth_scopes.clone(),
            timeout: Duration::from_millis(config.timeout_ms),
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// The slot of a scope; a throwaway one when the table is full of fresh tokens.
    fn slot(&self, scope: &str) -> Slot {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.get(scope) {
            return slot.clone();
        }
        if slots.len() >= MAX_SLOTS {
            let now = Instant::now();
            slots.retain(|_, slot| slot.try_lock().map_or(true, |held| held.as_ref().is_some_and(|t| now < t.fresh_until)));
        }
        let slot = Slot::default();
        if slots.len() < MAX_SLOTS {
            slots.insert(scope.to_string(), slot.clone());
        }
        slot
    }

    async fn exchange(&self, scope: &str) -> Result<Token, ProviderError> {
        let oauth_scope = self.oauth_scopes.get(scope).map_or(scope, String::as_str);
        let form = form_urlencoded::Serializer::new(String::new()).append_pair("grant_type", "client_credentials").append_pair("scope", oauth_scope).finish();
        let (status, body) = post_form(&self.endpoint, &self.authorization, form, self.timeout).await.map_err(|f| match f {
            Failure::Unreachable(why) => ProviderError::Unavailable(format!("token endpoint unreachable: {why}")),
            Failure::TooLarge => ProviderError::Failed("the token endpoint's answer is too large".into()),
        })?;
        token_from(status, &body, Instant::now())
    }
}

/// A token from the endpoint's answer: 5xx and 429 say it is unavailable,
/// other refusals and malformed answers are failures.
fn token_from(status: StatusCode, body: &[u8], now: Instant) -> Result<Token, ProviderError> {
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return Err(ProviderError::Unavailable(format!("the token endpoint answered {status}")));
    }
    if !status.is_success() {
        let code = serde_json::from_slice::<ErrorResponse>(body).ok().map(|e| e.error).filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_graphic()));
        return Err(ProviderError::Failed(format!("the token endpoint refused: {status}{}", code.map(|c| format!(" ({c})")).unwrap_or_default())));
    }
    let malformed = || ProviderError::Failed("the token endpoint's answer is not a token (JSON with access_token, token_type and expires_in)".into());
    let answer: TokenResponse = serde_json::from_slice(body).map_err(|_| malformed())?;
    if !answer.token_type.eq_ignore_ascii_case("bearer") || answer.access_token.is_empty() {
        return Err(ProviderError::Failed(format!("the token endpoint issued a {:?} token, not a bearer token", answer.token_type)));
    }
    let lifetime = match &answer.expires_in {
        None => None,
        Some(v) => Some(v.as_u64().or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)).or_else(|| v.as_str()?.parse().ok()).ok_or_else(malformed)?),
    };
    let (expires_at, fresh_until) = match lifetime {
        // Without a lifetime the token is not kept.
        None => (None, now),
        Some(secs) => {
            let life = Duration::from_secs(secs);
            (Some(now_ms() + secs * 1000), now + life - REFRESH_BEFORE.min(life / 2))
        }
    };
    Ok(Token { value: answer.access_token, expires_at, fresh_until })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Provider for OAuth2 {
    fn kind(&self) -> &'static str {
        "oauth2"
    }

    fn issue<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Issued, ProviderError>> {
        Box::pin(async move {
            let slot = self.slot(scope);
            let mut held = slot.lock().await;
            if let Some(token) = held.as_ref().filter(|t| Instant::now() < t.fresh_until) {
                return Ok(token.issued());
            }
            let token = self.exchange(scope).await?;
            let issued = token.issued();
            *held = Some(token);
            Ok(issued)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Result<Token, ProviderError> {
        token_from(StatusCode::from_u16(status).unwrap(), body.as_bytes(), Instant::now())
    }

    #[test]
    fn answers_become_tokens_or_say_why_not() {
        let t = answer(200, r#"{"access_token":"tok","token_type":"Bearer","expires_in":3600}"#).unwrap();
        assert!(t.fresh_until > Instant::now() + Duration::from_secs(3500) && t.expires_at.is_some());
        let short = answer(200, r#"{"access_token":"tok","token_type":"bearer","expires_in":"10"}"#).unwrap();
        assert!(short.fresh_until <= Instant::now() + Duration::from_secs(5), "refreshed at half a short life");
        assert!(answer(200, r#"{"access_token":"tok","token_type":"bearer"}"#).unwrap().expires_at.is_none());
        assert!(matches!(answer(503, ""), Err(ProviderError::Unavailable(_))));
        assert!(matches!(answer(429, ""), Err(ProviderError::Unavailable(_))));
        let Err(ProviderError::Failed(why)) = answer(400, r#"{"error":"invalid_scope","error_description":"tok"}"#) else { panic!() };
        assert!(why.contains("invalid_scope") && !why.contains("tok\""), "{why}");
        for bad in
            ["not json", r#"{"access_token":"tok","token_type":"mac","expires_in":1}"#, r#"{"access_token":"tok","token_type":"bearer","expires_in":"soon"}"#]
        {
            let Err(ProviderError::Failed(why)) = answer(200, bad) else { panic!("{bad}") };
            assert!(!why.contains("tok\""), "{why}");
        }
    }
}
