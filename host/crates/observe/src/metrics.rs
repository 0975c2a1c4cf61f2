//! Operational metrics, served as Prometheus text at `GET /metrics`: the
//! `metrics` facade records, `metrics-exporter-prometheus` keeps and renders.
//! Labels stay bounded: transports, tenants and plugins from the
//! configuration, methods the gateway or a loaded plugin serves (anything
//! else is `unknown`), result codes and outcomes; never agent or session ids.
//! When `server.metrics` is off nothing is recorded (each call is one atomic
//! load); when on, recording allocates nothing once a label value was seen.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use parking_lot::RwLock;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static ON: AtomicBool = AtomicBool::new(false);

/// Latency buckets, 100 µs to 10 s.
const BUCKETS: &[f64] = &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Start recording (once per process).
pub fn install() -> anyhow::Result<()> {
    if HANDLE.get().is_none() {
        let handle = PrometheusBuilder::new().set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)?.install_recorder()?;
        let upkept = handle.clone();
        let _ = HANDLE.set(handle);
        describe();
        // Histogram samples pile up until drained into their buckets, which
        // otherwise happens only when /metrics is scraped: ~20 bytes per
        // message, without bound, on a gateway nobody scrapes. A thread of
        // its own, so that it outlives any one runtime.
        std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            upkept.run_upkeep();
        })?;
    }
    ON.store(true, Ordering::Relaxed);
    Ok(())
}

fn describe() {
    describe_gauge!("map_connections_open", "Connections open now, by transport");
    describe_counter!("map_connections_total", "Connections accepted, by transport");
    describe_gauge!("map_sessions_open", "MAP sessions open now, by tenant");
    describe_counter!("map_requests_total", "JSON-RPC requests answered, by method and code (ok or the JSON-RPC error code)");
    describe_histogram!("map_request_duration_seconds", Unit::Seconds, "Time from a request's frame to its answer, by method");
    describe_counter!("map_plugin_calls_total", "Calls into plugins, by plugin and outcome (ok, error, trap, timeout, out_of_memory, failed, busy)");
    describe_histogram!("map_plugin_call_duration_seconds", Unit::Seconds, "Time of a plugin call, by plugin");
    describe_histogram!("map_store_op_duration_seconds", Unit::Seconds, "Time of a storage operation, by operation and backend");
    describe_counter!("map_messages_delivered_total", "map/send deliveries made, by tenant (one per recipient)");
    describe_counter!("map_messages_undelivered_total", "map/send recipients whose queue was full or gone, by tenant");
    describe_counter!("map_outbox_full_total", "Frames refused because a session's outgoing queue was full");
    describe_counter!("map_sends_refused_total", "map/send calls refused before delivery, by reason (event_backlog: the cluster's event log is behind)");
    describe_gauge!("map_plugin_instances_live", "Plugin instances alive now (running or ready), all tenants and plugins");
    describe_gauge!("map_plugin_instances_max", "The engine's room for instances (server.max_instances)");
    describe_gauge!("map_event_log_events", "Events held in the replay log, by tenant");
    describe_gauge!("map_event_log_bytes", Unit::Bytes, "Approximate bytes held in the replay log, by tenant");
    describe_gauge!("map_store_cache_bytes", Unit::Bytes, "Bytes held by the SQLite store's read cache (at most storage.cache_mb)");
}

fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// A label value as `&'static str`, so that recording allocates nothing.
/// Label values are bounded (see above), so what is kept stays small.
fn label(value: &str) -> &'static str {
    // A copy per thread in front of the shared set: recording takes no lock.
    thread_local! {
        static NEAR: std::cell::RefCell<foldhash::HashMap<Box<str>, &'static str>> = Default::default();
    }
    if let Some(v) = NEAR.with(|n| n.borrow().get(value).copied()) {
        return v;
    }
    let v = shared_label(value);
    NEAR.with(|n| n.borrow_mut().insert(value.into(), v));
    v
}

