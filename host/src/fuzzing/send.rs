//! `map/send` params from a peer, through the core of a gateway whose two
//! sessions own agents `alice` (role `lead`) and `bob` (role `worker`,
//! alice's child), both in scope `team`.

use std::cell::RefCell;
use std::sync::Arc;

use serde_json::{json, Value};

use map_config::Config;
use map_core::outbox::{channel, FrameRx};
use map_core::{Conn, Gateway};

struct Peer {
    conn: Conn,
    rx: FrameRx,
}

struct World {
    gw: Arc<Gateway>,
    alice: Peer,
    bob: Peer,
}

thread_local! {
    static WORLD: RefCell<Option<World>> = const { RefCell::new(None) };
}

async fn call(gw: &Arc<Gateway>, peer: &mut Peer, method: &str, params: Value) {
    let frame = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let answer = gw.handle_frame(&mut peer.conn, frame.as_bytes()).await.expect("an answer");
    assert!(answer.contains("\"result\""), "{method} failed: {answer}");
    while peer.rx.try_recv().is_some() {}
}

async fn world() -> World {
    let gw = Gateway::new(Config::default());
    let peer = || {
        let (tx, rx) = channel(1 << 16, 1 << 30);
        Peer { conn: Conn::new(tx, true, "fuzz"), rx }
    };
    let (mut alice, mut bob) = (peer(), peer());
    let hello = json!({"protocolVersion": 1, "participantType": "agent"});
    call(&gw, &mut alice, "map/connect", hello.clone()).await;
    call(&gw, &mut bob, "map/connect", hello).await;
    call(&gw, &mut alice, "map/scopes/create", json!({"scopeId": "team", "name": "team"})).await;
    call(&gw, &mut alice, "map/agents/register", json!({"agentId": "alice", "role": "lead", "scopes": ["team"]})).await;
    call(&gw, &mut bob, "map/agents/register", json!({"agentId": "bob", "role": "worker", "parent": "alice", "scopes": ["team"]})).await;
    World { gw, alice, bob }
}

/// Every `map/message` a recipient got: JSON on one line, carrying the
/// `to` and `payload` the sender gave.
fn check_delivered(peer: &mut Peer, params: Option<&Value>) -> usize {
    let mut n = 0;
    while let Some(frame) = peer.rx.try_recv() {
        let v: Value = serde_json::from_str(frame.as_str()).unwrap_or_else(|e| panic!("a frame that is not JSON ({e}): {}", frame.as_str()));
        assert_eq!(serde_json::from_slice::<Value>(&frame.single_line()).expect("one line is JSON"), v);
        if v["method"] != "map/message" {
            continue;
        }
        n += 1;
        let (Some(p), message) = (params, &v["params"]["message"]) else { continue };
        assert_eq!(message["to"], p["to"], "the message's address is not the sender's");
        assert_eq!(message.get("payload"), p.get("payload").filter(|p| !p.is_null()), "the payload changed");
    }
    n
}

/// The params of a `map/send` from alice: the answer is JSON-RPC with the
/// request's id; what was delivered is what was sent, and reached someone
/// exactly when the answer says so.
pub fn map_send(data: &[u8]) {
    let mut frame = br#"{"jsonrpc":"2.0","id":7,"method":"map/send","params":"#.to_vec();
    frame.extend_from_slice(data);
    frame.push(b'}');
    super::runtime::block_on(async {
        let mut world = WORLD.with(|w| w.borrow_mut().take());
        if world.is_none() {
            world = Some(self::world().await);
        }
        let w = world.as_mut().expect("made above");
        let answer = w.gw.handle_frame(&mut w.alice.conn, &frame).await;
        w.alice.conn.deferred.clear();
        let answer: Value = answer.map(|a| serde_json::from_str(&a).unwrap_or_else(|e| panic!("an answer that is not JSON ({e}): {a}"))).unwrap_or(Value::Null);
        let request = serde_json::from_slice::<Value>(&frame).ok().filter(|r| r["id"] == 7 && r["method"] == "map/send");
        let params = request.as_ref().map(|r| &r["params"]).filter(|p| p.is_object());
        let delivered = check_delivered(&mut w.bob, params) + check_delivered(&mut w.alice, params);
        if request.is_some() {
            assert_eq!(answer["id"], 7, "answered another id: {answer}");
            assert!(answer.get("result").is_some() != answer.get("error").is_some(), "{answer}");
        }
        if let Some(list) = answer["result"]["delivered"].as_array() {
            // One frame per session, whatever number of its agents it reached.
            assert_eq!(delivered > 0, !list.is_empty(), "delivered {delivered} messages, answered {answer}");
            assert!(delivered <= 2);
        }
        WORLD.with(|w| *w.borrow_mut() = world);
    });
}
