//! Logs and traces. Logs: `tracing` events on stderr, as text or JSON lines
//! (`telemetry.log_format`), filtered by `MAP_GATEWAY_LOG`. Traces: spans
//! of the target [`TARGET`] (one per JSON-RPC request, plugin call and
//! storage operation), turned into OpenTelemetry spans by
//! `tracing-opentelemetry` and exported over OTLP/HTTP by
//! `opentelemetry-otlp` when `telemetry.otlp_endpoint` is set. With no
//! endpoint those spans are never enabled: making one costs a cached check.
//!
//! Sampling is decided here, at the root (a request or an inbound HTTP or
//! gRPC call): a trace that is not kept makes no spans at all, so the cost
//! of tracing follows `sample_ratio`. A caller's `traceparent` decides for
//! its own trace (its sampled flag). Plugin calls and storage operations
//! are traced under a kept root only; those no request started (timers,
//! observers of sends) are not traced.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::field::Empty;
use tracing::{Level, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::config::TelemetryConfig;

/// The target of trace spans (kept out of the log lines).
pub const TARGET: &str = "map_trace";

/// The share of new traces kept, as a threshold on a random u32 (`u32::MAX`
/// + 1 = all), set once traces are configured.
static KEEP_BELOW: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

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

/// What must outlive serving: the trace exporter, flushed by `shutdown`.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Export the spans still buffered (at exit).
    pub fn shutdown(self) {
        if let Some(p) = self.provider {
            if let Err(e) = p.shutdown() {
                eprintln!("map-gateway: flushing traces failed: {e}");
            }
        }
    }
}

/// Install the process's logger and, when configured, the trace exporter.
/// Call outside any async runtime (the exporter runs its own thread).
pub fn init(config: &TelemetryConfig) -> anyhow::Result<Telemetry> {
    // PostgreSQL's notices ("relation already exists, skipping" at each start)
    // are not news to an operator: warnings only, unless asked for.
    let filter = EnvFilter::try_from_env("MAP_GATEWAY_LOG").unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn")).add_directive(format!("{TARGET}=off").parse()?);
    let stderr_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = match config.log_format.as_str() {
        "json" => tracing_subscriber::fmt::layer().json().with_current_span(false).with_writer(std::io::stderr).boxed(),
        // Colours only for a terminal, never into a log file.
        _ => tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(stderr_is_terminal).boxed(),
    };
    let provider = match config.otlp_endpoint.as_str() {
        "" => None,
        endpoint => Some(provider(config, endpoint)?),
    };
    if provider.is_some() {
        let _ = KEEP_BELOW.set((config.sample_ratio.clamp(0.0, 1.0) * 4_294_967_296.0) as u64);
    }
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("map-gateway"))
            .with_location(false)
            .with_threads(false)
            .with_filter(Targets::new().with_target(TARGET, Level::INFO))
    });
    // The NATS client traces each CONNECT it writes with the login in it:
    // its connection's trace events never reach the log, whatever the filter.
    let no_login = filter_fn(|meta| !(meta.target() == "async_nats::connection" && *meta.level() == Level::TRACE));
    tracing_subscriber::registry().with(logs.with_filter(filter.and(no_login))).with(traces).try_init()?;
    Ok(Telemetry { provider })
}

fn provider(config: &TelemetryConfig, endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    let protocol = match config.otlp_protocol.as_str() {
        "http/json" => Protocol::HttpJson,
        _ => Protocol::HttpBinary,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(OnOwnRuntime::start(EXPORT_TIMEOUT)?)
        .with_protocol(protocol)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        // A collector that is down delays nothing but its own export, and the exit by at most this.
        .with_timeout(EXPORT_TIMEOUT)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(config.service_name.clone()).build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        // Roots are sampled before their spans are made (see the module doc).
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource)
        .build())
}

/// How long an export may take; a collector that is down delays nothing
/// but its own export, and the exit by at most this.
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The exporter's HTTP client: hyper (already the gateway's HTTP stack) on
/// a one-thread runtime of its own, because the batch exporter polls its
/// futures on its own thread, outside any tokio runtime.
#[derive(Debug)]
struct OnOwnRuntime {
    client: opentelemetry_http::hyper::HyperClient,
    runtime: tokio::runtime::Handle,
}

impl OnOwnRuntime {
    fn start(timeout: std::time::Duration) -> anyhow::Result<OnOwnRuntime> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        // Lives as long as the process: its thread parks on a future that never ends.
        std::thread::Builder::new().name("otlp-http".into()).spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        Ok(OnOwnRuntime { client: opentelemetry_http::hyper::HyperClient::with_default_connector(timeout, None), runtime: handle })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OnOwnRuntime {
    async fn send_bytes(&self, request: http::Request<bytes::Bytes>) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        self.runtime.spawn(async move { client.send_bytes(request).await }).await?
    }
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
    let span = tracing::info_span!(target: TARGET, "inbound", otel.name = Empty, otel.kind = "server", map.transport = kind, url.path = path, map.tenant = tenant);
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
