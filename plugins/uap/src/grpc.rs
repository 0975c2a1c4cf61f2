//! The `uap.v1.AgentHub` service: agents `Register`, wait for work on
//! `Listen`, and run accepted sessions on `Execute` / `Translate`.

use map_plugin_sdk::grpc::{CallInfo, Method, Service, Status};
use map_plugin_sdk::{ids, log};
use prost::Message;
use serde_json::json;

use crate::hub::{self, code, status, Hub, Report, Stream};
use crate::model::{offer, Agent, Kind};
use crate::proto;
use crate::repo::{self, AGENTS};
use crate::values;

pub const SERVICE: &str = "uap.v1.AgentHub";

/// `Register` is unary: answered in one callback (`grpc-unary`).
pub const REGISTER: &str = "/uap.v1.AgentHub/Register";

pub fn services() -> Vec<Service> {
    let method = |name: &str, streaming: bool| Method { name: name.into(), client_streaming: streaming, server_streaming: streaming };
    vec![Service { name: SERVICE.into(), methods: vec![method("Register", false), method("Listen", true), method("Execute", true), method("Translate", true)] }]
}

/// Run `f` on the hub; a failure to settle an earlier instance's state is INTERNAL.
fn on_hub<R>(f: impl FnOnce(&mut Hub) -> Result<R, Status>) -> Result<R, Status> {
    hub::with(f).map_err(|e| status(code::INTERNAL, format!("the hub could not start: {}", e.message())))?
}

fn internal(e: map_plugin_sdk::Error) -> Status {
    status(code::INTERNAL, format!("the hub's storage failed: {}", e.message()))
}

fn metadata<'a>(call: &'a CallInfo, key: &str) -> Option<&'a str> {
    call.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
}

pub fn open(call: CallInfo) -> Result<(), Status> {
    let method = call.path.rsplit('/').next().unwrap_or_default();
    match method {
        "Listen" => {
            let id = metadata(&call, "x-client-id").ok_or_else(|| status(code::NOT_FOUND, "Listen needs the x-client-id metadata that Register issued"))?;
            let agent = AGENTS.get(id).map_err(internal)?.ok_or_else(|| status(code::NOT_FOUND, format!("unknown client id {id:?}: Register first")))?;
            on_hub(|h| h.listen(call.id, agent).map_err(internal))
        }
        "Execute" | "Translate" => {
            let kind = if method == "Execute" { Kind::Test } else { Kind::Translation };
            let session = metadata(&call, "x-session-id")
                .ok_or_else(|| status(code::NOT_FOUND, format!("{method} needs the x-session-id metadata of an accepted session")))?;
            on_hub(|h| h.run(call.id, kind, session))
        }
        _ => Err(status(12, format!("{} is not a method of {SERVICE}", call.path))),
    }
}

pub fn message(call: u64, body: Vec<u8>) -> Result<(), Status> {
    on_hub(|h| match h.stream(call) {
        // This instance did not open the call: an earlier one did and is gone.
        None => Err(status(code::UNAVAILABLE, "the hub restarted; open the stream again")),
        Some(Stream::Listen { agent }) => h.listen_message(&agent, &body),
        Some(Stream::Run { session }) => {
            let report = decode_report(h, &session, &body)?;
            match h.report(&session, report).map_err(internal)? {
                None => Ok(()),
                Some(refused) => Err(refused),
            }
        }
    })
}

pub fn half_close(call: u64) -> Result<(), Status> {
    on_hub(|h| match h.stream(call) {
        None => Ok(()),
        // The agent sends nothing more, but still receives proposals.
        Some(Stream::Listen { .. }) => Ok(()),
        Some(Stream::Run { session }) => Err(h.ended_early(&session).map_err(internal)?),
    })
}

pub fn closed(call: u64) {
    match hub::with(|h| h.closed(call)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) | Err(e) => log::error(&format!("gRPC call {call} closed, but the hub could not record it: {}", e.message())),
    }
}

