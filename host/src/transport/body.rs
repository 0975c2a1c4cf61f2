//! Request bodies read whole (up to the gateway's limit, within 5 s), and
//! the answer that refuses one over the limit.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::Response;

use super::reply::Body;

pub(super) enum BodyError {
    TooLarge,
    Unreadable,
}

/// Read a body up to `limit` bytes, for at most 5 s. One declared larger,
/// or that grows larger, is refused at once.
pub(super) async fn read_body(mut body: Incoming, limit: usize) -> Result<Bytes, BodyError> {
    if hyper::body::Body::size_hint(&body).lower() > limit as u64 {
        return Err(BodyError::TooLarge);
    }
    let mut out = Vec::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return Err(BodyError::Unreadable) };
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > limit {
                    return Err(BodyError::TooLarge);
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.map_err(|_| BodyError::Unreadable)??;
    Ok(Bytes::from(out))
}

/// The answer to a body over the limit closes the connection, which reads
/// on (and discards) what the peer still sends so the answer is not lost
/// to a reset.
pub(super) fn refusing_body(mut resp: Response<Body>, linger: Option<super::Linger>) -> Response<Body> {
    if let Some(linger) = linger {
        linger.set();
    }
    resp.headers_mut().insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    resp
}
