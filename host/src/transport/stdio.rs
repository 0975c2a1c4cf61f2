//! stdio: NDJSON, one JSON-RPC message (or batch) per line, on stdin/stdout.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::core::{Conn, Gateway};
use crate::rpc::{encode_error, RpcError};

/// Serve one peer on stdin/stdout until stdin closes.
pub async fn serve(gw: Arc<Gateway>) -> std::io::Result<()> {
    serve_on(gw, tokio::io::stdin(), tokio::io::stdout()).await
}

pub async fn serve_on<R, W>(gw: Arc<Gateway>, input: R, mut output: W) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = crate::core::outbox::channel(gw.config.limits.outbox_frames, gw.config.limits.outbox_bytes);
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            let mut next = Some(frame);
            while let Some(f) = next {
                output.write_all(&f.single_line()).await?;
                output.write_all(b"\n").await?;
                next = rx.try_recv();
            }
            output.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });
    // The peer on the other end of a pipe is local by construction.
    let mut conn = Conn::new(tx.clone(), true, "stdio");
    let limit = gw.config.server.max_message_bytes;
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let (n, too_long) = read_line_limited(&mut reader, &mut line, limit).await?;
        if n == 0 {
            break;
        }
        let answer = if too_long {
            let err = RpcError::invalid_request(format!("Invalid Request: line exceeds the limit of {limit} bytes"));
            Some(encode_error(&serde_json::Value::Null, &err))
        } else if line.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            gw.handle_frame(&mut conn, &line).await
        };
        if !super::send_answer(&mut conn, answer).await {
            break;
        }
    }
    gw.connection_closed(&mut conn);
    drop(conn);
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}

/// Read one line into `buf`, keeping at most `limit` bytes; the rest of an
/// over-long line is consumed and dropped. Returns (bytes consumed, too long).
async fn read_line_limited<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, limit: usize) -> std::io::Result<(usize, bool)> {
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
