//! The MAP mail extension as a gateway plugin (world `intercepting-extension`):
//! persistent conversations, participants, turns and threads on the host's
//! storage, the fifteen `mail/*` methods, `mail.*` events, turns recorded
//! from `map/send` messages that carry `meta.mail`, and observer clients
//! (`capabilities.mail.canObserve`) that watch without taking part.

wit_bindgen::generate!({ path: "../../wit", world: "intercepting-extension" });

mod access;
mod conversations;
mod error;
mod events;
mod ids;
mod intercept;
mod model;
mod params;
mod participants;
mod repo;
mod settings;
mod summary;
mod threads;
mod turns;

use exports::map_gateway::plugin::send_observer::{Guest as SendObserver, SentMessage};
use exports::map_gateway::plugin::rpc::{Descriptor, EventFilter, FilterField, Guest as Rpc};
use map_gateway::plugin::log::{self, Level};
use map_gateway::plugin::types::{Caller, RpcError};

use access::Actor;
use error::{MailError, MailResult};

/// A method: the caller and the raw params in, the JSON-RPC result out.
type Method = fn(&Actor, &str) -> MailResult<serde_json::Value>;

/// Every method, with the function serving it.
const METHODS: &[(&str, Method)] = &[
    ("mail/create", conversations::create),
    ("mail/get", conversations::get),
    ("mail/list", conversations::list),
    ("mail/close", conversations::close),
    ("mail/reopen", conversations::reopen),
    ("mail/join", participants::join),
    ("mail/leave", participants::leave),
    ("mail/invite", participants::invite),
    ("mail/presence", participants::presence),
    ("mail/turn", turns::record),
    ("mail/turns/list", turns::list),
    ("mail/thread/create", threads::create),
    ("mail/thread/list", threads::list),
    ("mail/summary", summary::summarize),
    ("mail/replay", turns::replay),
];

pub(crate) fn warn(message: &str) {
    log::log(Level::Warn, message);
}

pub(crate) fn debug(message: &str) {
    log::log(Level::Debug, message);
}

struct Mail;

impl Rpc for Mail {
    fn describe() -> Descriptor {
        Descriptor {
            name: "mail".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            uri: "urn:map:ext:mail:1".into(),
            capability_group: "mail".into(),
            // Described per tenant: a tenant's `enabled = false` shows at map/connect.
            capabilities: serde_json::json!({
                "enabled": settings::enabled(),
                "canCreate": true,
                "canJoin": true,
                "canInvite": true,
                "canViewHistory": true,
                "canCreateThreads": true,
                // Observer clients are admitted (they declare `canObserve: true`).
                "canObserve": settings::allow_observers(),
            })
            .to_string(),
            methods: METHODS.iter().map(|(m, _)| m.to_string()).collect(),
            error_range: (10000, 10999),
            // `map/subscribe {filter: {mail: {conversationId, threadId, participantId, contentType}}}`.
            event_filters: vec![EventFilter {
                key: "mail".into(),
                event_types: "mail.*".into(),
                fields: [
                    ("conversationId", &["conversationId", "conversation.id", "turn.conversationId"][..]),
                    ("threadId", &["turn.threadId", "thread.id", "threadId"][..]),
                    ("participantId", &["participant.id", "participantId", "turn.participant", "createdBy"][..]),
                    ("contentType", &["turn.contentType", "contentType"][..]),
                ]
                .iter()
                .map(|(name, paths)| FilterField { name: name.to_string(), paths: paths.iter().map(|p| p.to_string()).collect() })
                .collect(),
            }],
        }
    }

    fn handle(caller: Caller, method: String, params: String) -> Result<String, RpcError> {
        let outcome = match METHODS.iter().find(|(m, _)| *m == method) {
            None => Err(MailError::new(error::METHOD_NOT_FOUND, format!("Method not found: {method}"))),
            Some(_) if !settings::enabled() => Err(MailError::not_enabled()),
            Some((_, serve)) => serve(&Actor::from_caller(&caller), &params),
        };
        outcome.map(|v| v.to_string()).map_err(|e| RpcError { code: e.code, data: e.data().map(|d| d.to_string()), message: e.message })
    }
}

impl SendObserver for Mail {
    fn interest() -> Vec<String> {
        vec!["mail".into()]
    }

    fn on_send(caller: Caller, message: SentMessage) {
        if settings::enabled() {
            intercept::on_send(&caller, message);
        }
    }
}

export!(Mail);
