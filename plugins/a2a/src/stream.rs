//! SendStreamingMessage and SubscribeToTask: the task's recorded updates
//! from a point on, in order, as SSE. The host answers a plugin's request
//! with one whole body, so a stream follows the task for at most
//! `streamWindowMs` (within the plugin's deadline) and ends at the first
//! terminal state or then; a client that saw no terminal state goes on with
//! SubscribeToTask.

use std::time::Duration;

use map_plugin_sdk::{ids, metrics, HttpResponse};
use serde_json::Value;

use crate::jsonrpc::{self, Fault};
use crate::settings::Settings;
use crate::task;

/// Between two looks at the store.
pub fn pause() {
    std::thread::sleep(Duration::from_millis(50));
}

fn is_final(update: &Value) -> bool {
    update["statusUpdate"]["status"]["state"].as_str().and_then(task::parse_state).is_some_and(task::is_terminal)
}

pub fn follow(id: &Value, task_id: &str, from: u64, first: Option<Value>, s: &Settings, legacy: bool) -> HttpResponse {
    // Counted as it opens (`/metrics`: streams under way and done).
    metrics::count("a2a_streams_total", &[("kind", if first.is_some() { "subscribe" } else { "send" })], 1);
    let mut events: Vec<Result<Value, Fault>> = first.into_iter().map(Ok).collect();
    let deadline = ids::now_ms() + s.stream_window_ms;
    let mut next = from;
    loop {
        let fresh = match task::updates(task_id, next) {
            Ok(u) => u,
            Err(e) => {
                events.push(Err(Fault::store(e)));
                break;
            }
        };
        next += fresh.len() as u64;
        let done = fresh.iter().any(is_final);
        events.extend(fresh.into_iter().map(Ok));
        if done || ids::now_ms() >= deadline {
            break;
        }
        pause();
    }
    if legacy {
        events = events.into_iter().map(|e| e.map(|v| crate::compat::result_out(&v))).collect();
    }
    jsonrpc::sse(id, &events)
}
