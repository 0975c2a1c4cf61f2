//! Waiting for a state the tests are not told about: `eventually` probes a
//! condition until it holds, `never` checks that one stays false for a while.
//!
//! Use these only where there is no event to wait on: an answer, a
//! notification, a child's exit or a line on a pipe is awaited directly. A
//! probe must end by itself (each call it makes has its own timeout).

use std::fmt::Display;
use std::time::Duration;

use tokio::time::Instant;

/// The first pause between two probes; it doubles up to `MAX_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Probe until `probe` answers `Ok`, and return its value. A probe answers
/// `Err(observed)` while the condition does not hold; at `within` the test
/// fails naming `what` and the last value observed.
pub async fn eventually<T, E: Display>(within: Duration, what: &str, probe: impl AsyncFnMut() -> Result<T, E>) -> T {
    match until(within, probe).await {
        Ok(value) => value,
        Err(observed) => panic!("{what}: not within {within:?}; last observed: {observed}"),
    }
}

/// `eventually` for callers that fail in their own way (with a log, say):
/// `Ok(value)`, or `Err(the last value observed)` once `within` has passed.
pub async fn until<T, E>(within: Duration, mut probe: impl AsyncFnMut() -> Result<T, E>) -> Result<T, E> {
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let observed = match probe().await {
            Ok(value) => return Ok(value),
            Err(observed) => observed,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(observed);
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Probe for `quiet` and fail, naming `what` and what was observed, if the
/// probe ever answers `Some` (the condition that must not hold).
pub async fn never<T: Display>(quiet: Duration, what: &str, mut probe: impl AsyncFnMut() -> Option<T>) {
    let start = Instant::now();
    let end = start + quiet;
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(observed) = probe().await {
            panic!("{what}: happened after {:?}: {observed}", start.elapsed());
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// `eventually` for a test that is not async (no runtime to sleep on).
pub fn eventually_blocking<T, E: Display>(within: Duration, what: &str, mut probe: impl FnMut() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let observed = match probe() {
            Ok(value) => return value,
            Err(observed) => observed,
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            panic!("{what}: not within {within:?}; last observed: {observed}");
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
