//! A future bounded by a deadline, with no timer unless it has to wait.
//! Most plugin calls finish, and most instances are free, at the first
//! poll; a `tokio::time::timeout` would read the clock and take a runtime
//! handle for each of them.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

/// `fut`'s output, or `None` if `deadline` passed first.
pub async fn by<F: Future>(deadline: Instant, fut: F) -> Option<F::Output> {
    by_excused(deadline, &AtomicU64::new(0), fut).await
}

/// `by`, with the deadline moved later by the nanoseconds `excused` holds
/// (which may grow while `fut` runs: a plugin call's waits for the store).
pub async fn by_excused<F: Future>(deadline: Instant, excused: &AtomicU64, fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        loop {
            let due = tokio::time::Instant::from(deadline + Duration::from_nanos(excused.load(Ordering::Relaxed)));
            let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if timer.deadline() < due {
                timer.as_mut().reset(due);
            }
            match timer.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // Excused more while the timer ran: wait for the new end.
                Poll::Ready(()) if excused_since(excused, due, deadline) => continue,
                Poll::Ready(()) => return Poll::Ready(None),
            }
        }
    })
    .await
}

/// Whether the excuse has grown past `due` (set from `deadline` and the excuse then).
fn excused_since(excused: &AtomicU64, due: tokio::time::Instant, deadline: Instant) -> bool {
    tokio::time::Instant::from(deadline + Duration::from_nanos(excused.load(Ordering::Relaxed))) > due
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_ready_future_needs_no_timer_and_a_waiting_one_ends_at_the_deadline() {
        assert_eq!(by(Instant::now(), async { 7 }).await, Some(7), "ready at the first poll, even at the deadline");
        let started = Instant::now();
        assert_eq!(by(started + Duration::from_millis(20), std::future::pending::<()>()).await, None);
        assert!(started.elapsed() >= Duration::from_millis(20));
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move { tx.send(3).unwrap() });
        assert_eq!(by(Instant::now() + Duration::from_secs(5), rx).await, Some(Ok(3)), "a wake-up reaches the future");
    }

    #[tokio::test]
    async fn time_excused_while_the_future_runs_moves_the_deadline() {
        let excused = std::sync::Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let more = excused.clone();
        tokio::spawn(async move {
            // Past the first deadline: excused 60 ms at 10 ms, then done at 50 ms.
            tokio::time::sleep(Duration::from_millis(10)).await;
            more.fetch_add(60_000_000, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(40)).await;
            tx.send(()).unwrap();
        });
        assert_eq!(by_excused(started + Duration::from_millis(20), &excused, rx).await, Some(Ok(())), "done within the excused time");
        assert!(started.elapsed() >= Duration::from_millis(50));
        let started = Instant::now();
        assert_eq!(by_excused(started + Duration::from_millis(10), &excused, std::future::pending::<()>()).await, None, "a future that never ends stops at the deadline plus the time excused");
        assert!(started.elapsed() >= Duration::from_millis(70), "{:?}", started.elapsed());
    }
}
