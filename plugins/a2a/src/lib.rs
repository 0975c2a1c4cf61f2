//! The A2A bridge as a gateway plugin (world `http-service`): A2A clients
//! (protocol 1.0, and 0.3's method names; JSON-RPC and HTTP+JSON bindings) reach this tenant's MAP agents that opt
//! in through their registration metadata (`metadata.a2a`).
//!
//! Served under the plugin's HTTP prefix (`/a2a`):
//! - `GET /agents`: the agents published with `a2a/publish`, with their cards' URLs;
//! - `GET /agents/{id}/.well-known/agent-card.json`: the agent's card ([`cards`]);
//! - `POST /agents/{id}`: its JSON-RPC URL ([`methods`]);
//! - `/agents/{id}/rest/…`: its HTTP+JSON binding ([`rest`]), the same methods.
//!
//! A client's message reaches the agent as `map/message` with
//! `meta.protocol = "a2a"`, opening a durable task ([`task`]); the agent
//! answers with `a2a/reply` and `a2a/task/update` ([`agent`]).

mod agent;
mod cards;
mod compat;
mod jsonrpc;
mod mail;
mod message;
mod methods;
mod names;
mod outbound;
mod progress;
mod push;
mod rate;
mod remote;
mod remote_task;
mod rest;
mod settings;
mod signing;
mod stream;
mod task;

use map_plugin_sdk::{metrics, Describe, ErrorRange, EventFilter, Extension, HttpHandler, HttpRequest, HttpResponse, Methods};
use serde_json::{json, Value};

use jsonrpc::{answer, Fault};
use settings::Settings;

/// An experimental extension's range (A2A is in no MAP registry).
const ERRORS: ErrorRange = ErrorRange::new(93000, 93999).with_storage_code(93999);
/// No A2A task with that id.
const TASK_NOT_FOUND: i64 = ERRORS.code(93000);
/// The task is served by another agent.
const NOT_YOURS: i64 = ERRORS.code(93001);
/// The task is in a terminal state.
const TASK_FINAL: i64 = ERRORS.code(93002);

const CARD: &str = "/.well-known/agent-card.json";
/// Below an agent's URL, the HTTP+JSON binding's base.
const REST: &str = "/rest";

/// What a path below `/agents/<id>` is.
#[derive(PartialEq, Clone, Copy)]
enum Endpoint<'a> {
    JsonRpc,
    Card,
    /// The HTTP+JSON binding, with the path below its base.
    Rest(&'a str),
}

struct A2a;

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn not_found(what: String) -> HttpResponse {
    answer(404, &Value::Null, Err(Fault::new(jsonrpc::INVALID_REQUEST, what)))
}

/// 429 with A2A's JSON-RPC error shape, and when to come back.
fn too_many(per_minute: u64, retry_after: u64) -> HttpResponse {
    metrics::count("a2a_rate_limited_total", &[], 1);
    let mut r = answer(429, &Value::Null, Err(Fault::new(jsonrpc::INTERNAL, format!("rate limited: more than {per_minute} requests in a minute"))));
    r.headers.push(("retry-after".into(), retry_after.to_string()));
    r
}

/// A card with `Cache-Control` and its `ETag`; 304 when `If-None-Match` names it (A2A §8.6.1).
fn serve_card(req: &HttpRequest, card: &Value, s: &Settings) -> HttpResponse {
    // Signed with the configured key (A2A §8.4); a key that is not one is the operator's to fix.
    let signed;
    let card = match s.card_signing_key.as_str() {
        "" => card,
        k => match signing::secret_key(k) {
            Ok(key) => {
                signed = signing::sign(card, &key);
                &signed
            }
            Err(why) => return HttpResponse::json(500, &json!({"error": format!("the card cannot be signed: {why}")})),
        },
    };
    let tag = cards::etag(card);
    let mut r = match header(req, "if-none-match") {
        Some(v) if cards::names_tag(v, &tag) => HttpResponse { status: 304, headers: vec![], body: vec![] },
        _ => HttpResponse::json(200, card),
    };
    // `private`: a card depends on the caller's tenant.
    r.headers.push(("cache-control".into(), format!("private, max-age={}", s.card_max_age_s)));
    r.headers.push(("etag".into(), tag));
    r
}

