//! Logs and the trace exporter. Logs: `tracing` events on stderr, as text
//! or JSON lines (`telemetry.log_format`), filtered by `MAP_GATEWAY_LOG`.
//! Traces: the spans of `map_observe::telemetry`, turned into OpenTelemetry
//! spans by `tracing-opentelemetry` and exported over OTLP/HTTP by
//! `opentelemetry-otlp` when `telemetry.otlp_endpoint` is set.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Level;
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use map_config::TelemetryConfig;
use map_observe::telemetry::{self, TARGET};

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
    let filter = EnvFilter::try_from_env("MAP_GATEWAY_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn"))
        .add_directive(format!("{TARGET}=off").parse()?);
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
        telemetry::sample(config.sample_ratio);
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
