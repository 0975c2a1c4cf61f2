//! JWTs checked with keys fetched from an issuer: a local identity provider
//! (OpenID Connect discovery and a JWK set, served by this test) rotates its
//! keys, goes down and serves garbage; the gateway accepts a new key after
//! rotation, refuses an unknown and a removed one, fetches no more often than
//! its bound, keeps cached keys through an outage for `max_stale_ms` and then
//! refuses clearly; `alg: none` and algorithm confusion are refused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::*;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// An ES256 key of the issuer's: its `kid`, signing key and public JWK.
struct Key {
    kid: String,
    signing: EncodingKey,
    jwk: Value,
}

impl Key {
    fn new(kid: &str) -> Key {
        let pair = rcgen::KeyPair::generate().expect("a P-256 key");
        let raw = pair.public_key_raw();
        let (x, y) = raw[1..].split_at(32);
        let jwk = json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid, "x": B64.encode(x), "y": B64.encode(y)});
        Key { kid: kid.into(), signing: EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).expect("PKCS#8 PEM"), jwk }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        encode(&header, claims, &self.signing).expect("ES256 signs")
    }
}

enum Serving {
    Keys(Vec<Value>),
    Down,
    Garbage,
}

/// The local identity provider: discovery at `/.well-known/openid-configuration`, keys at `/jwks`.
struct Issuer {
    url: String,
    serving: Arc<Mutex<Serving>>,
    fetches: Arc<AtomicUsize>,
}

