//! Plugins that serve HTTP through the standard `wasi:http/incoming-handler`
//! (the fixture `streamer`, a plain `wasi:http/proxy` component): events
//! reach the client as the plugin writes them, request bodies stream in,
//! the tenant walls and `x-map-*` headers hold, a client that goes away
//! leaves nothing running, a trap ends its own stream alone.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::plugins::{config, running, start, until_running};
use crate::common::*;

fn streamer(extra: &str) -> String {
    format!("[plugins.streamer]\npath = {:?}\nhttp_prefix = \"/stream\"\n{extra}\n", fixture("streamer-v1.wasm"))
}

/// How a streamed response ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The last chunk came: the response is whole.
    Whole,
    /// The connection closed without it: the stream was cut.
    Cut,
}

/// One streamed HTTP/1.1 response, read as it comes.
struct Streamed {
    stream: TcpStream,
    status: u16,
    headers: Vec<(String, String)>,
    /// Bytes read and not yet de-chunked.
    raw: Vec<u8>,
    /// De-chunked body not yet taken.
    text: Vec<u8>,
    end: Option<End>,
}

impl Streamed {
    /// Send the request head (chunked if `chunked`) and read the response head.
    async fn open(addr: &str, method: &str, path: &str, key: &str, chunked: bool) -> Streamed {
        let mut stream = TcpStream::connect(addr).await.expect("tcp connect");
        let body = if chunked { "Transfer-Encoding: chunked\r\n" } else { "" };
        let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nX-Api-Key: {key}\r\nX-Map-Principal: forged\r\n{body}\r\n");
        stream.write_all(head.as_bytes()).await.expect("write head");
        let mut s = Streamed { stream, status: 0, headers: Vec::new(), raw: Vec::new(), text: Vec::new(), end: None };
        if !chunked {
            s.read_head().await;
        }
        s
    }

    async fn read_head(&mut self) {
        let split = tokio::time::timeout(WAIT, async {
            loop {
                if let Some(i) = find(&self.raw, b"\r\n\r\n") {
                    return i;
                }
                assert!(self.read_some().await, "closed before the head: {:?}", String::from_utf8_lossy(&self.raw));
            }
        })
        .await
        .expect("the response head in time");
        (self.status, self.headers) = parse_head(&self.raw[..split]);
        self.raw.drain(..split + 4);
        assert!(self.headers.iter().any(|(k, v)| k == "transfer-encoding" && v == "chunked"), "{:?}", self.headers);
    }

    /// Read what has come; false when the connection closed.
    async fn read_some(&mut self) -> bool {
        let mut buf = [0u8; 8192];
        match self.stream.read(&mut buf).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.raw.extend_from_slice(&buf[..n]);
                true
            }
        }
    }

    fn dechunk(&mut self) {
        while let Some(eol) = find(&self.raw, b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&self.raw[..eol]).trim(), 16).expect("a chunk size");
            if self.raw.len() < eol + 2 + size + 2 {
                return;
            }
            if size == 0 {
                self.end = Some(End::Whole);
            }
            self.text.extend_from_slice(&self.raw[eol + 2..eol + 2 + size]);
            self.raw.drain(..eol + 2 + size + 2);
        }
    }

    /// The next event `(name, data)`, or how the stream ended.
    async fn next_event(&mut self, within: Duration) -> Result<(String, String), End> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            self.dechunk();
            if let Some(end) = find(&self.text, b"\n\n") {
                let block = String::from_utf8(self.text.drain(..end + 2).collect()).expect("SSE is UTF-8");
                let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("message").to_string();
                let data = block.lines().filter_map(|l| l.strip_prefix("data: ")).collect::<Vec<_>>().join("\n");
                return Ok((name, data));
            }
            if let Some(end) = self.end.take() {
                return Err(end);
            }
            let read = tokio::time::timeout_at(deadline, self.read_some()).await.expect("the next event in time");
            if !read {
                self.dechunk();
                return Err(self.end.take().unwrap_or(End::Cut));
            }
        }
    }

    /// Every event until the end, and how it ended.
    async fn rest(&mut self, within: Duration) -> (Vec<(String, String)>, End) {
        let mut events = Vec::new();
        loop {
            match self.next_event(within).await {
                Ok(e) => events.push(e),
                Err(end) => return (events, end),
            }
        }
    }

    /// Send one chunk of the request body.
    async fn send_chunk(&mut self, data: &[u8]) {
        let chunk = format!("{:x}\r\n", data.len());
        self.stream.write_all(chunk.as_bytes()).await.unwrap();
        self.stream.write_all(data).await.unwrap();
        self.stream.write_all(b"\r\n").await.unwrap();
    }

    /// The next `n` bytes of the response body.
    async fn body_bytes(&mut self, n: usize) -> Vec<u8> {
        tokio::time::timeout(WAIT, async {
            loop {
                self.dechunk();
                if self.text.len() >= n {
                    return self.text.drain(..n).collect();
                }
                assert!(self.read_some().await, "closed early");
            }
        })
        .await
        .expect("the body in time")
    }
}

