//! What a plugin writes to stdout and stderr. Each instance's output is
//! kept (bounded) and logged after each call, tagged with plugin and tenant;
//! a call that fails names the last line of stderr, where a Rust panic
//! says why it happened.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

use super::log_throttle::LogThrottle;

/// Bytes kept between two calls; the rest of a call's output is dropped.
const CAPACITY: usize = 16 << 10;

/// One instance's stdout or stderr.
#[derive(Clone, Default)]
pub struct Captured {
    buf: Arc<Mutex<(Vec<u8>, bool)>>,
}

impl Captured {
    fn push(&self, bytes: &[u8]) {
        let mut b = self.buf.lock();
        let room = CAPACITY.saturating_sub(b.0.len());
        b.0.extend_from_slice(&bytes[..bytes.len().min(room)]);
        b.1 |= bytes.len() > room;
    }

    /// The lines written since the last call, and whether some were dropped.
    pub fn take(&self) -> (Vec<String>, bool) {
        let (bytes, dropped) = {
            let mut buf = self.buf.lock();
            if buf.0.is_empty() && !buf.1 {
                // Most calls write nothing.
                return (Vec::new(), false);
            }
            std::mem::take(&mut *buf)
        };
        let text = String::from_utf8_lossy(&bytes);
        (text.lines().filter(|l| !l.trim().is_empty()).map(|l| l.chars().take(1000).collect()).collect(), dropped)
    }
}

/// Log what an instance wrote to stdout and stderr during a call (at most
/// one call's output per second per tenant plugin, as `throttle` lets
/// through); the last two lines of stderr, for the call's failure.
pub fn log_call_output(stdout: &Captured, stderr: &Captured, throttle: &LogThrottle, plugin: &str, tenant: &str) -> Option<String> {
    let (out, out_dropped) = stdout.take();
    let (err, err_dropped) = stderr.take();
    if out.is_empty() && err.is_empty() {
        return None;
    }
    if let Some(calls) = throttle.hit() {
        for line in out.iter().take(20) {
            tracing::info!(plugin, tenant, stream = "stdout", calls, "{line}");
        }
        for line in err.iter().take(20) {
            tracing::warn!(plugin, tenant, stream = "stderr", calls, "{line}");
        }
        if out_dropped || err_dropped || out.len() > 20 || err.len() > 20 {
            tracing::warn!(plugin, tenant, "more plugin output was not logged");
        }
    }
    // A Rust panic ends with where it happened, its message, and a note about backtraces.
    let telling: Vec<&String> = err.iter().filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE")).collect();
    (!telling.is_empty()).then(|| telling[telling.len().saturating_sub(2)..].iter().map(|l| l.as_str()).collect::<Vec<_>>().join(" "))
}

impl IsTerminal for Captured {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Captured {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl OutputStream for Captured {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    /// Always room: what does not fit is dropped, so a chatty plugin never blocks.
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(CAPACITY)
    }
}

#[async_trait::async_trait]
impl Pollable for Captured {
    async fn ready(&mut self) {}
}

impl AsyncWrite for Captured {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_kept_in_lines_up_to_its_bound() {
        let c = Captured::default();
        c.push(b"first line\n\nsecond");
        assert_eq!(c.take(), (vec!["first line".to_string(), "second".to_string()], false));
        assert_eq!(c.take(), (Vec::new(), false), "taken once");
        c.push(&vec![b'x'; CAPACITY + 10]);
        let (lines, dropped) = c.take();
        assert!(dropped && lines[0].len() == 1000, "long lines are cut and the overflow noted");
    }
}
