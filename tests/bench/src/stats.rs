//! Latency samples (nanoseconds) and their percentiles.

/// At most this many samples per scenario (≈ 64 MB); later ones are only counted.
const MAX_SAMPLES: usize = 8_000_000;

#[derive(Default, Clone)]
pub struct Samples {
    ns: Vec<u64>,
    pub dropped: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl Samples {
    pub fn record(&mut self, ns: u64) {
        if self.ns.len() < MAX_SAMPLES {
            self.ns.push(ns);
        } else {
            self.dropped += 1;
        }
    }

    pub fn merge(&mut self, other: Samples) {
        if self.ns.is_empty() {
            self.ns = other.ns;
        } else {
            self.ns.extend(other.ns);
        }
        self.dropped += other.dropped;
    }

    /// Nearest-rank percentiles.
    pub fn summary(&mut self) -> Summary {
        if self.ns.is_empty() {
            return Summary::default();
        }
        self.ns.sort_unstable();
        let n = self.ns.len();
        let at = |q: f64| self.ns[((q * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1000.0;
        Summary { count: n as u64, p50_us: at(0.50), p99_us: at(0.99), max_us: self.ns[n - 1] as f64 / 1000.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut s = Samples::default();
        for i in 1..=100u64 {
            s.record(i * 1000);
        }
        let m = s.summary();
        assert_eq!(m.p50_us, 50.0);
        assert_eq!(m.p99_us, 99.0);
        assert_eq!(m.max_us, 100.0);
    }
}
