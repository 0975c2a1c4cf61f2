//! stdio: NDJSON, one JSON-RPC message (or batch) per line, on stdin/stdout.

use std::sync::Arc;

use tokio::io::{AsyncWriteExt, BufReader};

use crate::framing::read_line_limited;
use map_core::{Conn, Gateway};
use map_protocol::rpc::{encode_error, RpcError};

/// Serve one peer on stdin/stdout until stdin closes.
pub async fn serve(gw: Arc<Gateway>) -> std::io::Result<()> {
    serve_on(gw, tokio::io::stdin(), tokio::io::stdout()).await
}

pub async fn serve_on<R, W>(gw: Arc<Gateway>, input: R, mut output: W) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = map_core::outbox::channel(gw.config.limits.outbox_frames, gw.config.limits.outbox_bytes);
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
