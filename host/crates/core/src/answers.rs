//! A request's answer on the wire, and its count in the metrics and its trace.

use std::time::Instant;

use serde_json::Value;

use super::Out;
use map_protocol::rpc::{self, RpcError};

/// The method label of requests nobody serves (labels stay bounded).
const UNKNOWN_METHOD: &str = "unknown";

/// Count a request; a method not found is `unknown` whatever its name
/// (nobody serves it, so its name would be an unbounded label).
pub(super) fn record(method: &str, result: &Result<Out, RpcError>, started: Instant, span: &tracing::Span) {
    record_code(method, result.as_ref().err().map_or(0, |e| e.code), started, span);
}

pub(super) fn record_code(method: &str, code: i64, started: Instant, span: &tracing::Span) {
    let method = if code == rpc::codes::METHOD_NOT_FOUND { UNKNOWN_METHOD } else { method };
    map_observe::metrics::request(method, code, started.elapsed());
    map_observe::telemetry::answered(span, code);
}

/// A request's answer; notifications (no id) get none.
pub(super) fn answer(id: Option<Value>, result: Result<Out, RpcError>) -> Option<String> {
    let id = id?;
    Some(match result {
        Ok(Out::Json(v)) => rpc::encode_result(&id, &v),
        Ok(Out::Raw(raw)) => rpc::encode_result_json(&id, raw.get()),
        Ok(Out::Text(text)) => rpc::encode_result_json(&id, &text),
        // Awaited before it comes here (`start`).
        Ok(Out::Later(_)) => rpc::encode_error(&id, &RpcError::internal("an answer was not awaited")),
        Err(e) => rpc::encode_error(&id, &e),
    })
}
