//! The MAP mail extension as a gateway plugin (world `intercepting-extension`):
//! persistent conversations, participants, turns and threads on the host's
//! storage, the fifteen `mail/*` methods, `mail.*` events, the
//! `mail/turn.received` notification to participants' sessions that declared
//! `capabilities.mail`, turns recorded from `map/send` messages that carry
//! `meta.mail`, observer clients (`capabilities.mail.canObserve`) that watch
//! without taking part, and conversations as resources of the type
//! `x-mail/conversation` (`map/resources/*`, `resources`).

mod access;
mod conversations;
mod digest;
mod error;
mod events;
mod intercept;
mod model;
mod params;
mod participants;
mod received;
mod repo;
mod resources;
mod settings;
mod summary;
mod threads;
mod turns;

use map_plugin_sdk::{Call, Caller, Describe, ErrorRange, EventFilter, Extension, Methods, Observer, Reply, Result, SentMessage};

struct Mail;

impl Extension for Mail {
    const ERRORS: ErrorRange = error::ERRORS;
    const METHODS: Methods = Methods::new(&[
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
    ]);

    fn describe() -> Describe {
        Describe::new("mail", env!("CARGO_PKG_VERSION"))
            // Mail v1.1: mail/reopen, mail/presence and mail/turn.received.
            .protocol_version("1.1.0")
            // Described per tenant: a tenant's `enabled = false` shows at map/connect.
            .capabilities(serde_json::json!({
                "enabled": settings::enabled(),
                "canCreate": true,
                "canJoin": true,
                "canInvite": true,
                "canViewHistory": true,
                "canCreateThreads": true,
                // Observer clients are admitted (they declare `canObserve: true`).
                "canObserve": settings::allow_observers(),
            }))
            // `map/subscribe {filter: {mail: {conversationId, threadId, participantId, contentType}}}`.
            .event_filter(
                EventFilter::new("mail", "mail.*")
                    .field("conversationId", &["conversationId", "conversation.id", "turn.conversationId"])
                    .field("threadId", &["turn.threadId", "thread.id", "threadId"])
                    .field("participantId", &["participant.id", "participantId", "turn.participant", "createdBy"])
                    .field("contentType", &["turn.contentType", "contentType"]),
            )
    }

    /// An unknown method is -32601 even where mail is off; a known one is
    /// 10010 there.
    fn handle(call: &Call) -> Result<Reply> {
        if Self::METHODS.contains(call.method) && !settings::enabled() {
            return Err(error::not_enabled());
        }
        Self::METHODS.dispatch(call)
    }
}

impl Observer for Mail {
    fn interest() -> Vec<String> {
        vec!["mail".into()]
    }

    fn on_send(caller: &Caller, message: SentMessage) {
        if settings::enabled() {
            intercept::on_send(caller, message);
        }
    }
}

use resources::ConversationResources;

map_plugin_sdk::export_intercepting_extension!(Mail);
map_plugin_sdk::export_resources!(ConversationResources);