/// An `AgentRegistration` whose every capability offers a kind of job.
pub fn registration(body: &[u8]) -> Result<proto::AgentRegistration, Status> {
    let reg = proto::AgentRegistration::decode(body).map_err(|e| status(code::INVALID_ARGUMENT, format!("undecodable AgentRegistration: {e}")))?;
    for (i, c) in reg.capabilities.iter().enumerate() {
        match offer(c) {
            None => return Err(status(code::INVALID_ARGUMENT, format!("capabilities[{i}] sets neither `test` nor `translation`"))),
            Some((_, "")) => return Err(status(code::INVALID_ARGUMENT, format!("capabilities[{i}] has no type"))),
            Some(_) => {}
        }
    }
    Ok(reg)
}

/// `Register`: the agent's client id, which `Listen` names it by.
pub fn register(body: &[u8]) -> Result<Vec<u8>, Status> {
    let reg = registration(body)?;
    let capabilities = reg.capabilities.iter().map(|c| serde_json::to_value(c).unwrap_or_default()).collect();
    // A ULID's time and 80 random bits, and 80 more: the id lets its holder take the agent's work.
    let client_id = format!("agent-{}{}", ids::ulid(), &ids::ulid()[10..]);
    let agent = Agent { client_id: client_id.clone(), display_name: reg.display_name, capabilities, registered_at: repo::now() };
    AGENTS.put(&client_id, &agent).map_err(internal)?;
    map_plugin_sdk::events::emit(
        "uap.agent.registered",
        &json!({"clientId": client_id, "displayName": agent.display_name, "capabilities": agent.capabilities}),
    );
    Ok(proto::AgentRegistrationResponse { client_id }.encode_to_vec())
}

fn decode_report(h: &Hub, session: &str, body: &[u8]) -> Result<Report, Status> {
    match h.session_kind(session) {
        Some(kind) => report(kind, body),
        None => Err(status(code::NOT_FOUND, format!("session {session} is over"))),
    }
}

/// What an agent reports in a session of `kind`: its status, telemetry or result.
pub fn report(kind: Kind, body: &[u8]) -> Result<Report, Status> {
    let bad = |what: &str, e: prost::DecodeError| status(code::INVALID_ARGUMENT, format!("undecodable {what}: {e}"));
    match kind {
        Kind::Test => {
            use proto::test_response::Event;
            let r = proto::TestResponse::decode(body).map_err(|e| bad("TestResponse", e))?;
            match r.event {
                None => Err(status(code::INVALID_ARGUMENT, "a TestResponse needs status, telemetry or result")),
                Some(Event::Status(s)) => Ok(Report::Status { state: test_state(s.state).as_str_name().into(), message: s.message }),
                Some(Event::Telemetry(t)) => Ok(Report::Telemetry(json("telemetry", &t)?)),
                Some(Event::Result(res)) => {
                    let st = res.status.clone().unwrap_or_default();
                    let passed = !matches!(test_state(st.state), proto::TestState::Failed | proto::TestState::Invalid);
                    Ok(Report::Result { passed, message: st.message, result: json("result", &res)? })
                }
            }
        }
        Kind::Translation => {
            use proto::translation_response::Event;
            let r = proto::TranslationResponse::decode(body).map_err(|e| bad("TranslationResponse", e))?;
            match r.event {
                None => Err(status(code::INVALID_ARGUMENT, "a TranslationResponse needs status, telemetry or result")),
                Some(Event::Status(s)) => Ok(Report::Status { state: translation_state(s.state).as_str_name().into(), message: s.message }),
                Some(Event::Telemetry(t)) => Ok(Report::Telemetry(json("telemetry", &t)?)),
                Some(Event::Result(res)) => {
                    let st = res.status.clone().unwrap_or_default();
                    let passed = !matches!(translation_state(st.state), proto::TranslationState::Failed | proto::TranslationState::Invalid);
                    Ok(Report::Result { passed, message: st.message, result: json("result", &res)? })
                }
            }
        }
    }
}

fn test_state(n: i32) -> proto::TestState {
    proto::TestState::try_from(n).unwrap_or(proto::TestState::Unspecified)
}

fn translation_state(n: i32) -> proto::TranslationState {
    proto::TranslationState::try_from(n).unwrap_or(proto::TranslationState::Unspecified)
}

/// A message as its proto3 JSON; one JSON cannot carry (a NaN in a Struct) is INVALID_ARGUMENT.
fn json<T: serde::Serialize>(what: &str, message: &T) -> Result<serde_json::Value, Status> {
    values::to_json(message).map_err(|e| status(code::INVALID_ARGUMENT, format!("the {what} has no JSON form: {e}")))
}
