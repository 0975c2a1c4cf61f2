//! The gateway attacked from outside: stolen and guessed session ids over
//! HTTP and SSE, principals and participant ids, issued tokens, agent
//! visibility, origins, throttling, byte bounds, slow and idle peers.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Two tenants that require credentials; acme has two principals.
const WALLED: &str = r#"
[auth]
anonymous_tenant = ""
[[tenants]]
id = "acme"
api_keys = [{ secret = "alice-key", principal = "alice" }, { secret = "bob-key", principal = "bob" }]
[[tenants]]
id = "globex"
api_keys = ["globex-key"]
"#;

fn walled() -> Gateway {
    Gateway::start_with(65536, WALLED)
}

async fn post_with(addr: &str, headers: &[(&str, &str)], body: &Value) -> HttpResponse {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    http(addr, "POST", "/map/rpc", &h, body.to_string().as_bytes()).await
}

/// Why `map/connect` refused a credential: its `authRequired` answer's `error.code`.
fn refusal(resp: &Value) -> &str {
    let r = ok(resp);
    assert_eq!(r["authRequired"]["required"], true, "{r}");
    r["error"]["code"].as_str().unwrap_or_else(|| panic!("no error code in {r}"))
}

/// `map/connect` over HTTP with these headers (credentials, or none); returns the session id.
async fn http_session(addr: &str, headers: &[(&str, &str)]) -> String {
    let r = post_with(addr, headers, &request(1, "map/connect", json!({"protocolVersion": 1}))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.header("map-session-id").expect("session header").to_string()
}

#[tokio::test]
async fn a_session_id_without_its_credentials_is_refused_over_http() {
    let gw = walled();
    let addr = gw.addr();
    let session = http_session(&addr, &[("X-Api-Key", "alice-key")]).await;
    let reg =
        post_with(&addr, &[("X-Api-Key", "alice-key"), ("map-session-id", &session)], &request(2, "map/agents/register", json!({"agentId": "secret-agent"})))
            .await;
    assert_eq!(reg.status, 200, "{}", reg.text());
    let list = request(3, "map/agents/list", json!({}));
    // No credentials, another tenant's key, another principal's key: all refused alike.
    for headers in [vec![], vec![("X-Api-Key", "globex-key")], vec![("X-Api-Key", "bob-key")]] {
        let mut h = headers.clone();
        h.push(("map-session-id", &session));
        let r = post_with(&addr, &h, &list).await;
        assert_eq!(r.status, 404, "{headers:?}: {}", r.text());
        assert_eq!(err_code(&r.json()), 16000);
        assert!(!r.text().contains("secret-agent"));
    }
    let mine = post_with(&addr, &[("X-Api-Key", "alice-key"), ("map-session-id", &session)], &list).await;
    assert_eq!(mine.status, 200);
    assert_eq!(ok(&mine.json())["agents"][0]["id"], "secret-agent");
}

#[tokio::test]
async fn session_ids_in_a_burst_are_unrelated() {
    let gw = Gateway::start();
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(http_session(&gw.addr(), &[]).await);
    }
    let (mut ws, _) = gw.ws_connected("client", None).await;
    let sub = ws.call_ok("map/subscribe", json!({})).await["subscriptionId"].as_str().unwrap().to_string();
    for id in &ids {
        assert!(id.starts_with("sess-") && id.len() == 31, "{id}");
        // A ULID-based id made in the same millisecond would share 16+ leading characters.
        for other in ids.iter().chain(std::iter::once(&sub)).filter(|o| *o != id) {
            let body = |s: &str| s.split_once('-').map(|x| x.1.to_string()).unwrap_or_default();
            let shared = body(id).chars().zip(body(other).chars()).take_while(|(a, b)| a == b).count();
            assert!(shared < 8, "{id} and {other} share {shared} leading characters");
        }
    }
}

#[tokio::test]
async fn a_second_event_stream_is_refused_and_the_first_keeps_receiving() {
    let gw = Gateway::start();
    let addr = gw.addr();
    let session = http_session(&addr, &[]).await;
    post_rpc(&addr, Some(&session), &request(2, "map/agents/register", json!({"agentId": "sse-owner"}))).await;
    let mut first = Sse::open(&addr, &session).await;
    assert_eq!(first.status, 200);
    let second = Sse::open(&addr, &session).await;
    assert_eq!(second.status, 409, "a second stream must not take the session over");

    let (mut ws, _) = gw.ws_connected("client", None).await;
    ws.call_ok("map/send", json!({"to": {"agent": "sse-owner"}, "payload": "still mine"})).await;
    let (note, _) = first.notification("map/message", WAIT).await;
    assert_eq!(note.expect("the first stream still receives")["params"]["message"]["payload"], "still mine");

    // A WebSocket session cannot be diverted to SSE either.
    let (mut victim, hello) = gw.ws_connected("agent", None).await;
    victim.call_ok("map/agents/register", json!({"agentId": "ws-victim"})).await;
    let thief = Sse::open(&addr, hello["sessionId"].as_str().unwrap()).await;
    assert_eq!(thief.status, 409);
    ws.call_ok("map/send", json!({"to": {"agent": "ws-victim"}, "payload": 1})).await;
    assert!(victim.notification("map/message", WAIT).await.is_some(), "the WebSocket keeps its frames");
}

#[tokio::test]
async fn after_disconnect_the_session_id_admits_no_http_call() {
    let gw = Gateway::start();
    let addr = gw.addr();
    let session = http_session(&addr, &[]).await;
    let bye = post_rpc(&addr, Some(&session), &request(2, "map/disconnect", json!({}))).await;
    assert_eq!(bye.status, 200);
    let token = ok(&bye.json())["resumeToken"].as_str().unwrap().to_string();
    let late = post_rpc(&addr, Some(&session), &request(3, "map/agents/register", json!({"agentId": "ghost"}))).await;
    assert_eq!(late.status, 404, "{}", late.text());
    // The resume token still resumes it.
    let mut ws = gw.ws().await;
    let back = ws.call_ok("map/connect", json!({"protocolVersion": 1, "resumeToken": token})).await;
    assert_eq!(back["sessionId"], session.as_str());
    assert_eq!(back["reconnected"], true);
}

