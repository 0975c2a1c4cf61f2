//! The MAMP bridge as a gateway plugin (world `http-service`): external
//! agent systems send `mamp/1.0` messages over HTTP to this tenant's MAP
//! agents (`agent://<domain>/<agent-id>`), and each MAMP conversation is
//! recorded as a mail conversation between the bridge and the agent.
//!
//! Served under the plugin's HTTP prefix (`/mamp`):
//! - `POST /v1/messages`: see [`inbound`];
//! - `GET /v1/card`: the gateway's own card;
//! - `GET /v1/agents/{id}/card`: an agent's card, if it published one ([`cards`]).
//!
//! MAP agents answer and start conversations with `mamp/send` ([`outbound`]).

mod cards;
// MAMP validation as a fuzz target (`fuzz/`), native only.
#[cfg(not(target_arch = "wasm32"))]
#[doc(hidden)]
pub mod fuzzing;
mod inbound;
mod message;
mod outbound;
mod reply;
mod repo;
mod settings;

use map_plugin_sdk::{Call, Describe, Error, ErrorRange, Extension, HttpHandler, HttpRequest, HttpResponse, Lifecycle, Methods, Reply, Result};
use serde::Deserialize;
use serde_json::json;

use reply::Refusal;
use settings::Settings;

/// An experimental extension's range (from 90000 up: MAMP is in no MAP registry).
const ERRORS: ErrorRange = ErrorRange::new(92000, 92999).with_storage_code(92999);
/// No MAMP conversation with that id (or mail conversation id).
const CONVERSATION_NOT_FOUND: i64 = ERRORS.code(92000);
/// The conversation belongs to another MAP agent.
const NOT_YOURS: i64 = ERRORS.code(92001);

struct Mamp;

impl HttpHandler for Mamp {
    fn handle(req: HttpRequest) -> HttpResponse {
        if let Some(id) = req.path.strip_prefix("/v1/agents/").and_then(|r| r.strip_suffix("/card")) {
            return match req.method.as_str() {
                "GET" => cards::card(id, &Settings::load()),
                _ => Refusal::new(405, "method_not_allowed", format!("{} is not allowed on {}", req.method, req.path)).response(),
            };
        }
        match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/v1/messages") => inbound::receive(&req),
            ("GET", "/v1/card") => card(),
            (_, "/v1/messages" | "/v1/card") => Refusal::new(405, "method_not_allowed", format!("{} is not allowed on {}", req.method, req.path)).response(),
            _ => Refusal::new(404, "not_found", format!("no MAMP endpoint at {}", req.path)).response(),
        }
    }
}

/// The gateway's own card: what it accepts on behalf of its agents.
fn card() -> HttpResponse {
    let s = Settings::load();
    HttpResponse::json(
        200,
        &json!({
            "protocol": message::PROTOCOL,
            "agent_id": format!("agent://{}/gateway", s.domain),
            "name": "map-gateway",
            "description": format!("MAMP bridge to the MAP agents of agent://{}/…", s.domain),
            "capabilities": {
                "content_types": ["text", "image", "code", "file"],
                "max_message_size": s.max_message_size,
                "streaming": false,
                "async": true,
                "tools": [],
            },
            "access": {"public": false, "allowed_agents": [], "require_auth": true},
        }),
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConversationParams {
    conversation_id: String,
}

/// `mamp/conversation {conversationId}`: the mapping of a MAMP conversation,
/// found by its MAMP id or its mail conversation id.
fn conversation(call: &Call) -> Result<Reply> {
    let p: ConversationParams = call.params()?;
    let id = match repo::BY_MAIL.get(&p.conversation_id)? {
        Some(mamp_id) => mamp_id,
        None => p.conversation_id.clone(),
    };
    let mapping = repo::CONVERSATIONS.get(&id)?.ok_or_else(|| {
        Error::new(CONVERSATION_NOT_FOUND, format!("No MAMP conversation {}", p.conversation_id)).with_details(json!({"conversationId": p.conversation_id}))
    })?;
    Reply::json(&json!({ "conversation": mapping }))
}

impl Extension for Mamp {
    const ERRORS: ErrorRange = ERRORS;
    const METHODS: Methods = Methods::new(&[("mamp/send", outbound::send), ("mamp/conversation", conversation)]);

    fn describe() -> Describe {
        // Experimental (in no MAP registry): `x-mamp`, URI `x-mamp:1`.
        Describe::new("x-mamp", env!("CARGO_PKG_VERSION")).capabilities(json!({"enabled": true, "domain": Settings::load().domain}))
    }
}

impl Lifecycle for Mamp {
    fn init() -> std::result::Result<(), String> {
        outbound::resume()
    }

    fn on_timer(timer: u64, tag: String) {
        outbound::retry(timer, &tag);
    }
}

map_plugin_sdk::export_http_service!(Mamp);
