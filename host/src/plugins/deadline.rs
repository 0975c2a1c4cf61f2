//! A future bounded by a deadline, with no timer unless it has to wait.
//! Most plugin calls finish, and most instances are free, at the first
//! poll; a `tokio::time::timeout` would read the clock and take a runtime
//! handle for each of them.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Instant;

/// `fut`'s output, or `None` if `deadline` passed first.
pub async fn by<F: Future>(deadline: Instant, fut: F) -> Option<F::Output> {
    let mut fut = pin!(fut);
    let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline.into())));
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
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
}