#[tokio::test]
async fn events_reach_the_client_as_the_plugin_writes_them() {
    let gw = start(&config(&streamer(""), r#"["streamer"]"#, "[]", ""));
    let opened = Instant::now();
    let mut s = Streamed::open(&gw.addr(), "GET", "/stream/events?n=4&pause=300", "acme-key", false).await;
    assert_eq!(s.status, 200);
    assert!(s.headers.iter().any(|(k, v)| k == "content-type" && v == "text/event-stream"), "{:?}", s.headers);
    let mut arrived = Vec::new();
    for i in 0..4 {
        let (name, data) = s.next_event(WAIT).await.unwrap_or_else(|end| panic!("event {i}: the stream ended ({end:?})"));
        assert_eq!((name.as_str(), data), ("message", format!("v1 event {i}")));
        arrived.push(opened.elapsed());
    }
    assert_eq!(s.next_event(WAIT).await, Err(End::Whole), "the body ends whole after the last event");
    // The plugin pauses 300 ms after each event: each came when written, not all at the end.
    for pair in arrived.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(250), "events came together: {arrived:?}");
    }
    assert!(arrived[0] < Duration::from_millis(600), "the first event waited for the others: {arrived:?}");
}

#[tokio::test]
async fn a_streaming_plugin_keeps_the_tenant_walls_and_sees_who_called() {
    let gw = start(&config(&streamer(""), r#"["streamer"]"#, "[]", ""));
    let addr = gw.addr();
    let described = http(&addr, "GET", "/stream/headers", &[("x-api-key", "acme-key"), ("x-map-principal", "forged")], b"").await;
    assert_eq!(described.status, 200, "{}", described.text());
    let seen: Value = described.json();
    assert_eq!(seen["path"], "/headers", "the plugin sees the path below its prefix");
    let headers = seen["headers"].as_array().unwrap();
    let values = |name: &str| headers.iter().filter(|h| h[0] == name).map(|h| h[1].as_str().unwrap().to_string()).collect::<Vec<_>>();
    // The gateway's name for the key, not the one the client sent.
    let principal = values("x-map-principal");
    assert!(principal.len() == 1 && principal[0].starts_with("acme/"), "{seen}");
    assert_eq!(values("x-map-client-address"), ["127.0.0.1"], "{seen}");
    // globex does not run it; a wrong key is refused; the anonymous tenant has it too.
    assert_eq!(http(&addr, "GET", "/stream/headers", &[("x-api-key", "globex-key")], b"").await.status, 404);
    assert_eq!(http(&addr, "GET", "/stream/headers", &[("x-api-key", "wrong")], b"").await.status, 401);
    assert_eq!(http(&addr, "GET", "/stream/nothing", &[("x-api-key", "acme-key")], b"").await.status, 404);
}

#[tokio::test]
async fn a_request_body_streams_in_while_the_response_streams_out() {
    let gw = start(&config(&streamer(""), r#"["streamer"]"#, "[]", ""));
    let mut s = Streamed::open(&gw.addr(), "POST", "/stream/echo", "acme-key", true).await;
    s.send_chunk(b"first chunk").await;
    s.read_head().await;
    assert_eq!(s.status, 200);
    // The first chunk comes back before the second is sent.
    assert_eq!(s.body_bytes(11).await, b"first chunk");
    s.send_chunk(b"second").await;
    assert_eq!(s.body_bytes(6).await, b"second");
    s.stream.write_all(b"0\r\n\r\n").await.unwrap();
    assert_eq!(s.next_event(WAIT).await, Err(End::Whole));
}

#[tokio::test]
async fn a_client_that_goes_away_leaves_nothing_running() {
    // A plugin that writes often learns at its next write; one that waits
    // (a 10-minute pause) is ended `deadline_ms` after the client left.
    let gw = start(&config(&streamer("deadline_ms = 300"), r#"["streamer"]"#, "[]", ""));
    for path in ["/stream/events?n=100000&pause=20", "/stream/events?n=2&pause=600000"] {
        let mut s = Streamed::open(&gw.addr(), "GET", path, "acme-key", false).await;
        assert!(s.next_event(WAIT).await.is_ok(), "{path}: the first event");
        assert_eq!(running(&gw, "acme", "streamer").await, 1, "{path}: the stream holds an instance");
        drop(s);
        until_running(&gw, "acme", "streamer", 0).await;
    }
    // The instance pool is whole again: a new stream runs to its end.
    let mut s = Streamed::open(&gw.addr(), "GET", "/stream/events?n=2", "acme-key", false).await;
    assert_eq!(s.rest(WAIT).await.1, End::Whole);
}

#[tokio::test]
async fn a_trap_mid_stream_ends_that_stream_alone() {
    let gw = start(&config(&streamer(""), r#"["streamer"]"#, "[]", ""));
    let mut long = Streamed::open(&gw.addr(), "GET", "/stream/events?n=8&pause=100", "acme-key", false).await;
    assert!(long.next_event(WAIT).await.is_ok());
    let mut trapping = Streamed::open(&gw.addr(), "GET", "/stream/trap?after=2", "acme-key", false).await;
    assert_eq!(trapping.status, 200);
    let (events, end) = trapping.rest(WAIT).await;
    assert_eq!(end, End::Whole, "Server-Sent Events end after their error event: {events:?}");
    assert_eq!(events[..2], [("message".into(), "v1 event 0".into()), ("message".into(), "v1 event 1".into())]);
    let (name, data) = &events[2];
    assert_eq!(name, "error", "{events:?}");
    let error: Value = serde_json::from_str(data).unwrap();
    assert_eq!(error["error"], "plugin_failed", "{error}");
    assert!(error["message"].as_str().unwrap().contains("trapped"), "{error}");
    assert_eq!(events.len(), 3, "{events:?}");
    // The other stream goes on to its end.
    let (rest, end) = long.rest(WAIT).await;
    assert_eq!((rest.len(), end), (7, End::Whole), "{rest:?}");
    assert_eq!(rest.last().unwrap().1, "v1 event 7");
}

/// `/admin/reload` after replacing the component file; waits until it is done.
async fn swap_to(gw: &Gateway, live: &std::path::Path, fixture_name: &str) {
    std::fs::copy(fixture(fixture_name), live).unwrap();
    let reload = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
}

#[tokio::test]
async fn an_open_stream_finishes_on_the_version_it_began_with() {
    let dir = TempDir::new("stream-swap");
    let live = dir.path().join("streamer.wasm");
    std::fs::copy(fixture("streamer-v1.wasm"), &live).unwrap();
    let plugins = format!("[plugins.streamer]\npath = {live:?}\nhttp_prefix = \"/stream\"\n");
    let gw = start(&config(&plugins, r#"["streamer"]"#, "[]", ""));
    let mut old = Streamed::open(&gw.addr(), "GET", "/stream/events?n=6&pause=200", "acme-key", false).await;
    assert_eq!(old.next_event(WAIT).await, Ok(("message".into(), "v1 event 0".into())));
    swap_to(&gw, &live, "streamer-v2.wasm").await;
    // New requests get v2 while the open stream goes on with v1 to its end.
    let mut new = Streamed::open(&gw.addr(), "GET", "/stream/events?n=1", "acme-key", false).await;
    assert_eq!(new.rest(WAIT).await, (vec![("message".into(), "v2 event 0".into())], End::Whole));
    let (rest, end) = old.rest(WAIT).await;
    assert_eq!(end, End::Whole, "{rest:?}");
    let data: Vec<&str> = rest.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(data, ["v1 event 1", "v1 event 2", "v1 event 3", "v1 event 4", "v1 event 5"]);
}

/// The message of the `event: error` a stream ended with.
async fn ended_with_error(s: &mut Streamed) -> String {
    let (events, end) = s.rest(Duration::from_secs(5)).await;
    assert_eq!(end, End::Whole, "{events:?}");
    let (name, data) = events.last().expect("an error event");
    assert_eq!(name, "error", "{events:?}");
    let error: Value = serde_json::from_str(data).unwrap();
    assert_eq!(error["error"], "plugin_failed", "{error}");
    error["message"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_stream_past_its_time_or_idle_limit_ends_with_an_error() {
    let limits = "deadline_ms = 300\nstream_max_ms = 800\nstream_idle_ms = 400";
    let gw = start(&config(&streamer(limits), r#"["streamer"]"#, "[]", ""));
    // Writes every 100 ms, for longer than stream_max_ms.
    let mut long = Streamed::open(&gw.addr(), "GET", "/stream/events?n=100&pause=100", "acme-key", false).await;
    let message = ended_with_error(&mut long).await;
    assert!(message.contains("stream_max_ms"), "{message}");
    // Never writes: ended at its idle limit (before its time limit).
    let mut silent = Streamed::open(&gw.addr(), "GET", "/stream/silent", "acme-key", false).await;
    let message = ended_with_error(&mut silent).await;
    assert!(message.contains("stream_idle_ms"), "{message}");
    until_running(&gw, "acme", "streamer", 0).await;
}

#[tokio::test]
async fn silent_streams_hold_no_thread_and_their_number_is_capped() {
    // Two plugin threads; eight streams that wait; the ninth is refused; an ordinary request still runs at once.
    let gw = Gateway::start_config("plugin_threads = 2", &config(&streamer("max_streams = 8"), r#"["streamer"]"#, "[]", ""));
    let mut open = Vec::new();
    for _ in 0..8 {
        let s = Streamed::open(&gw.addr(), "GET", "/stream/silent", "acme-key", false).await;
        assert_eq!(s.status, 200);
        open.push(s);
    }
    until_running(&gw, "acme", "streamer", 8).await;
    let refused = http(&gw.addr(), "GET", "/stream/headers", &[("x-api-key", "acme-key")], b"").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert!(refused.text().contains("max_streams"), "{}", refused.text());
    // Another tenant's plugins run on the same threads: they are free.
    let other = http(&gw.addr(), "GET", "/stream/headers", &[], b"").await;
    assert_eq!(other.status, 200, "{}", other.text());
    drop(open);
    until_running(&gw, "acme", "streamer", 0).await;
    assert_eq!(http(&gw.addr(), "GET", "/stream/headers", &[("x-api-key", "acme-key")], b"").await.status, 200);
}
