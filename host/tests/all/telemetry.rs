//! Traces and structured logs against the real binary: an OTLP/HTTP
//! collector in the test receives the spans of a `mail/turn` made over HTTP
//! with a W3C `traceparent`, and the log lines are JSON objects. The tests
//! run on two threads: the collector answers while a test waits for the
//! gateway to exit (which is when it flushes its spans).

use crate::common;

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{json, Value};

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

/// An OTLP/HTTP (JSON) trace receiver: every span it was sent.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Value>>>);

impl Collector {
    async fn start(&self) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = self.0.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let spans = spans.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let spans = spans.clone();
                        async move {
                            assert_eq!(req.uri().path(), "/v1/traces");
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let export: Value = serde_json::from_slice(&body).expect("OTLP/JSON");
                            let found = export["resourceSpans"].as_array().into_iter().flatten().flat_map(|r| {
                                let service = service_name(r);
                                r["scopeSpans"].as_array().into_iter().flatten().flat_map(move |s| {
                                    let service = service.clone();
                                    s["spans"].as_array().cloned().unwrap_or_default().into_iter().map(move |mut span| {
                                        span["service"] = json!(service);
                                        span
                                    })
                                })
                            });
                            spans.lock().unwrap().extend(found);
                            let mut resp = Response::new(Full::new(Bytes::from_static(b"{}")));
                            resp.headers_mut().insert("content-type", "application/json".parse().unwrap());
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                });
            }
        });
        port
    }

    fn spans(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }
}

fn service_name(resource_spans: &Value) -> String {
    let attrs = resource_spans["resource"]["attributes"].as_array().cloned().unwrap_or_default();
    attrs.iter().find(|a| a["key"] == "service.name").and_then(|a| a["value"]["stringValue"].as_str()).unwrap_or_default().to_string()
}