impl HttpHandler for A2a {
    fn handle(req: HttpRequest) -> HttpResponse {
        let s = Settings::load();
        if let Err(wait) = rate::admit(&rate::sender(&req), s.requests_per_minute) {
            return too_many(s.requests_per_minute, wait);
        }
        // Clients that append `/` to an interface's or a card's URL reach the same place.
        let path = req.path.strip_suffix('/').filter(|p| !p.is_empty()).unwrap_or(&req.path).to_string();
        if path == "/agents" {
            return match (req.method.as_str(), cards::list(&s.base(header(&req, "host")))) {
                ("GET", Ok(list)) => HttpResponse::json(200, &list),
                ("GET", Err(e)) => HttpResponse::json(503, &json!({"error": e.message()})),
                _ => HttpResponse::json(405, &json!({"error": format!("{} is not allowed on /agents", req.method)})),
            };
        }
        let Some(rest) = path.strip_prefix("/agents/") else {
            return not_found(format!("no A2A endpoint at {}", req.path));
        };
        // `<id>`: JSON-RPC; `<id>/.well-known/agent-card.json`: the card; `<id>/rest/…`: HTTP+JSON.
        let (id, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let endpoint = match tail {
            "" => Endpoint::JsonRpc,
            CARD => Endpoint::Card,
            t if t == REST || t.starts_with("/rest/") => Endpoint::Rest(&t[REST.len()..]),
            _ => return not_found(format!("no A2A endpoint at {}", req.path)),
        };
        if id.is_empty() || id.len() > 128 {
            return not_found(format!("no A2A endpoint at {}", req.path));
        }
        let Some(agent) = cards::opted_in(id) else {
            return not_found(format!("no A2A agent {id} here"));
        };
        match (endpoint, req.method.as_str()) {
            (Endpoint::Card, "GET") => serve_card(&req, &cards::card(id, &agent, &s.base(header(&req, "host"))), &s),
            (Endpoint::JsonRpc, "POST") => match jsonrpc::parse(&req, s.max_request_bytes) {
                Ok(call) => methods::handle(id, call, &s),
                Err(refused) => refused,
            },
            (Endpoint::Rest(path), _) => rest::handle(id, &req, path, &s),
            (e, _) => {
                let mut r = HttpResponse::json(405, &json!({"error": format!("{} is not allowed on {}", req.method, req.path)}));
                r.headers.push(("allow".into(), if e == Endpoint::Card { "GET" } else { "POST" }.into()));
                r
            }
        }
    }
}

impl Extension for A2a {
    const ERRORS: ErrorRange = ERRORS;
    const METHODS: Methods = Methods::new(&[
        ("a2a/reply", agent::reply),
        ("a2a/task/update", agent::update),
        ("a2a/task/get", agent::get),
        ("a2a/publish", cards::publish),
        ("a2a/tasks", agent::list),
        ("a2a/send", outbound::send),
        ("a2a/remote/get", outbound::get),
    ]);

    fn describe() -> Describe {
        // Experimental (in no MAP registry): `x-a2a`, URI `x-a2a:1`.
        Describe::new("x-a2a", env!("CARGO_PKG_VERSION"))
            .capabilities(json!({"enabled": true, "protocolVersion": cards::PROTOCOL_VERSION}))
            .event_filter(EventFilter::new("a2a", "a2a.task.*").field("taskId", &["taskId"]).field("agentId", &["agentId"]).field("contextId", &["contextId"]))
    }
}

// The bridge keeps no memory between calls; its timers (stored by the
// host, fired once on any node) drive push deliveries and the following
// of remote tasks.
impl map_plugin_sdk::Lifecycle for A2a {
    fn init() -> std::result::Result<(), String> {
        Ok(())
    }

    fn on_timer(_timer: u64, tag: String) {
        if let Some(rest) = tag.strip_prefix(push::TIMER_PREFIX) {
            push::deliver(rest);
        } else if let Some(rest) = tag.strip_prefix(outbound::TIMER_PREFIX) {
            outbound::poll(rest);
        }
    }
}

map_plugin_sdk::export_http_service!(A2a);