impl Issuer {
    async fn start() -> Issuer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let serving = Arc::new(Mutex::new(Serving::Keys(Vec::new())));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (s, f, base) = (serving.clone(), fetches.clone(), url.clone());
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let (s, f, base) = (s.clone(), f.clone(), base.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]).to_string();
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    let body = match path.as_str() {
                        "/.well-known/openid-configuration" => json!({"issuer": base, "jwks_uri": format!("{base}/jwks")}).to_string(),
                        "/jwks" => {
                            f.fetch_add(1, Ordering::SeqCst);
                            match &*s.lock() {
                                Serving::Keys(keys) => json!({ "keys": keys }).to_string(),
                                // Down: the connection closes without an answer.
                                Serving::Down => return,
                                Serving::Garbage => "<html>not a key set".into(),
                            }
                        }
                        _ => return,
                    };
                    let answer =
                        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                    let _ = sock.write_all(answer.as_bytes()).await;
                });
            }
        });
        Issuer { url, serving, fetches }
    }

    fn serve(&self, what: Serving) {
        *self.serving.lock() = what;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn claims(iss: &str, aud: &str) -> Value {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    json!({"sub": "carol", "aud": aud, "iss": iss, "exp": now + 600})
}

/// `map/connect` with the token: `Ok(principal)` or `Err(refusal message)`.
async fn connect(gw: &Gateway, token: &str) -> Result<String, String> {
    let mut ws = Ws::connect(&gw.ws_url()).await;
    let r = ws.call("map/connect", json!({"protocolVersion": 1, "auth": {"method": "bearer", "token": token}})).await;
    let r = ok(&r);
    match r["principal"]["id"].as_str() {
        Some(p) => Ok(p.to_string()),
        None => Err(format!("{} {}", r["error"]["code"], r["error"]["message"])),
    }
}

/// Connect with the token until `done` holds of the outcome (time has to pass for it); the outcome.
async fn until(gw: &Gateway, token: &str, within: Duration, done: impl Fn(&Result<String, String>) -> bool) -> Result<String, String> {
    let probe = async || {
        let outcome = connect(gw, token).await;
        if done(&outcome) {
            Ok(outcome)
        } else {
            Err(outcome)
        }
    };
    // The callers check the last outcome, whatever it is.
    wait::until(within, probe).await.unwrap_or_else(|last| last)
}

const AUTH: &str = "[auth]\nanonymous_tenant = \"\"\nfailures_per_minute = 100000\nfailures_per_connection = 100000\n";

#[tokio::test(flavor = "multi_thread")]
async fn keys_from_an_oidc_issuer_rotate_expire_and_survive_an_outage_for_a_while() {
    let issuer = Issuer::start().await;
    let (k1, k2, stranger) = (Key::new("k1"), Key::new("k2"), Key::new("kx"));
    issuer.serve(Serving::Keys(vec![k1.jwk.clone()]));
    let jwks = format!("{{ oidc_issuer = \"{}\", refresh_ms = 1500, min_interval_ms = 1000, max_stale_ms = 4000 }}", issuer.url);
    let gw = Gateway::start_with(65536, &format!("{AUTH}[[tenants]]\nid = \"idp\"\njwt = {{ algorithm = \"ES256\", audience = \"map\", jwks = {jwks} }}\n"));
    let claims = claims(&issuer.url, "map");

    assert_eq!(connect(&gw, &k1.sign(&claims)).await, Ok("carol".into()));
    assert_eq!(issuer.fetches(), 1);
    // A kid the set lacks fetches it again, but not within min_interval_ms of the last fetch.
    let unknown = connect(&gw, &stranger.sign(&claims)).await;
    assert!(unknown.as_ref().is_err_and(|e| e.contains("invalid_credentials")), "{unknown:?}");
    assert_eq!(issuer.fetches(), 1, "an unknown kid within the bound fetches nothing");

    // Rotation: k2 replaces k1. A k2 token is accepted once the bound allows a fetch.
    issuer.serve(Serving::Keys(vec![k2.jwk.clone()]));
    let rotated = Instant::now();
    assert_eq!(until(&gw, &k2.sign(&claims), Duration::from_secs(10), Result::is_ok).await, Ok("carol".into()));
    assert!(issuer.fetches() == 2, "one fetch for the new kid, however many tries: {}", issuer.fetches());
    assert!(rotated.elapsed() < Duration::from_millis(2500), "{:?}", rotated.elapsed());
    let removed = connect(&gw, &k1.sign(&claims)).await;
    assert!(removed.is_err(), "a key the issuer removed is refused: {removed:?}");

    // Outage: the keys fetched keep working until max_stale_ms after that fetch, then a clear refusal.
    issuer.serve(Serving::Down);
    let down = Instant::now();
    assert_eq!(connect(&gw, &k2.sign(&claims)).await, Ok("carol".into()));
    let refused = until(&gw, &k2.sign(&claims), Duration::from_secs(15), Result::is_err).await;
    let message = refused.expect_err("refused once the keys are too old");
    assert!(message.contains("could not be fetched"), "{message}");
    assert!(down.elapsed() >= Duration::from_millis(2000), "cached keys worked for a while: {:?}", down.elapsed());
    let tries = issuer.fetches() - 2;
    let bound = down.elapsed().as_millis() as usize / 1000 + 2;
    assert!(tries >= 1 && tries <= bound, "{tries} fetches while down for {:?}", down.elapsed());
    assert!(gw.log().contains("fetching an issuer's key set failed"), "{}", gw.log_tail(20));

    // Garbage is no key set: still refused; the issuer back up, accepted again.
    issuer.serve(Serving::Garbage);
    let garbage = until(&gw, &k2.sign(&claims), Duration::from_secs(3), |r| r.as_ref().is_err_and(|e| e.contains("JSON"))).await;
    assert!(garbage.as_ref().is_err_and(|e| e.contains("JSON")), "{garbage:?}");
    issuer.serve(Serving::Keys(vec![k2.jwk.clone()]));
    assert_eq!(until(&gw, &k2.sign(&claims), Duration::from_secs(5), Result::is_ok).await, Ok("carol".into()));
}

#[tokio::test(flavor = "multi_thread")]
async fn none_and_algorithm_confusion_are_refused() {
    let issuer = Issuer::start().await;
    let k1 = Key::new("k1");
    // A symmetric key in the set too, which must never check a token.
    let oct = json!({"kty": "oct", "kid": "h", "k": B64.encode(b"0123456789abcdef0123456789abcdef")});
    issuer.serve(Serving::Keys(vec![k1.jwk.clone(), oct]));
    let url = format!("{}/jwks", issuer.url);
    let extra = format!(
        "{AUTH}[[tenants]]\nid = \"idp\"\njwt = {{ algorithm = \"ES256\", issuer = \"{iss}\", jwks = {{ url = \"{url}\" }} }}\n\
         [[tenants]]\nid = \"fed\"\n[tenants.federation]\nsystem_id = \"fed\"\n\
         trusted_issuers = [{{ issuer = \"https://peer.example\", algorithm = \"ES256\", jwks = {{ url = \"{url}\" }} }}]\n",
        iss = issuer.url
    );
    let gw = Gateway::start_with(65536, &extra);
    let claims = claims(&issuer.url, "map");
    assert_eq!(connect(&gw, &k1.sign(&claims)).await, Ok("carol".into()));

    let b64 = |v: &Value| B64.encode(v.to_string());
    let none = format!("{}.{}.", b64(&json!({"alg": "none", "kid": "k1"})), b64(&claims));
    assert!(connect(&gw, &none).await.is_err(), "alg none");
    // HS256 keyed with the public key (the classic confusion), and with the set's own oct key.
    for (kid, secret) in [("k1", k1.jwk.to_string().into_bytes()), ("h", b"0123456789abcdef0123456789abcdef".to_vec())] {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(kid.into());
        let token = encode(&header, &claims, &EncodingKey::from_secret(&secret)).unwrap();
        assert!(connect(&gw, &token).await.is_err(), "HS256 with kid {kid}");
    }
    let forged = format!("{}.{}.{}", b64(&json!({"alg": "RS256", "kid": "k1"})), b64(&claims), B64.encode([7u8; 256]));
    assert!(connect(&gw, &forged).await.is_err(), "RS256 header on an ES256 issuer");

    // A federation's trusted issuer takes its keys from a set too: aud is the system, sub the peer.
    let federated = k1.sign(&json!({"sub": "peer-x", "aud": "fed", "iss": "https://peer.example", "exp": claims["exp"]}));
    assert_eq!(connect(&gw, &federated).await, Ok("peer-x".into()));

    // A key set with a shared-secret algorithm is refused when the configuration is checked.
    let dir = TempDir::new("jwks-hs");
    let config = write_config(dir.path(), 65536, &format!("{AUTH}[[tenants]]\nid = \"x\"\njwt = {{ algorithm = \"HS256\", jwks = {{ url = \"{url}\" }} }}\n"));
    let out = std::process::Command::new(BIN).args(["check", "--config"]).arg(&config).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("jwt.jwks needs a public-key algorithm"), "{}", String::from_utf8_lossy(&out.stderr));
}