#[tokio::test]
async fn principals_own_their_participant_ids_and_resume_needs_credentials() {
    let gw = walled();
    let (mut alice, hello) = gw.ws_connected("client", Some(api_key("alice-key"))).await;
    assert_eq!(hello["principal"]["id"], "alice");
    let mut ws = gw.ws().await;
    let r = ws.call("map/connect", json!({"protocolVersion": 1, "participantId": "alice-p", "auth": api_key("alice-key")})).await;
    ok(&r);
    let bye = ws.call_ok("map/disconnect", json!({})).await;
    let token = bye["resumeToken"].as_str().unwrap().to_string();
    drop(ws);

    // Bob, same tenant, claims alice's participant id: refused.
    let mut bob = gw.ws().await;
    let r = bob.call("map/connect", json!({"protocolVersion": 1, "participantId": "alice-p", "auth": api_key("bob-key")})).await;
    assert_eq!(err_code(&r), 1003, "{r}");
    // A bare resume token, without credentials, does not resume.
    let mut bare = gw.ws().await;
    let r = bare.call("map/connect", json!({"protocolVersion": 1, "resumeToken": token})).await;
    assert!(ok(&r).get("reconnected").is_none(), "{r}");
    assert_eq!(ok(&r)["authRequired"]["required"], true);
    // Bob's credential with alice's token does not either.
    let mut bob2 = gw.ws().await;
    let r = bob2.call("map/connect", json!({"protocolVersion": 1, "resumeToken": token, "auth": api_key("bob-key")})).await;
    assert_ne!(ok(&r)["participantId"], "alice-p");
    // Alice herself may.
    let r = alice.call("map/disconnect", json!({})).await;
    ok(&r);
    let mut again = gw.ws().await;
    let r = again.call("map/connect", json!({"protocolVersion": 1, "resumeToken": token, "auth": api_key("alice-key")})).await;
    assert_eq!(ok(&r)["participantId"], "alice-p");
    assert_eq!(ok(&r)["reconnected"], true);
}

#[tokio::test]
async fn refresh_issues_a_token_and_never_echoes_the_secret() {
    let gw = walled();
    let (mut ws, _) = gw.ws_connected("client", Some(api_key("alice-key"))).await;
    let r = ws.call_ok("map/auth/refresh", json!({"method": "api-key", "refreshToken": "alice-key"})).await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["principal"]["id"], "alice", "{r}");
    let token = r["accessToken"].as_str().unwrap().to_string();
    assert!(!r.to_string().contains("alice-key"), "{r}");
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    assert!(r["expiresAt"].as_u64().unwrap() > 0);
    // The SDK's form, `{method, credential}`.
    let r = ws.call_ok("map/auth/refresh", json!({"method": "api-key", "credential": "alice-key"})).await;
    assert_eq!(r["success"], true, "{r}");
    // Another principal's credential, or a wrong one, is refused, and the session goes on.
    for wrong in ["bob-key", "nobody-key"] {
        let r = ws.call_ok("map/auth/refresh", json!({"method": "api-key", "credential": wrong})).await;
        assert_eq!(r["success"], false, "{r}");
        assert_eq!(r["error"]["code"], "invalid_credentials", "{r}");
        assert!(r.get("accessToken").is_none() && !r.to_string().contains(wrong), "{r}");
    }
    ws.call_ok("map/agents/list", json!({})).await;
    // The issued token is a bearer credential for alice, in acme.
    let mut other = gw.ws().await;
    let hello = other.call_ok("map/connect", json!({"protocolVersion": 1, "auth": {"method": "bearer", "token": token}})).await;
    assert_eq!(hello["principal"]["id"], "alice");
    assert_eq!(hello["principal"]["claims"]["tenant"], "acme");
    // A tampered token is not.
    let mut forged = token.clone();
    forged.pop();
    let mut third = gw.ws().await;
    let e = third.call("map/connect", json!({"protocolVersion": 1, "auth": {"method": "bearer", "token": forged}})).await;
    assert_eq!(refusal(&e), "invalid_credentials");
}

