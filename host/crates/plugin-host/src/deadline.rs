//! A future bounded by a deadline, with no timer unless it has to wait.
//! Most plugin calls finish, and most instances are free, at the first
//! poll; a `tokio::time::timeout` would read the clock and take a runtime
//! handle for each of them.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// `fut`'s output, or `None` if `deadline` passed first.
pub async fn by<F: Future>(deadline: Instant, fut: F) -> Option<F::Output> {
    by_extended(deadline, || Duration::ZERO, fut).await
}

/// `by`, with the deadline moved later by what `extension` says, which may
/// change while `fut` runs (a plugin call's waits for the store). It is
/// asked again whenever `fut` is polled and when the timer fires, so it
/// must not grow by itself with time: a wait still going on counts as
/// its bound.
pub async fn by_extended<F: Future>(deadline: Instant, extension: impl Fn() -> Duration, fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        loop {
            let due = tokio::time::Instant::from(deadline + extension());
            let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if timer.deadline() != due {
                timer.as_mut().reset(due);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // Unless it was extended while the timer ran: then wait for the new end.
            if deadline + extension() <= due.into_std() {
                return Poll::Ready(None);
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
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
    async fn an_extension_given_while_the_future_runs_moves_the_deadline() {
        let extension = std::sync::Arc::new(AtomicU64::new(0));
        let ms = |a: &AtomicU64| Duration::from_millis(a.load(Ordering::Relaxed));
        let started = Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let more = extension.clone();
        tokio::spawn(async move {
            // Past the first deadline: 60 ms more at 10 ms, then done at 50 ms.
            tokio::time::sleep(Duration::from_millis(10)).await;
            more.store(60, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(40)).await;
            tx.send(()).unwrap();
        });
        assert_eq!(by_extended(started + Duration::from_millis(20), || ms(&extension), rx).await, Some(Ok(())), "done within the extension");
        assert!(started.elapsed() >= Duration::from_millis(50));
        let started = Instant::now();
        let pending = std::future::pending::<()>();
        assert_eq!(
            by_extended(started + Duration::from_millis(10), || ms(&extension), pending).await,
            None,
            "a future that never ends stops at the deadline plus the extension"
        );
        assert!(started.elapsed() >= Duration::from_millis(70), "{:?}", started.elapsed());
    }
}