/// A span attribute as text (OTLP/JSON puts integers in strings or numbers).
fn attr(span: &Value, key: &str) -> Option<String> {
    let a = span["attributes"].as_array()?.iter().find(|a| a["key"] == key)?;
    let v = &a["value"];
    v["stringValue"]
        .as_str()
        .map(str::to_string)
        .or_else(|| v["intValue"].as_str().map(str::to_string))
        .or_else(|| v["intValue"].as_i64().map(|n| n.to_string()))
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_turn_is_one_trace_from_the_request_through_the_plugin_to_the_store() {
    let collector = Collector::default();
    let port = collector.start().await;
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    assert!(dist.join("mail.wasm").exists(), "run scripts/build-plugins.sh");
    let extra = format!(
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\notlp_protocol = \"http/json\"\nlog_format = \"json\"\nservice_name = \"gw-under-test\"\n[[tenants]]\nid = \"default\"\n"
    );
    let mut gw = Gateway::start_config(&format!("plugin_dir = {dist:?}\nmax_message_bytes = 65536"), &extra);

    let hello = post_rpc(&gw.addr(), None, &request(1, "map/connect", json!({"protocolVersion": 1, "participantType": "agent", "name": "tracer"}))).await;
    let session = hello.header("map-session-id").expect("a session header").to_string();
    let created = post_rpc(&gw.addr(), Some(&session), &request(2, "mail/create", json!({"subject": "traced"}))).await.json();
    let conversation = ok(&created)["conversation"]["id"].as_str().unwrap().to_string();
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let body = request(3, "mail/turn", json!({"conversationId": conversation, "contentType": "text", "content": {"text": "hello"}})).to_string();
    let headers = [("content-type", "application/json"), ("map-session-id", session.as_str()), ("traceparent", traceparent.as_str())];
    let turn = http(&gw.addr(), "POST", "/map/rpc", &headers, body.as_bytes()).await.json();
    assert!(turn["result"]["turn"]["id"].is_string(), "{turn}");
    let unknown = http(&gw.addr(), "POST", "/map/rpc", &headers, request(4, "no/such-method", json!({})).to_string().as_bytes()).await.json();
    assert_eq!(err_code(&unknown), -32601);

    // SIGTERM flushes what the exporter still holds.
    assert!(gw.terminate().success());
    let spans = collector.spans();
    let turns = named(&spans, "mail/turn");
    assert_eq!(turns.len(), 1, "one span for the mail/turn request: {spans:#?}");
    let rpc = turns[0];
    assert_eq!(rpc["service"], "gw-under-test");
    assert_eq!(rpc["traceId"], TRACE_ID, "the caller's trace goes on");
    assert_eq!(rpc["parentSpanId"], CALLER_SPAN, "under the caller's span");
    assert_eq!(attr(rpc, "rpc.method").as_deref(), Some("mail/turn"));
    assert_eq!(attr(rpc, "rpc.system").as_deref(), Some("jsonrpc"));
    assert_eq!(attr(rpc, "map.tenant").as_deref(), Some("default"));
    assert_eq!(attr(rpc, "rpc.jsonrpc.error_code").as_deref(), Some("0"));

    let children: Vec<&Value> = spans.iter().filter(|s| s["parentSpanId"] == rpc["spanId"]).collect();
    let plugin = children.iter().find(|s| s["name"] == "plugin mail rpc").unwrap_or_else(|| panic!("a plugin span under the request: {children:#?}"));
    assert_eq!(plugin["traceId"], TRACE_ID);
    assert_eq!(attr(plugin, "map.outcome").as_deref(), Some("ok"));
    let store: Vec<&Value> = spans.iter().filter(|s| s["parentSpanId"] == plugin["spanId"]).collect();
    assert!(store.iter().any(|s| s["name"] == "store commit"), "the turn is committed under the plugin's span: {store:#?}");
    assert!(store.iter().all(|s| s["name"].as_str().unwrap().starts_with("store ") && s["traceId"] == TRACE_ID), "{store:#?}");
    assert!(store.iter().all(|s| attr(s, "db.system").as_deref() == Some("sqlite")), "{store:#?}");

    // A failed request is marked so; a request without traceparent starts its own trace.
    let failed = named(&spans, "no/such-method");
    assert_eq!(failed.len(), 1, "{spans:#?}");
    assert_eq!(attr(failed[0], "rpc.jsonrpc.error_code").as_deref(), Some("-32601"));
    assert_eq!(failed[0]["status"]["code"], json!(2), "status ERROR: {}", failed[0]);
    let create = named(&spans, "mail/create");
    assert_eq!(create.len(), 1);
    assert_ne!(create[0]["traceId"], TRACE_ID);

    // Log lines are JSON objects with a level, a message and fields.
    let log = gw.log();
    let lines: Vec<Value> = log.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert!(!lines.is_empty(), "no JSON log lines in:\n{log}");
    let ready = lines.iter().find(|l| l["fields"]["message"] == "gateway ready").unwrap_or_else(|| panic!("no ready line in:\n{log}"));
    assert_eq!(ready["level"], "INFO");
    assert!(ready["fields"]["addr"].is_string(), "{ready}");
    assert!(log.lines().filter(|l| !l.trim().is_empty()).all(|l| l.starts_with('{')), "every log line is JSON:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_no_traces_are_made_and_logs_are_text() {
    let collector = Collector::default();
    let _port = collector.start().await;
    let mut gw = Gateway::start();
    let (mut ws, _) = gw.ws_connected("agent", None).await;
    ws.call_ok("map/agents/list", json!({})).await;
    assert!(gw.terminate().success());
    assert!(collector.spans().is_empty());
    assert!(gw.log().contains("gateway ready"), "{}", gw.log());
    assert!(!gw.log().lines().any(|l| l.starts_with('{')), "text logs by default:\n{}", gw.log());
}

/// The trace context header is read only when it is well formed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_traceparent_starts_a_fresh_trace() {
    let collector = Collector::default();
    let port = collector.start().await;
    let mut gw = Gateway::start_config(
        "max_message_bytes = 65536",
        &format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\notlp_protocol = \"http/json\"\n[[tenants]]\nid = \"default\"\n"),
    );
    let headers = [("content-type", "application/json"), ("traceparent", "00-zzzz-not-a-trace-01")];
    let body = request(1, "map/connect", json!({"protocolVersion": 1})).to_string();
    assert_eq!(http(&gw.addr(), "POST", "/map/rpc", &headers, body.as_bytes()).await.status, 200);
    assert!(gw.terminate().success());
    let spans = collector.spans();
    let connect = named(&spans, "map/connect");
    assert_eq!(connect.len(), 1, "{spans:#?}");
    assert!(connect[0]["parentSpanId"].as_str().unwrap_or_default().is_empty(), "a root span: {}", connect[0]);
    assert_eq!(connect[0]["traceId"].as_str().unwrap().len(), 32);
}

/// Roots are sampled before any span is made: at `sample_ratio` 0 only a
/// caller's sampled `traceparent` makes a trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_ratio_and_the_callers_flag() {
    let collector = Collector::default();
    let port = collector.start().await;
    let telemetry =
        format!("[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\notlp_protocol = \"http/json\"\nsample_ratio = 0.0\n[[tenants]]\nid = \"default\"\n");
    let mut gw = Gateway::start_config("max_message_bytes = 65536", &telemetry);
    let connect = request(1, "map/connect", json!({"protocolVersion": 1})).to_string();
    let post = |traceparent: Option<&'static str>| {
        let addr = gw.addr();
        let connect = connect.clone();
        async move {
            let mut headers = vec![("content-type", "application/json")];
            headers.extend(traceparent.map(|t| ("traceparent", t)));
            assert_eq!(http(&addr, "POST", "/map/rpc", &headers, connect.as_bytes()).await.status, 200);
        }
    };
    for _ in 0..20 {
        post(None).await;
    }
    post(Some("00-11111111111111111111111111111111-2222222222222222-00")).await;
    post(Some("00-33333333333333333333333333333333-4444444444444444-01")).await;
    assert!(gw.terminate().success());
    let spans = collector.spans();
    assert_eq!(spans.len(), 1, "only the sampled caller's request: {spans:#?}");
    assert_eq!(spans[0]["traceId"], "33333333333333333333333333333333");
}
