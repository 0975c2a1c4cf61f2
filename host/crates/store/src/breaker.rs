//! PostgreSQL's circuit breaker. Once the database is found unreachable (a
//! connection failed or broke, or the readiness check failed), the store's
//! calls fail at once with `StoreError::Down` instead of each waiting for a
//! connection, while one background probe tries the database every
//! `storage.probe_ms`: a TCP connection first (refused in microseconds),
//! then, once one is accepted, a connection of the pool, which the next
//! call then uses. The first that succeeds closes the breaker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sqlx::postgres::{PgConnectOptions, PgPool};

use super::StoreError;

/// What a call refused by the breaker is told to wait before it tries again.
pub const RETRY_AFTER: Duration = Duration::from_millis(250);
/// How long one probe's connection may take before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub struct Breaker {
    state: Mutex<State>,
    /// Where the database listens over TCP (none: a Unix socket).
    address: Option<(String, u16)>,
    pool: PgPool,
    interval: Duration,
}

#[derive(Default)]
struct State {
    /// Since when the database is unreachable; `None`: up.
    down_since: Option<Instant>,
    /// A probe runs (at most one does).
    probing: bool,
}

impl Breaker {
    pub fn new(options: &PgConnectOptions, pool: PgPool, interval: Duration) -> Arc<Breaker> {
        let address = options.get_socket().is_none().then(|| (options.get_host().to_string(), options.get_port()));
        Arc::new(Breaker { state: Mutex::new(State::default()), address, pool, interval: interval.max(Duration::from_millis(1)) })
    }

    /// `Err(Down)` at once while the database is known to be unreachable.
    pub fn check(&self) -> Result<(), StoreError> {
        match self.state.lock().down_since {
            None => Ok(()),
            Some(since) => {
                Err(StoreError::Down { why: format!("PostgreSQL has been unreachable for {} ms", since.elapsed().as_millis()), retry_after: RETRY_AFTER })
            }
        }
    }

    /// The database was found unreachable: refuse calls until a probe connects.
    pub fn trip(self: &Arc<Self>, why: &str) {
        let mut state = self.state.lock();
        if state.down_since.is_none() {
            state.down_since = Some(Instant::now());
            tracing::warn!(
                error = why,
                probe_ms = self.interval.as_millis() as u64,
                "PostgreSQL is unreachable: storage calls fail at once until a connection succeeds"
            );
        }
        if !state.probing {
            state.probing = true;
            tokio::spawn(self.clone().probe());
        }
    }

    /// Await `op` unless the breaker is open; a failure that says the
    /// database is unreachable opens it.
    pub async fn guard<T>(self: &Arc<Self>, op: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        self.check()?;
        let result = op.await;
        if let Err(StoreError::Down { why, .. }) = &result {
            self.trip(why);
        }
        result
    }

    /// Whether the database takes a connection now: a TCP connection
    /// first, then one of the pool (left in it for the next call).
    async fn reachable(&self) -> bool {
        if let Some((host, port)) = &self.address {
            if !matches!(tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect((host.as_str(), *port))).await, Ok(Ok(_))) {
                return false;
            }
        }
        matches!(tokio::time::timeout(PROBE_TIMEOUT, self.pool.acquire()).await, Ok(Ok(_)))
    }

    /// Try the database every interval until it answers, then close the breaker.
    async fn probe(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.interval).await;
            if self.reachable().await {
                let since = {
                    let mut state = self.state.lock();
                    state.probing = false;
                    state.down_since.take()
                };
                let ms = since.map_or(0, |s| s.elapsed().as_millis() as u64);
                tracing::info!(down_ms = ms, "PostgreSQL is reachable again");
                return;
            }
        }
    }
}
