//! ACP (Agent Client Protocol, the JSON-RPC editors speak to coding agents)
//! through the gateway: the gateway plays the ACP agent towards an editor
//! and bridges each session to a MAP agent over MAP's ACP tunnel, so an
//! agent built with the MAP SDK's `ACPAgentAdapter` serves editors as is.
//!
//! A host feature rather than a plugin: the bridge is a MAP participant
//! with a connection of its own to the editor (a WebSocket at `/acp`, or
//! stdio when an editor launches `map-gateway acp`), which the plugin
//! contract (calls in, no long-lived sockets) does not give plugins.
//!
//! - `link`: the MAP side (a session in this gateway, or over WebSocket);
//! - `wss`: the certificates a `wss://` link trusts;
//! - `bridge`: one editor connection, translated both ways;
//! - `compat`: the `_map/*` methods for ACP-only clients.

pub mod bridge;
mod compat;
pub mod link;
pub mod wss;

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::framing::{read_cap, read_line_limited};

/// `map-gateway acp`: an editor on stdin/stdout (one JSON-RPC message per
/// line), bridged to `opts.agent` on the gateway at `url`, whose message
/// limit is taken to be `opts.max_message_bytes`. Returns when the editor
/// closes stdin.
pub async fn serve_stdio(url: &str, opts: bridge::Options, api_key: Option<String>, token: Option<String>) -> anyhow::Result<()> {
    let bounds = link::Bounds { max_frame_bytes: opts.max_message_bytes, call_timeout: opts.agent_request_timeout };
    let (link, notes) = link::websocket(url, bounds, None).await?;
    let auth = match (api_key, token) {
        (Some(k), _) => Some(json!({"method": "api-key", "credential": k})),
        (None, Some(t)) => Some(json!({"method": "bearer", "credential": t})),
        _ => None,
    };
    let (in_tx, in_rx) = mpsc::channel::<String>(64);
    let (out_tx, mut out_rx) = mpsc::channel::<String>(1024);
    // A line too long to be kept is refused here; weak, so the editor's
    // output still ends when the bridge does.
    let refusals = out_tx.downgrade();
    let limit = opts.max_message_bytes;
    tokio::spawn(async move {
        let mut input = BufReader::new(tokio::io::stdin());
        let mut line = Vec::new();
        loop {
            line.clear();
            let (n, dropped) = match read_line_limited(&mut input, &mut line, read_cap(limit)).await {
                Ok((0, _)) | Err(_) => break,
                Ok(read) => read,
            };
            if dropped {
                if let Some(out) = refusals.upgrade() {
                    let _ = out.send(bridge::too_large(&Value::Null, n, limit)).await;
                }
            } else if !line.iter().all(u8::is_ascii_whitespace) && in_tx.send(String::from_utf8_lossy(&line).into_owned()).await.is_err() {
                break;
            }
        }
    });
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(line) = out_rx.recv().await {
            if out.write_all(line.as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    bridge::run(link, notes, in_rx, out_tx, opts, auth).await;
    let _ = writer.await;
    Ok(())
}
