//! Reading messages under a size limit: how far past the limit a message
//! is still read whole (so a transport can refuse it and read on), and
//! NDJSON lines that stop being kept past a limit.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Messages past `limit` but within this are read whole and refused with an
/// error; larger ones are not kept at all.
pub fn read_cap(limit: usize) -> usize {
    limit.saturating_mul(4).max(16 << 20)
}

/// Read one line into `buf`, keeping at most `limit` bytes; the rest of an
/// over-long line is consumed and dropped. Returns (bytes consumed, too long).
pub async fn read_line_limited<R: AsyncBufRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, limit: usize) -> std::io::Result<(usize, bool)> {
    let mut consumed = 0;
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok((consumed, too_long));
        }
        let (part, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (&chunk[..i], i + 1),
            None => (chunk, chunk.len()),
        };
        if buf.len() + part.len() > limit {
            too_long = true;
        } else if !too_long {
            buf.extend_from_slice(part);
        }
        let ended = done > part.len();
        r.consume(done);
        consumed += done;
        if ended {
            return Ok((consumed, too_long));
        }
    }
}