#[tokio::test]
async fn hidden_agents_are_invisible_and_unaddressable() {
    let gw = Gateway::start();
    let (mut stranger, _) = gw.ws_connected("client", None).await;
    stranger.call_ok("map/subscribe", json!({"filter": {"eventTypes": ["agent.*"]}})).await;
    let (mut owner, _) = gw.ws_connected("agent", None).await;
    owner.call_ok("map/agents/register", json!({"agentId": "boss"})).await;
    owner.call_ok("map/agents/register", json!({"agentId": "hidden", "visibility": "system"})).await;
    owner.call_ok("map/agents/register", json!({"agentId": "kid", "parent": "boss", "visibility": "parent-only"})).await;
    owner.call_ok("map/agents/update", json!({"agentId": "hidden", "state": "busy"})).await;
    owner.call_ok("map/agents/unregister", json!({"agentId": "kid"})).await;
    // Its events stay hidden too, live and in replay.
    let seen: Vec<Value> = stranger.drain(Duration::from_millis(300)).await.into_iter().map(|n| n["params"]["event"]["data"]["agentId"].clone()).collect();
    assert_eq!(seen, vec![json!("boss")], "{seen:?}");
    let replayed = stranger.call_ok("map/replay", json!({"filter": {"eventTypes": ["agent.*"]}})).await;
    assert!(!replayed.to_string().contains("\"hidden\"") && !replayed.to_string().contains("\"kid\""), "{replayed}");
    owner.call_ok("map/agents/register", json!({"agentId": "kid", "parent": "boss", "visibility": "parent-only"})).await;
    let listed: Vec<Value> = stranger.call_ok("map/agents/list", json!({})).await["agents"].as_array().unwrap().iter().map(|a| a["id"].clone()).collect();
    assert_eq!(listed, vec![json!("boss")]);
    for id in ["hidden", "kid"] {
        assert_eq!(err_code(&stranger.call("map/agents/get", json!({"agentId": id})).await), 2001, "{id}");
        assert_eq!(err_code(&stranger.call("map/send", json!({"to": {"agent": id}, "payload": 1})).await), 2001, "{id}");
    }
    let graph = stranger.call_ok("map/structure/graph", json!({})).await;
    assert_eq!(graph["nodes"].as_array().unwrap().len(), 1, "{graph}");
    let kids = stranger.call_ok("map/agents/get", json!({"agentId": "boss", "include": {"children": true}})).await;
    assert_eq!(kids["children"], json!([]));
    // The owner and a system participant see them all.
    assert_eq!(owner.call_ok("map/agents/list", json!({})).await["agents"].as_array().unwrap().len(), 3);
    let (mut system, _) = gw.ws_connected("system", None).await;
    assert_eq!(system.call_ok("map/agents/list", json!({})).await["agents"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn browsers_of_other_origins_are_refused() {
    let gw = Gateway::start_config("allowed_origins = [\"https://app.example\"]", TENANTS);
    let addr = gw.addr();
    let ws_with_origin = |origin: &'static str| {
        let url = gw.ws_url();
        async move {
            let mut req = url.into_client_request().unwrap();
            req.headers_mut().insert("origin", origin.parse().unwrap());
            tokio_tungstenite::connect_async(req).await
        }
    };
    match ws_with_origin("https://evil.example").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 403),
        other => panic!("a foreign origin must not get a WebSocket: {:?}", other.map(|_| ())),
    }
    assert!(ws_with_origin("https://app.example").await.is_ok(), "an allowed origin gets one");
    let same = format!("http://{addr}");
    let same: &'static str = Box::leak(same.into_boxed_str());
    assert!(ws_with_origin(same).await.is_ok(), "the gateway's own origin gets one");

    let body = request(1, "map/connect", json!({"protocolVersion": 1})).to_string();
    let plain = http(&addr, "POST", "/map/rpc", &[("Content-Type", "text/plain")], body.as_bytes()).await;
    assert_eq!(plain.status, 415);
    assert_eq!(err_code(&plain.json()), -32600);
    let foreign = http(&addr, "POST", "/map/rpc", &[("Content-Type", "application/json"), ("Origin", "https://evil.example")], body.as_bytes()).await;
    assert_eq!(foreign.status, 403);
    let allowed = http(&addr, "POST", "/map/rpc", &[("Content-Type", "application/json"), ("Origin", "https://app.example")], body.as_bytes()).await;
    assert_eq!(allowed.status, 200);
    assert_eq!(allowed.header("access-control-allow-origin"), Some("https://app.example"));
    // The admin surface answers no cross-origin request, allowed or not.
    for origin in ["https://evil.example", "https://app.example"] {
        let r = http(&addr, "POST", "/admin/reload", &[("Origin", origin)], b"").await;
        assert_eq!(r.status, 403, "{origin}");
    }
    let r = http(&addr, "POST", "/admin/reload", &[("Sec-Fetch-Site", "cross-site")], b"").await;
    assert_eq!(r.status, 403);
    let get = http(&addr, "GET", "/map/rpc", &[], b"").await;
    assert_eq!(get.status, 405);
    assert_eq!(get.header("allow"), Some("POST"));
}

/// The next text frame (`Ok`) or close frame's code (`Err`) of a raw client socket.
async fn next_ws_frame<S>(stream: &mut S) -> Result<Value, Option<u16>>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(WAIT, stream.next()).await.expect("a frame in time") {
            Some(Ok(Message::Text(t))) => return Ok(serde_json::from_str(t.as_str()).unwrap()),
            Some(Ok(Message::Close(c))) => return Err(c.map(|c| u16::from(c.code))),
            Some(Ok(_)) => continue,
            other => panic!("expected a frame, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn failed_authentications_are_throttled() {
    let gw = Gateway::start_with(65536, &format!("{WALLED}\n").replace("[auth]\n", "[auth]\nfailures_per_minute = 8\nfailures_per_connection = 3\n"));
    // One connection: closed with 1008 after three failures (of connect or refresh).
    let (mut stream, _) = tokio_tungstenite::connect_async(gw.ws_url()).await.unwrap();
    for i in 0..2 {
        let frame = request(i, "map/connect", json!({"protocolVersion": 1, "auth": api_key("wrong")})).to_string();
        stream.send(Message::text(frame)).await.unwrap();
        let answer = next_ws_frame(&mut stream).await.expect("an answer before the close");
        assert_eq!(refusal(&answer), "invalid_credentials");
    }
    let frame = request(2, "map/connect", json!({"protocolVersion": 1, "auth": api_key("alice-key")})).to_string();
    stream.send(Message::text(frame)).await.unwrap();
    assert_eq!(ok(&next_ws_frame(&mut stream).await.expect("connected"))["principal"]["id"], "alice");
    let frame = request(3, "map/auth/refresh", json!({"method": "api-key", "credential": "wrong"})).to_string();
    stream.send(Message::text(frame)).await.unwrap();
    let answer = next_ws_frame(&mut stream).await.expect("an answer before the close");
    assert_eq!(ok(&answer)["success"], false, "{answer}");
    assert_eq!(next_ws_frame(&mut stream).await.expect_err("closed after the third failure"), Some(1008));
    // The address: past 8 failures a minute even the right key waits, with retryAfterMs.
    for _ in 0..6 {
        let mut ws = gw.ws().await;
        let _ = ws.call("map/connect", json!({"protocolVersion": 1, "auth": api_key("wrong")})).await;
    }
    let mut ws = gw.ws().await;
    let r = ws.call("map/connect", json!({"protocolVersion": 1, "auth": api_key("alice-key")})).await;
    assert_eq!(err_code(&r), 4000, "{r}");
    assert!(err(&r)["data"]["retryAfterMs"].as_u64().unwrap() > 0);
    let h = post_with(&gw.addr(), &[("X-Api-Key", "alice-key"), ("map-session-id", "sess-x")], &request(1, "map/agents/list", json!({}))).await;
    assert_eq!(h.status, 429);
}

#[tokio::test]
async fn websocket_protocol_faults_close_with_their_codes() {
    let gw = Gateway::start_with(4096, TENANTS);
    // Invalid UTF-8 in a text frame: 1007.
    let mut s = TcpStream::connect(gw.addr()).await.unwrap();
    let head = format!(
        "GET /map HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        gw.addr()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 101"));
    // A masked text frame with the bytes FF FE.
    s.write_all(&[0x81, 0x82, 1, 2, 3, 4, 0xFF ^ 1, 0xFE ^ 2]).await.unwrap();
    let n = tokio::time::timeout(WAIT, s.read(&mut buf)).await.unwrap().unwrap();
    assert!(n >= 4 && buf[0] == 0x88, "a close frame: {:?}", &buf[..n]);
    assert_eq!(u16::from_be_bytes([buf[2], buf[3]]), 1007);

    // Over the hard cap (16 MiB here): 1009.
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.ws_url()).await.unwrap();
    let _ = ws.send(Message::text("x".repeat(17 << 20))).await;
    let code = loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("closed in time") {
            Some(Ok(Message::Close(c))) => break c.map(|c| u16::from(c.code)),
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(code, Some(1009));
}

