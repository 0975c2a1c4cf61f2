//! The tracing spans of every layer: one per JSON-RPC request, plugin call
//! and storage operation, of the target [`TARGET`] (kept out of the log
//! lines). The binary installs the logger and the OTLP exporter
//! (`map-gateway`'s `telemetry`) and turns sampling on with [`sample`]; until
//! then no span is ever enabled: making one costs a cached check.
//!
//! Sampling is decided here, at the root (a request or an inbound HTTP or
//! gRPC call): a trace that is not kept makes no spans at all, so the cost
//! of tracing follows the sample ratio. A caller's `traceparent` decides for
//! its own trace (its sampled flag). Plugin calls and storage operations
//! are traced under a kept root only; those no request started (timers,
//! observers of sends) are not traced.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of trace spans (kept out of the log lines).
pub const TARGET: &str = "map_trace";

/// The share of new traces kept, as a threshold on a random u32 (`u32::MAX`
/// + 1 = all), set once traces are configured.
static KEEP_BELOW: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Keep this share of new traces (0 to 1) from now on; called once, when an
/// exporter is installed.
pub fn sample(ratio: f64) {
    let _ = KEEP_BELOW.set((ratio.clamp(0.0, 1.0) * 4_294_967_296.0) as u64);
}

/// Whether a new trace is kept: a draw from a per-thread xorshift seeded from the OS.
fn keep_new_trace() -> bool {
    let Some(&below) = KEEP_BELOW.get() else { return false };
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new({
            let mut b = [0u8; 8];
            let _ = getrandom::fill(&mut b);
            u64::from_le_bytes(b) | 1
        });
    }
    let draw = STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x >> 32
    });
    draw < below
}

/// A W3C `traceparent`'s sampled flag (`None` when the header is malformed).
fn parent_sampled(traceparent: &str) -> Option<bool> {
    let flags = traceparent.trim().rsplit('-').next()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    (traceparent.len() >= 55).then_some(flags & 1 == 1)
}

/// A W3C `traceparent` (and `tracestate`) as the propagator reads them.
struct TraceHeaders<'a> {
    parent: &'a str,
    state: Option<&'a str>,
}

impl Extractor for TraceHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(self.parent),
            "tracestate" => self.state,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Whether a root (a request, an inbound call) is traced: the caller's
/// sampled flag when it sent a valid `traceparent`, else a draw at `sample_ratio`.
fn keep_root(parent: Option<&str>) -> bool {
    KEEP_BELOW.get().is_some() && parent.and_then(parent_sampled).unwrap_or_else(keep_new_trace)
}

/// Continue the caller's trace, when it sent a valid `traceparent`.
fn continue_trace(span: &Span, parent: Option<&str>, state: Option<&str>) {
    if let (Some(parent), false) = (parent, span.is_disabled()) {
        let cx = TraceContextPropagator::new().extract(&TraceHeaders { parent, state });
        let _ = span.set_parent(cx);
    }
}

/// The span of one JSON-RPC request (none when its trace is not kept),
/// under the caller's `traceparent` when one came with it.
pub fn request(method: &str, tenant: &str, parent: Option<&str>, state: Option<&str>) -> Span {
    if !keep_root(parent) {
        return Span::none();
    }
    let span = tracing::info_span!(target: TARGET, "rpc", otel.name = method, otel.kind = "server", otel.status_code = Empty,
        rpc.system = "jsonrpc", rpc.method = method, rpc.jsonrpc.error_code = Empty, map.tenant = tenant);
    continue_trace(&span, parent, state);
    span
}

/// The request was answered: `code` 0 for a result, else its error code.
pub fn answered(span: &Span, code: i64) {
    if !span.is_disabled() {
        span.record("rpc.jsonrpc.error_code", code);
        if code != 0 {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// The span of one call into a plugin (`what`: rpc, http, grpc, observe, timer).
pub fn plugin_call(plugin: &str, tenant: &str, what: &'static str) -> Span {
    if KEEP_BELOW.get().is_none() || Span::current().is_none() {
        return Span::none();
    }
    let span = tracing::info_span!(target: TARGET, "plugin", otel.name = Empty, otel.status_code = Empty, map.plugin = plugin, map.tenant = tenant, map.call = what, map.outcome = Empty);
    if !span.is_disabled() {
        span.record("otel.name", format!("plugin {plugin} {what}"));
    }
    span
}

/// How a plugin call ended (`ok`, `error`, `trap`, `timeout`, ...).
pub fn plugin_outcome(span: &Span, outcome: &'static str) {
    if !span.is_disabled() {
        span.record("map.outcome", outcome);
        if outcome != "ok" {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// The span of one storage operation.
pub fn store_op(op: &'static str, backend: &'static str) -> Span {
    if KEEP_BELOW.get().is_none() || Span::current().is_none() {
        return Span::none();
    }
    let span = tracing::info_span!(target: TARGET, "store", otel.name = Empty, db.system = backend, db.operation = op);
    if !span.is_disabled() {
        span.record("otel.name", format!("store {op}"));
    }
    span
}

/// The span of an HTTP request to a plugin's prefix or of a gRPC call
/// (none when its trace is not kept), under the caller's `traceparent`.
pub fn inbound(kind: &'static str, path: &str, tenant: &str, parent: Option<&str>, state: Option<&str>) -> Span {
    if !keep_root(parent) {
        return Span::none();
    }
    let span =
        tracing::info_span!(target: TARGET, "inbound", otel.name = Empty, otel.kind = "server", map.transport = kind, url.path = path, map.tenant = tenant);
    if !span.is_disabled() {
        span.record("otel.name", format!("{kind} {path}"));
    }
    continue_trace(&span, parent, state);
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_decides_for_its_own_trace() {
        assert_eq!(parent_sampled("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), Some(true));
        assert_eq!(parent_sampled("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"), Some(false));
        assert_eq!(parent_sampled("00-zzzz-not-a-trace-01"), None);
        assert_eq!(parent_sampled("garbage"), None);
    }
}
