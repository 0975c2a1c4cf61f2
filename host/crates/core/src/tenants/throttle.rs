//! Failed authentications per source address: past the limit in one minute,
//! an address is refused until that minute ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use map_protocol::rpc::{codes, RpcError};

const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at most; the oldest windows are dropped first.
const MAX_TRACKED: usize = 100_000;

pub struct Throttle {
    per_minute: u32,
    windows: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Throttle {
    pub fn new(per_minute: u32) -> Throttle {
        Throttle { per_minute: per_minute.max(1), windows: Mutex::new(HashMap::new()) }
    }

    /// `Err` (4000, `retryAfterMs`) while the address is over its limit.
    pub fn check(&self, ip: IpAddr) -> Result<(), RpcError> {
        let windows = self.windows.lock();
        match windows.get(&ip) {
            Some((start, n)) if *n >= self.per_minute && start.elapsed() < WINDOW => {
                let retry = (WINDOW - start.elapsed()).as_millis() as u64;
                Err(RpcError::new(codes::RESOURCE_EXHAUSTED, "Too many failed authentications from this address; try again later")
                    .with_data(serde_json::json!({"retryAfterMs": retry})))
            }
            _ => Ok(()),
        }
    }

    /// Count one failure.
    pub fn failed(&self, ip: IpAddr) {
        let mut windows = self.windows.lock();
        if windows.len() >= MAX_TRACKED {
            windows.retain(|_, (start, _)| start.elapsed() < WINDOW);
        }
        let entry = windows.entry(ip).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= WINDOW {
            *entry = (Instant::now(), 0);
        }
        entry.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_limit_and_only_that_address() {
        let t = Throttle::new(3);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert!(t.check(a).is_ok());
            t.failed(a);
        }
        let e = t.check(a).unwrap_err();
        assert_eq!(e.code, codes::RESOURCE_EXHAUSTED);
        assert!(e.data.unwrap()["retryAfterMs"].as_u64().unwrap() > 0);
        assert!(t.check(b).is_ok());
    }
}