#[tokio::test]
async fn oversized_bodies_get_their_413() {
    let gw = Gateway::start_with(4096, TENANTS);
    // A client that writes the whole body before it reads gets its 413, whatever the size.
    for size in [20_000, 60_000, 200_000, 20_000, 60_000] {
        let big = vec![b' '; size];
        let r = post(&gw.addr(), "/map/rpc", None, &big).await;
        assert_eq!(r.status, 413);
        assert_eq!(err_code(&r.json()), -32600);
    }
}

#[tokio::test]
async fn memory_is_bounded_by_bytes() {
    let gw = Gateway::start_config(
        "max_message_bytes = 1048576\nresume_window_secs = 300",
        &format!("{TENANTS}\n[limits]\nreplay_bytes = 2097152\noutbox_bytes = 1048576\n"),
    );
    let (mut sender, _) = gw.ws_connected("agent", None).await;
    sender.call_ok("map/agents/register", json!({"agentId": "loud"})).await;
    // A receiver that never reads.
    let (mut sink, _) = gw.ws_connected("agent", None).await;
    sink.call_ok("map/agents/register", json!({"agentId": "deaf"})).await;
    let payload = "p".repeat(100_000);
    let mut refused = 0;
    for _ in 0..60 {
        let r = sender.call("map/send", json!({"to": {"agent": "deaf"}, "payload": payload})).await;
        if r.get("error").is_some() {
            assert_eq!(err_code(&r), 2003);
            refused += 1;
        }
    }
    // 6 MB sent to a 1 MiB outbox (plus what the socket buffers take): most refused.
    assert!(refused > 0, "the deaf receiver's outbox is bounded by bytes");
    let page = sender.call_ok("map/replay", json!({"limit": 1000})).await;
    let bytes = page.to_string().len();
    assert!(bytes < 3 << 20, "the replay log keeps about 2 MiB, not {bytes} bytes");
    assert!(page["events"].as_array().unwrap().len() < 40);
}

#[tokio::test]
async fn a_session_with_many_agents_ends_without_stalling_the_gateway() {
    let gw = Gateway::start_with(1 << 20, TENANTS);
    let mut big = gw.ws().await;
    big.call_ok("map/connect", json!({"protocolVersion": 1, "participantType": "agent", "disconnectPolicy": {"agentBehavior": "unregister"}})).await;
    let batch: Vec<Value> = (0..20_000).map(|i| request(i, "map/agents/register", json!({"agentId": format!("a{i}"), "scopes": []}))).collect();
    for chunk in batch.chunks(2000) {
        big.send_text(&Value::Array(chunk.to_vec()).to_string()).await;
        let answers = big.answer().await;
        assert_eq!(answers.as_array().unwrap().len(), 2000);
    }
    let (mut other, _) = gw.ws_connected("client", None).await;
    let started = Instant::now();
    let addr = gw.addr();
    let health = tokio::spawn(async move { http(&addr, "GET", "/healthz", &[], b"").await.status });
    big.call_ok("map/disconnect", json!({"reason": "done"})).await;
    assert_eq!(health.await.unwrap(), 200, "/healthz answers meanwhile");
    let left = other.call_ok("map/agents/list", json!({"limit": 10})).await;
    assert_eq!(left["agents"], json!([]), "every agent is gone");
    assert!(started.elapsed() < Duration::from_secs(5), "20,000 agents released in {:?}", started.elapsed());
}

#[tokio::test]
async fn slow_idle_and_surplus_connections_are_cut() {
    let gw = Gateway::start_config("header_timeout_ms = 300\nidle_timeout_secs = 2\nmax_connections = 4", TENANTS);
    let addr = gw.addr();
    // Slowloris: a header that never ends.
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(3), slow.read(&mut buf)).await.expect("closed by the header timeout");
    assert!(n.map(|n| n == 0 || String::from_utf8_lossy(&buf[..n]).contains("408")).unwrap_or(true));
    // A socket that sends nothing at all.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf)).await.expect("closed when idle");
    assert!(n.map(|n| n == 0 || String::from_utf8_lossy(&buf[..n]).contains("408")).unwrap_or(true));
    drop((slow, idle));
    // The cap: four held, the fifth gets 503, and after they go, service resumes.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(gw.ws().await);
    }
    let mut extra = TcpStream::connect(&addr).await.unwrap();
    extra.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, extra.read_to_end(&mut answer)).await;
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 503"), "{}", String::from_utf8_lossy(&answer));
    for ws in held {
        ws.close().await;
    }
    healthy_within(&addr, WAIT, "slots come back when connections close").await;
}