fn shared_label(value: &str) -> &'static str {
    static KEPT: OnceLock<RwLock<HashSet<&'static str>>> = OnceLock::new();
    let kept = KEPT.get_or_init(Default::default);
    if let Some(v) = kept.read().get(value) {
        return v;
    }
    let mut kept = kept.write();
    match kept.get(value) {
        Some(v) => v,
        None => {
            let v: &'static str = Box::leak(value.to_owned().into_boxed_str());
            kept.insert(v);
            v
        }
    }
}

fn code_label(code: i64) -> &'static str {
    match code {
        0 => "ok",
        c => label(itoa::Buffer::new().format(c)),
    }
}

type Sampler = Box<dyn Fn() + Send + Sync>;

/// Gauges read when scraped rather than kept up to date.
static SAMPLERS: RwLock<Vec<Sampler>> = RwLock::new(Vec::new());

/// Run `sample` before each rendering (it sets gauges).
pub fn sample_on_scrape(sample: impl Fn() + Send + Sync + 'static) {
    SAMPLERS.write().push(Box::new(sample));
}

/// The text exposition, or `None` when metrics are off.
pub fn render() -> Option<String> {
    if !on() {
        return None;
    }
    for sample in SAMPLERS.read().iter() {
        sample();
    }
    HANDLE.get().map(PrometheusHandle::render)
}

