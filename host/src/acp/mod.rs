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
//! - `bridge`: one editor connection, translated both ways;
//! - `compat`: the `_map/*` methods for ACP-only clients.

pub mod bridge;
mod compat;
pub mod link;

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// `map-gateway acp`: an editor on stdin/stdout (one JSON-RPC message per
/// line), bridged to `agent` on the gateway at `url`. Returns when the
/// editor closes stdin.
pub async fn serve_stdio(url: &str, agent: &str, api_key: Option<String>, token: Option<String>, client_request_timeout: Duration) -> anyhow::Result<()> {
    let (link, notes) = link::websocket(url).await?;
    let auth = match (api_key, token) {
        (Some(k), _) => Some(json!({"method": "api-key", "credential": k})),
        (None, Some(t)) => Some(json!({"method": "bearer", "credential": t})),
        _ => None,
    };
    let (in_tx, in_rx) = mpsc::channel::<String>(64);
    let (out_tx, mut out_rx) = mpsc::channel::<String>(1024);
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if !line.trim().is_empty() && in_tx.send(line).await.is_err() {
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
    let opts = bridge::Options { agent: agent.to_string(), client_request_timeout };
    bridge::run(link, notes, in_rx, out_tx, opts, auth).await;
    let _ = writer.await;
    Ok(())
}
