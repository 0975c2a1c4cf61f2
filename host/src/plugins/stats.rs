//! What an operator sees of one tenant plugin's calls: how many ended in
//! each outcome, and the last few failures with their reasons.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

/// Every outcome a call can have (also the `outcome` label of the metrics).
const OUTCOMES: [&str; 7] = ["ok", "error", "trap", "timeout", "out_of_memory", "busy", "failed"];

/// Failures kept for the admin API.
const RECENT: usize = 10;

struct Failure {
    at: u64,
    outcome: &'static str,
    reason: String,
}

#[derive(Default)]
pub struct CallStats {
    counts: [AtomicU64; OUTCOMES.len()],
    recent: Mutex<VecDeque<Failure>>,
}

impl CallStats {
    /// Count one call (and export it as a metric); a call that did not
    /// end `ok` keeps its reason among the recent failures.
    pub fn record(&self, plugin: &str, outcome: &'static str, took: Duration, reason: Option<&str>) {
        crate::metrics::plugin_call(plugin, outcome, took);
        if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(reason) = reason.filter(|_| outcome != "ok") {
            let mut recent = self.recent.lock();
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(Failure { at: crate::ids::now_ms(), outcome, reason: reason.to_string() });
        }
    }

    /// `{calls: {outcome: n}, recentFailures: [{at, outcome, reason}]}`, newest failure first.
    pub fn view(&self) -> (Value, Value) {
        let calls: Map<String, Value> = OUTCOMES.iter().zip(&self.counts).map(|(o, n)| (o.to_string(), n.load(Ordering::Relaxed).into())).collect();
        let recent: Vec<Value> = self.recent.lock().iter().rev().map(|f| json!({"at": f.at, "outcome": f.outcome, "reason": f.reason})).collect();
        (Value::Object(calls), Value::Array(recent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outcomes_and_keeps_the_last_failures_newest_first() {
        let s = CallStats::default();
        s.record("p", "ok", Duration::ZERO, None);
        for i in 0..12 {
            s.record("p", "trap", Duration::ZERO, Some(&format!("trap {i}")));
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