/// Poll `/healthz` on fresh connections until it answers 200, or fail with `why`.
async fn healthy_within(addr: &str, within: Duration, why: &str) {
    let probe = async || {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut a = Vec::new();
        let _ = s.read_to_end(&mut a).await;
        let answer = String::from_utf8_lossy(&a).lines().next().unwrap_or("no answer").to_string();
        if answer.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(answer)
        }
    };
    wait::eventually(within, why, probe).await;
}

#[test]
fn config_prints_toml_without_secrets() {
    let dir = TempDir::new("cfg");
    let path = write_config(dir.path(), 65536, &format!("{WALLED}\n[admin]\ntoken = \"adm1n-secret\"\n"));
    let out = std::process::Command::new(BIN).args(["config", "--config"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for secret in ["alice-key", "bob-key", "globex-key", "adm1n-secret"] {
        assert!(!text.contains(secret), "{secret} printed");
    }
    let parsed: toml::Value = toml::from_str(&text).expect("real TOML");
    assert_eq!(parsed["tenants"][0]["api_keys"][0]["principal"].as_str(), Some("alice"));
}

#[tokio::test]
async fn a_tenant_checks_jwts_from_its_issuer() {
    use jsonwebtoken::{encode, EncodingKey, Header};
    let gw = Gateway::start_with(
        65536,
        "[auth]\nanonymous_tenant = \"\"\n[[tenants]]\nid = \"idp\"\njwt = { secret = \"0123456789abcdef-idp\", audience = \"map\", issuer = \"https://idp.example\" }\n",
    );
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let sign = |claims: Value, secret: &str| encode(&Header::default(), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap();
    let good = json!({"sub": "carol", "aud": "map", "iss": "https://idp.example", "exp": now + 600});
    let connect = |token: String| {
        let url = gw.ws_url();
        async move {
            let mut ws = Ws::connect(&url).await;
            ws.call("map/connect", json!({"protocolVersion": 1, "auth": {"method": "bearer", "token": token}})).await
        }
    };
    let r = connect(sign(good.clone(), "0123456789abcdef-idp")).await;
    assert_eq!(ok(&r)["principal"]["id"], "carol");
    assert_eq!(ok(&r)["principal"]["claims"]["tenant"], "idp");
    assert_eq!(refusal(&connect(sign(good.clone(), "another-secret-of-16")).await), "invalid_credentials", "wrong signature");
    let mut expired = good.clone();
    expired["exp"] = json!(now - 600);
    assert_eq!(refusal(&connect(sign(expired, "0123456789abcdef-idp")).await), "expired");
    let mut audience = good.clone();
    audience["aud"] = json!("other");
    assert_eq!(refusal(&connect(sign(audience, "0123456789abcdef-idp")).await), "invalid_credentials", "wrong audience");
    let mut issuer = good;
    issuer["iss"] = json!("https://evil.example");
    assert_eq!(refusal(&connect(sign(issuer, "0123456789abcdef-idp")).await), "invalid_credentials", "wrong issuer");
}

/// Far below the 60 s header timeout of the test below, and far above what
/// a loaded machine needs to answer.
const PROMPTLY: Duration = Duration::from_secs(15);

#[tokio::test]
async fn out_of_descriptors_silent_sockets_give_way_and_busy_ones_are_refused_cleanly() {
    let dir = TempDir::new("fds");
    let config = write_config_server(dir.path(), "idle_timeout_secs = 60\nheader_timeout_ms = 60000", TENANTS);
    // 100 descriptors: the connection cap drops to 36, leaving room for the rest.
    let gw = Gateway::launch_limited(dir, config, Some(100));
    let addr = gw.addr();
    // Sockets that never send a byte do not keep a new client out: the
    // oldest of them are closed to make room.
    let mut silent = Vec::new();
    for _ in 0..80 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    let started = Instant::now();
    let served = http(&addr, "GET", "/healthz", &[], b"").await;
    assert_eq!(served.status, 200, "{}", served.text());
    // Served, not held until the 60 s header timeout frees a slot.
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert!(gw.log().contains("max_connections lowered"), "{}", gw.log());
    let mut buf = [0u8; 16];
    let oldest = tokio::time::timeout(WAIT, silent[0].read(&mut buf)).await.expect("the oldest silent socket is closed");
    assert!(matches!(oldest, Ok(0)) || oldest.is_err(), "{oldest:?}");
    assert!(tokio::time::timeout(QUIET, silent[79].read(&mut buf)).await.is_err(), "the newest silent socket is kept");
    drop(silent);
    // Connections that are in use hold their slots: a new client is answered at once (503).
    let mut held = Vec::new();
    while held.len() < 36 {
        held.push(gw.ws().await);
    }
    let started = Instant::now();
    let busy = http(&addr, "GET", "/healthz", &[], b"").await;
    assert_eq!(busy.status, 503, "{}", busy.text());
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    for ws in held {
        ws.close().await;
    }
    healthy_within(&addr, WAIT, "service resumes once the connections close").await;
}

#[tokio::test]
async fn unknown_paths_are_404_even_without_credentials() {
    let gw = walled();
    for path in ["/stats", "/nothing/here"] {
        let r = http(&gw.addr(), "GET", path, &[], b"").await;
        assert_eq!(r.status, 404, "{path}: {}", r.text());
    }
    // Logs written to a file carry no terminal colours.
    assert!(gw.log().contains("gateway ready") && !gw.log().contains('\u{1b}'), "{}", gw.log());
}

/// A raw TCP connection upgraded to a WebSocket on `path`.
async fn raw_websocket_at(addr: &str, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(s.read(&mut byte).await.unwrap(), 1, "the upgrade is answered");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    s
}

/// Send one masked text frame of `len` bytes, as a client that writes the
/// whole frame before it reads (as many do): the frame must be taken (no
/// reset), then the gateway's close frame arrives and the connection ends.
/// The close code (`None`: no close frame came first).
async fn oversized_frame_close_code(addr: &str, len: u64) -> Option<u16> {
    oversized_frame_close_code_at(addr, "/map", len).await
}

async fn oversized_frame_close_code_at(addr: &str, path: &str, len: u64) -> Option<u16> {
    let mut s = raw_websocket_at(addr, path).await;
    let mut head = vec![0x81, 0x80 | 127];
    head.extend_from_slice(&len.to_be_bytes());
    head.extend_from_slice(&[0, 0, 0, 0]);
    let chunk = vec![b'x'; 1 << 20];
    let write = async {
        s.write_all(&head).await?;
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            s.write_all(&chunk[..n]).await?;
            left -= n as u64;
        }
        Ok::<_, std::io::Error>(())
    };
    let written = tokio::time::timeout(Duration::from_secs(20), write).await.expect("the frame is written in time");
    written.expect("the gateway reads the frame out instead of resetting the connection");
    let mut got = Vec::new();
    let read = tokio::time::timeout(WAIT, s.read_to_end(&mut got)).await.expect("the gateway ends the connection in time");
    read.expect("the connection ends without a reset");
    (got.len() >= 4 && got[0] == 0x88).then(|| u16::from_be_bytes([got[2], got[3]]))
}

#[tokio::test]
async fn a_frame_far_over_the_limit_gets_its_1009() {
    let gw = Gateway::start();
    assert_eq!(oversized_frame_close_code(&gw.addr(), 17 << 20).await, Some(1009), "17 MiB against 64 KiB");
    // The default limit (8 MiB): its hard cap is 32 MiB.
    let default = Gateway::start_config("", TENANTS);
    assert_eq!(oversized_frame_close_code(&default.addr(), 64 << 20).await, Some(1009), "64 MiB against the default");
    // An editor's WebSocket (ACP) is closed the same way.
    assert_eq!(oversized_frame_close_code_at(&gw.addr(), "/acp?agent=coder", 17 << 20).await, Some(1009), "17 MiB on /acp");
    // The gateway still serves.
    let (mut ws, _) = gw.ws_connected("client", None).await;
    ws.call_ok("map/agents/list", json!({})).await;
}

/// What a client that stops sending reads: the response, up to the close.
async fn response_of_stalled(mut s: TcpStream) -> (String, Value) {
    let mut raw = Vec::new();
    let read = tokio::time::timeout(WAIT, s.read_to_end(&mut raw)).await.expect("answered and closed while the client stalls");
    read.expect("closed without a reset");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no HTTP head in {text:?}"));
    (head.to_ascii_lowercase(), serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}")))
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_without_waiting_for_the_rest() {
    let gw = Gateway::start();
    let addr = gw.addr();
    let head = |framing: &str| format!("POST /map/rpc HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n");
    // A declared length over the limit (64 KiB), nothing of it sent; then 100 KiB of it sent.
    for sent in [0, 100 << 10] {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(head("Content-Length: 1048576").as_bytes()).await.unwrap();
        s.write_all(&vec![b' '; sent]).await.unwrap();
        let (head, body) = response_of_stalled(s).await;
        assert!(head.starts_with("http/1.1 413"), "{sent} bytes sent: {head}");
        assert!(head.contains("connection: close"), "{head}");
        assert_eq!(err_code(&body), -32600);
    }
    // A chunked body, once it passes the limit.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(head("Transfer-Encoding: chunked").as_bytes()).await.unwrap();
    for _ in 0..10 {
        s.write_all(format!("2800\r\n{}\r\n", " ".repeat(0x2800)).as_bytes()).await.unwrap();
    }
    let (head, body) = response_of_stalled(s).await;
    assert!(head.starts_with("http/1.1 413"), "{head}");
    assert_eq!(err_code(&body), -32600);
    // The gateway still serves.
    let r = post_rpc(&addr, None, &request(1, "map/connect", json!({"protocolVersion": 1}))).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let gw = Gateway::start_config("header_timeout_ms = 300\nidle_timeout_secs = 60", TENANTS);
    let mut silent = TcpStream::connect(gw.addr()).await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(3), silent.read(&mut buf)).await.expect("closed after the header timeout, not the idle one");
    assert!(matches!(n, Ok(0)) || n.is_err(), "closed without an answer: {n:?}");
}

#[tokio::test]
async fn a_client_close_frame_is_answered_with_one() {
    let gw = Gateway::start();
    for path in ["/map", "/acp?agent=coder"] {
        let mut s = raw_websocket_at(&gw.addr(), path).await;
        // A masked close frame with code 1000 (the mask is zero: the payload as is).
        s.write_all(&[0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8]).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(WAIT, s.read_to_end(&mut got)).await.expect("the gateway ends the connection in time").expect("no reset");
        assert!(got.len() >= 4 && got[0] == 0x88, "{path}: a close frame comes back before the end: {got:02x?}");
        assert_eq!(u16::from_be_bytes([got[2], got[3]]), 1000, "{path}: the code is echoed");
    }
}

/// One distinctive secret per kind of secret a configuration holds.
const SECRETS: &[(&str, &str)] = &[
    ("api key", "SECRET-apikey-71a0"),
    ("named api key", "SECRET-apikey-named-71a1"),
    ("bearer token", "SECRET-bearer-71a2"),
    ("JWT HMAC secret", "SECRET-jwt-hmac-key-71a3-0123"),
    ("federation issuer secret", "SECRET-federation-issuer-71a4-0123"),
    ("federation peer credential", "SECRET-federation-peer-71a5"),
    ("broker static secret", "SECRET-broker-static-71a6"),
    ("broker client secret", "SECRET-broker-client-71a7"),
    ("token secret", "SECRET-token-secret-71a8-0123"),
    ("admin token", "SECRET-admin-token-71a9"),
    ("database password", "SECRET-db-password-71aa"),
    ("registry password", "SECRET-oci-password-71ab"),
    ("registry token", "SECRET-oci-token-71ac"),
    ("NATS password", "SECRET-nats-password-71ad"),
    ("plugin signing key setting", "SECRET-plugin-signing-key-71ae"),
    ("plugin peer bearer setting", "SECRET-plugin-peer-bearer-71af"),
];

fn secret(kind: &str) -> &'static str {
    SECRETS.iter().find(|(k, _)| *k == kind).map(|(_, s)| *s).unwrap_or_else(|| panic!("no secret {kind}"))
}

/// A configuration with a secret in every field that holds one, in cluster
/// mode named `cluster` (the NATS server takes a login it does not need).
fn secret_config(dead_port: u16, cluster: &str) -> String {
    let url = cluster::postgres_url();
    let (user, rest) = url.split_once('@').expect("a postgres URL with user@host");
    let nats_url = cluster::nats_url();
    let (scheme, address) = nats_url.split_once("://").expect("a NATS URL");
    let nats = format!("[cluster]\nnats = \"{scheme}://map:{}@{address}\"\nname = {cluster:?}\nnode = \"a\"\n", secret("NATS password"));
    format!(
        r#"
[auth]
anonymous_tenant = ""
token_secret = "{token_secret}"
[admin]
token = "{admin}"
[storage]
url = "{user}:{db}@{rest}"
{nats}
[oci]
auth = {{ "registry.example" = {{ username = "ci", password = "{oci_password}" }}, "other.example" = {{ token = "{oci_token}" }} }}
[plugins.echo]
path = {echo:?}
config = {{ cardSigningKey = "{plugin_key}" }}
[[tenants]]
id = "acme"
api_keys = ["{api_key}", {{ secret = "{named}", principal = "alice" }}]
plugin_config = {{ echo = {{ peers = {{ reports = {{ url = "https://reports.example/a2a", bearer = "{plugin_bearer}" }} }} }} }}
bearer_tokens = ["{bearer}"]
jwt = {{ secret = "{jwt}" }}
[tenants.federation]
system_id = "sys-a"
trusted_issuers = [{{ issuer = "idp", secret = "{issuer}" }}]
[[tenants.federation.peers]]
system_id = "sys-b"
endpoint = "ws://127.0.0.1:{dead_port}/map"
principal = "peer-b"
auth = {{ method = "api-key", credential = "{peer}" }}
[tenants.credentials.providers.vault]
type = "static"
secrets = {{ "github:read" = {{ type = "bearer_token", value = "{static_secret}" }} }}
[tenants.credentials.providers.corp]
type = "oauth2"
token_url = "http://127.0.0.1:{dead_port}/token"
client_id = "gw"
client_secret = "{client}"
scopes = ["corp:*"]
[[tenants.credentials.grants]]
principal = "alice"
scopes = ["github:read", "corp:*"]
resources = ["*"]
"#,
        token_secret = secret("token secret"),
        admin = secret("admin token"),
        db = secret("database password"),
        oci_password = secret("registry password"),
        oci_token = secret("registry token"),
        echo = fixture("echo-v1.wasm"),
        api_key = secret("api key"),
        named = secret("named api key"),
        bearer = secret("bearer token"),
        jwt = secret("JWT HMAC secret"),
        issuer = secret("federation issuer secret"),
        peer = secret("federation peer credential"),
        static_secret = secret("broker static secret"),
        client = secret("broker client secret"),
        plugin_key = secret("plugin signing key setting"),
        plugin_bearer = secret("plugin peer bearer setting"),
    )
}

/// Plugin settings are free-form: a value whose key names a secret (a key,
/// a token, a bearer, a password, …), at any depth, in the plugin's own
/// `config` or a tenant's `plugin_config`, is redacted by `config`, and
/// neither `check` nor the trace log of a gateway that loads and reloads
/// them shows it; the other settings show.
#[tokio::test]
async fn plugin_settings_that_name_a_secret_are_redacted() {
    let dir = TempDir::new("plugin-secrets");
    let extra = format!(
        r#"
[auth]
anonymous_tenant = ""
[plugins.echo]
path = {echo:?}
config = {{ cardSigningKey = "ed25519-secret:SECRET-a2a-card-key", name = "reports-gateway", store = "postgres://gw:SECRET-url-password@db.example/a2a" }}
[[tenants]]
id = "acme"
api_keys = ["acme-key"]
plugin_config = {{ echo = {{ peers = {{ reports = {{ url = "https://reports.example/a2a", bearer = "SECRET-peer-bearer", headers = {{ Authorization = "Basic SECRET-peer-basic", x-team = "ops" }} }} }}, client_secret = "SECRET-client" }} }}
"#,
        echo = fixture("echo-v1.wasm"),
    );
    let config = write_config(dir.path(), 65536, &extra);
    let secrets = ["SECRET-a2a-card-key", "SECRET-url-password", "SECRET-peer-bearer", "SECRET-peer-basic", "SECRET-client"];
    let shown = |what: &str, text: &str| {
        for s in secrets {
            assert!(!text.contains(s), "{s} shows in {what}:\n{text}");
        }
    };
    let out = std::process::Command::new(BIN).args(["config", "--config"]).arg(&config).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    shown("map-gateway config", &text);
    let parsed: toml::Value = toml::from_str(&text).expect("real TOML");
    let (own, tenant) = (&parsed["plugins"]["echo"]["config"], &parsed["tenants"][0]["plugin_config"]["echo"]);
    assert_eq!(own["cardSigningKey"].as_str(), Some("<redacted>"), "{text}");
    assert_eq!(own["name"].as_str(), Some("reports-gateway"), "{text}");
    assert_eq!(own["store"].as_str(), Some("postgres://gw:<redacted>@db.example/a2a"), "{text}");
    let peer = &tenant["peers"]["reports"];
    assert_eq!((peer["bearer"].as_str(), peer["url"].as_str()), (Some("<redacted>"), Some("https://reports.example/a2a")), "{text}");
    assert_eq!((peer["headers"]["Authorization"].as_str(), peer["headers"]["x-team"].as_str()), (Some("<redacted>"), Some("ops")), "{text}");
    assert_eq!(tenant["client_secret"].as_str(), Some("<redacted>"), "{text}");

    let out = std::process::Command::new(BIN).env("MAP_GATEWAY_LOG", "trace").args(["check", "--config"]).arg(&config).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    shown("map-gateway check", &format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));

    let mut gw = Gateway::launch_with(dir, config, None, vec![("MAP_GATEWAY_LOG".into(), "trace".into())]);
    let reload = http(&gw.addr(), "POST", "/admin/reload?wait=true", &[], b"").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    shown("the reload's answer", &reload.text());
    let plugins = http(&gw.addr(), "GET", "/admin/plugins", &[], b"").await;
    shown("/admin/plugins", &plugins.text());
    gw.terminate();
    let log = gw.log();
    assert!(log.contains("plugin loaded"), "the plugin was loaded:\n{log}");
    shown("the trace log", &log);
}

