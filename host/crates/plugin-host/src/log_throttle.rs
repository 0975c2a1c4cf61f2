//! A log line that may repeat often: written at most once a second, with a count.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub struct LogThrottle {
    state: Mutex<(Option<Instant>, u64)>,
}

impl LogThrottle {
    pub fn new() -> LogThrottle {
        LogThrottle { state: Mutex::new((None, 0)) }
    }

    /// Count one occurrence; `Some(n)` when a line for `n` occurrences is due.
    pub fn hit(&self) -> Option<u64> {
        let mut s = self.state.lock();
        s.1 += 1;
        let due = s.0.is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        due.then(|| {
            s.0 = Some(Instant::now());
            std::mem::take(&mut s.1)
        })
    }
}
