//! What an operator sees of one tenant plugin's calls: how many ended in
//! each outcome, and the last few failures with their reasons.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use super::outcome::CallOutcome;

/// Failures kept for the admin API.
const RECENT: usize = 10;

struct RecentFailure {
    at: u64,
    outcome: CallOutcome,
    reason: String,
}

#[derive(Default)]
pub struct CallStats {
    counts: [AtomicU64; CallOutcome::ALL.len()],
    recent: Mutex<VecDeque<RecentFailure>>,
}

impl CallStats {
    /// Count one call (and export it as a metric); a call that did not
    /// end `ok` keeps its reason among the recent failures.
    pub fn record(&self, plugin: &str, outcome: CallOutcome, took: Duration, reason: Option<&str>) {
        map_observe::metrics::plugin_call(plugin, outcome.label(), took);
        self.counts[outcome as usize].fetch_add(1, Ordering::Relaxed);
        if let Some(reason) = reason.filter(|_| outcome != CallOutcome::Ok) {
            let mut recent = self.recent.lock();
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(RecentFailure { at: map_protocol::ids::now_ms(), outcome, reason: reason.to_string() });
        }
    }

    /// `{calls: {outcome: n}, recentFailures: [{at, outcome, reason}]}`, newest failure first.
    pub fn view(&self) -> (Value, Value) {
        let calls: Map<String, Value> =
            CallOutcome::ALL.iter().zip(&self.counts).map(|(o, n)| (o.label().to_string(), n.load(Ordering::Relaxed).into())).collect();
        let recent: Vec<Value> = self.recent.lock().iter().rev().map(|f| json!({"at": f.at, "outcome": f.outcome.label(), "reason": f.reason})).collect();
        (Value::Object(calls), Value::Array(recent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outcomes_and_keeps_the_last_failures_newest_first() {
        let s = CallStats::default();
        s.record("p", CallOutcome::Ok, Duration::ZERO, None);
        for i in 0..12 {
            s.record("p", CallOutcome::Trapped, Duration::ZERO, Some(&format!("trap {i}")));
        }
        let (calls, recent) = s.view();
        assert_eq!(calls["ok"], 1);
        assert_eq!(calls["trap"], 12);
        assert_eq!(calls["timeout"], 0);
        let recent = recent.as_array().unwrap();
        assert_eq!(recent.len(), RECENT);
        assert_eq!(recent[0]["reason"], "trap 11");
        assert_eq!(recent[RECENT - 1]["reason"], "trap 2");
    }
}