fn assert_no_secret(what: &str, text: &str) {
    for (kind, s) in SECRETS {
        assert!(!text.contains(s), "the {kind} shows in {what}:\n{}", text.lines().filter(|l| l.contains(s)).take(5).collect::<Vec<_>>().join("\n"));
    }
}

/// A gateway (a cluster node) configured with a secret in every field that
/// holds one, its log at trace level: starting, failed and successful
/// authentications, the credentials broker, a reload and every admin
/// endpoint leave none of them in the log or in an admin answer, nor in
/// `config` and `check`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_configured_secret_reaches_a_log_line_an_error_or_an_admin_answer() {
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cluster = cluster::unique_name("maptest", '-');
    cluster::require_nats(&cluster::nats_url());
    let _streams = Streams(cluster.clone());
    let dir = TempDir::new("secrets");
    let config = write_config_server(dir.path(), "", &secret_config(dead_port, &cluster));
    let mut gw = Gateway::launch_with(dir, config.clone(), None, vec![("MAP_GATEWAY_LOG".into(), "trace".into())]);
    let addr = gw.addr();

    // Authentication: refused, then admitted with each kind of credential.
    let mut ws = gw.ws().await;
    let refused = ws.call("map/connect", json!({"protocolVersion": 1, "auth": api_key("not-a-configured-key")})).await;
    assert_eq!(refusal(&refused), "invalid_credentials", "{refused}");
    let (_, _) = gw.ws_connected("client", Some(api_key(secret("api key")))).await;
    let (_, _) = gw.ws_connected("client", Some(json!({"method": "bearer", "token": secret("bearer token")}))).await;
    let mut alice = gw.ws().await;
    let hello =
        json!({"protocolVersion": 1, "participantType": "agent", "auth": api_key(secret("named api key")), "capabilities": {"credentials": {"canGet": true}}});
    alice.call_ok("map/connect", hello).await;
    alice.call_ok("map/agents/register", json!({"agentId": "alice-bot"})).await;
    let issued = alice.call_ok("map/auth/refresh", json!({"method": "api-key", "credential": secret("named api key")})).await;
    assert_eq!(issued["success"], true, "{issued}");
    let wrong = alice.call_ok("map/auth/refresh", json!({"method": "api-key", "credential": secret("api key")})).await;
    assert_eq!(wrong["success"], false, "another principal's credential: {wrong}");
    // The broker hands its static secret to alice (that answer is hers), and fails to reach the token endpoint.
    alice.call_ok("cred/get", json!({"scope": "github:read", "resource": "repo"})).await;
    err(&alice.call("cred/get", json!({"scope": "corp:read", "resource": "repo"})).await);

    // The admin API, with a wrong token and with the right one; a reload.
    let admin = format!("Bearer {}", secret("admin token"));
    assert_eq!(http(&addr, "GET", "/admin/plugins", &[("authorization", "Bearer wrong")], b"").await.status, 401);
    let mut answers = String::new();
    let reload = http(&addr, "POST", "/admin/reload?wait=true", &[("authorization", &admin)], b"").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    answers.push_str(&reload.text());
    for path in [
        "/admin/tenants",
        "/admin/sessions",
        "/admin/agents",
        "/admin/scopes",
        "/admin/subscriptions",
        "/admin/plugins",
        "/admin/reload",
        "/admin/rollout",
        "/metrics",
        "/readyz",
    ] {
        let r = http(&addr, "GET", path, &[("authorization", &admin)], b"").await;
        assert!(r.status < 500, "{path}: {} {}", r.status, r.text());
        answers.push_str(&format!("--- {path}\n{}\n", r.text()));
    }
    assert_no_secret("the admin answers", &answers);

    for command in ["config", "check"] {
        let out = std::process::Command::new(BIN).env("MAP_GATEWAY_LOG", "trace").args([command, "--config"]).arg(&config).output().unwrap();
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        assert_no_secret(&format!("map-gateway {command}"), &format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    }

    gw.terminate();
    let log = gw.log();
    assert!(log.contains(" DEBUG ") && log.contains("joined the cluster"), "the log is below info (at trace), in cluster mode:\n{log}");
    assert_no_secret("the trace log", &log);
}

/// The NATS streams of a cluster, deleted on drop.
struct Streams(String);

impl Drop for Streams {
    fn drop(&mut self) {
        cluster::delete_nats_streams(&cluster::nats_url(), &self.0);
    }
}