/// A connection, counted as open while this is held.
pub struct Connection(&'static str);

impl Drop for Connection {
    fn drop(&mut self) {
        if on() {
            gauge!("map_connections_open", "transport" => self.0).decrement(1.0);
        }
    }
}

pub fn connection(transport: &'static str) -> Connection {
    if on() {
        gauge!("map_connections_open", "transport" => transport).increment(1.0);
        counter!("map_connections_total", "transport" => transport).increment(1);
    }
    Connection(transport)
}

/// A session of `tenant` opened (`+1`) or ended (`-1`).
pub fn session(tenant: &str, delta: f64) {
    if on() {
        gauge!("map_sessions_open", "tenant" => label(tenant)).increment(delta);
    }
}

/// A request answered: `code` 0 for a result, else its error code.
pub fn request(method: &str, code: i64, took: Duration) {
    if !on() {
        return;
    }
    let method = label(method);
    // The handles of each (method, code) are looked up once per thread:
    // the registry's lookup by name and labels costs more than recording.
    thread_local! {
        static HANDLES: std::cell::RefCell<foldhash::HashMap<(usize, i64), (metrics::Counter, metrics::Histogram)>> = Default::default();
    }
    HANDLES.with(|h| {
        let mut h = h.borrow_mut();
        let (count, time) = h.entry((method.as_ptr() as usize, code)).or_insert_with(|| {
            (counter!("map_requests_total", "method" => method, "code" => code_label(code)), histogram!("map_request_duration_seconds", "method" => method))
        });
        count.increment(1);
        time.record(took.as_secs_f64());
    });
}

/// A plugin call ended with `outcome`.
pub fn plugin_call(plugin: &str, outcome: &'static str, took: Duration) {
    if !on() {
        return;
    }
    let plugin = label(plugin);
    // As for requests: the registry's lookup costs more than recording.
    thread_local! {
        static HANDLES: std::cell::RefCell<foldhash::HashMap<(usize, &'static str), (metrics::Counter, metrics::Histogram)>> = Default::default();
    }
    HANDLES.with(|h| {
        let mut h = h.borrow_mut();
        let (count, time) = h.entry((plugin.as_ptr() as usize, outcome)).or_insert_with(|| {
            (counter!("map_plugin_calls_total", "plugin" => plugin, "outcome" => outcome), histogram!("map_plugin_call_duration_seconds", "plugin" => plugin))
        });
        count.increment(1);
        time.record(took.as_secs_f64());
    });
}

/// One `map/send`: recipients reached and not.
pub fn messages(tenant: &str, delivered: usize, undelivered: usize) {
    if !on() {
        return;
    }
    let tenant = label(tenant);
    thread_local! {
        static DELIVERED: std::cell::RefCell<foldhash::HashMap<usize, metrics::Counter>> = Default::default();
    }
    DELIVERED.with(|d| {
        let mut d = d.borrow_mut();
        let c = d.entry(tenant.as_ptr() as usize).or_insert_with(|| counter!("map_messages_delivered_total", "tenant" => tenant));
        c.increment(delivered as u64);
    });
    if undelivered > 0 {
        counter!("map_messages_undelivered_total", "tenant" => tenant).increment(undelivered as u64);
    }
}

/// A `map/send` refused before delivery, and why.
pub fn sends_refused(reason: &'static str) {
    if on() {
        counter!("map_sends_refused_total", "reason" => reason).increment(1);
    }
}

/// A frame refused by a full outgoing queue.
pub fn outbox_full() {
    if on() {
        counter!("map_outbox_full_total").increment(1);
    }
}

/// Plugin instances alive (running or ready), out of the engine's room for them.
pub fn instances(live: usize, max: usize) {
    if on() {
        gauge!("map_plugin_instances_live").set(live as f64);
        gauge!("map_plugin_instances_max").set(max as f64);
    }
}

/// The replay log of `tenant` holds this many events and about this many bytes.
pub fn event_log(tenant: &str, events: usize, bytes: usize) {
    if on() {
        let tenant = label(tenant);
        gauge!("map_event_log_events", "tenant" => tenant).set(events as f64);
        gauge!("map_event_log_bytes", "tenant" => tenant).set(bytes as f64);
    }
}

/// The SQLite store's read cache holds this many bytes (bounded by `storage.cache_mb`).
pub fn store_cache(bytes: usize) {
    if on() {
        gauge!("map_store_cache_bytes").set(bytes as f64);
    }
}

/// A storage operation took this long.
pub fn store_op(op: &'static str, backend: &'static str, took: Duration) {
    if !on() {
        return;
    }
    // As for requests: a mail turn makes three store calls, and the
    // registry's lookup costs more than recording.
    thread_local! {
        static HANDLES: std::cell::RefCell<foldhash::HashMap<(&'static str, &'static str), metrics::Histogram>> = Default::default();
    }
    HANDLES.with(|h| {
        h.borrow_mut()
            .entry((op, backend))
            .or_insert_with(|| histogram!("map_store_op_duration_seconds", "op" => op, "backend" => backend))
            .record(took.as_secs_f64());
    });
}

/// A plugin's own series (the `metrics` import): a counter increment or a gauge value.
pub enum PluginSample {
    Counter(u64),
    Gauge(f64),
}

/// Series each (tenant, plugin) may make.
const PLUGIN_SERIES: usize = 256;

/// What one (tenant, plugin) has made: its series (name and labels) and
/// whether each name is a counter.
#[derive(Default)]
struct PluginSeries {
    series: HashSet<String>,
    kinds: std::collections::HashMap<String, bool>,
}

static PLUGIN_SERIES_MADE: OnceLock<parking_lot::Mutex<std::collections::HashMap<(String, String), PluginSeries>>> = OnceLock::new();
const PLUGIN_LABELS: usize = 4;

fn metric_name_ok(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.as_bytes()[0].is_ascii_lowercase() && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Record a plugin's sample as `map_plugin_<name>{tenant, plugin, labels…}`,
/// within the limits the WIT `metrics` interface states.
pub fn plugin_sample(tenant: &str, plugin: &str, name: &str, labels: &[(String, String)], sample: PluginSample) -> Result<(), String> {
    if !metric_name_ok(name) {
        return Err(format!("metric name {name:?}: 1 to 64 of a-z, 0-9 and _, starting with a letter"));
    }
    if labels.len() > PLUGIN_LABELS {
        return Err(format!("at most {PLUGIN_LABELS} labels"));
    }
    for (k, v) in labels {
        if !metric_name_ok(k) || k == "tenant" || k == "plugin" {
            return Err(format!("label key {k:?}: 1 to 64 of a-z, 0-9 and _, starting with a letter; not tenant or plugin"));
        }
        if v.len() > 64 {
            return Err(format!("label {k}: values are at most 64 bytes"));
        }
    }
    if labels.iter().enumerate().any(|(i, (k, _))| labels[..i].iter().any(|(k2, _)| k2 == k)) {
        return Err("a label key is given twice".into());
    }
    if !on() {
        return Ok(());
    }
    let is_counter = matches!(sample, PluginSample::Counter(_));
    let mut key = String::from(name);
    for (k, v) in labels {
        key.push('\0');
        key.push_str(k);
        key.push('=');
        key.push_str(v);
    }
    {
        let mut all = PLUGIN_SERIES_MADE.get_or_init(Default::default).lock();
        let mine = all.entry((tenant.to_string(), plugin.to_string())).or_default();
        match mine.kinds.get(name) {
            Some(&kind) if kind != is_counter => return Err(format!("{name} is a {} already", if kind { "counter" } else { "gauge" })),
            _ => {}
        }
        if !mine.series.contains(&key) {
            if mine.series.len() >= PLUGIN_SERIES {
                return Err(format!("this plugin has {PLUGIN_SERIES} series in this tenant already; no more are made"));
            }
            mine.series.insert(key);
            mine.kinds.entry(name.to_string()).or_insert(is_counter);
        }
    }
    let mut all_labels = vec![metrics::Label::new("tenant", label(tenant)), metrics::Label::new("plugin", label(plugin))];
    all_labels.extend(labels.iter().map(|(k, v)| metrics::Label::new(k.clone(), v.clone())));
    let name = format!("map_plugin_{name}");
    match sample {
        PluginSample::Counter(n) => counter!(name, all_labels).increment(n),
        PluginSample::Gauge(v) => gauge!(name, all_labels).set(v),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_samples_are_checked_and_bounded() {
        install().unwrap();
        let l = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert!(plugin_sample("t", "p", "jobs_total", &[l("status", "done")], PluginSample::Counter(2)).is_ok());
        assert!(plugin_sample("t", "p", "Jobs", &[], PluginSample::Counter(1)).is_err());
        assert!(plugin_sample("t", "p", "jobs_total", &[l("tenant", "other")], PluginSample::Counter(1)).is_err());
        assert!(plugin_sample("t", "p", "jobs_total", &[l("a", "1"), l("a", "2")], PluginSample::Counter(1)).is_err());
        assert!(plugin_sample("t", "p", "jobs_total", &[l("status", &"x".repeat(65))], PluginSample::Counter(1)).is_err());
        assert!(plugin_sample("t", "p", "jobs_total", &[], PluginSample::Gauge(1.0)).is_err(), "a counter stays a counter");
        for i in 0..PLUGIN_SERIES - 1 {
            plugin_sample("t", "p", "queue", &[l("n", &i.to_string())], PluginSample::Gauge(i as f64)).unwrap();
        }
        let refused = plugin_sample("t", "p", "queue", &[l("n", "one-too-many")], PluginSample::Gauge(0.0));
        assert!(refused.unwrap_err().contains("256 series"));
        assert!(plugin_sample("t", "p", "queue", &[l("n", "3")], PluginSample::Gauge(7.0)).is_ok(), "existing series keep working");
        assert!(plugin_sample("t2", "p", "queue", &[l("n", "new")], PluginSample::Gauge(0.0)).is_ok(), "another tenant has its own room");
        let text = render().unwrap();
        assert!(text.contains(r#"map_plugin_jobs_total{tenant="t",plugin="p",status="done"} 2"#), "{text}");
    }
}
