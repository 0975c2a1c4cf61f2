//! Outbound HTTP through `wasi:http/outgoing-handler`: the host lets a
//! plugin reach only the hosts the deployment lists in its `outbound_hosts`
//! (any other request fails with an error), within `outbound_timeout_ms`
//! and `outbound_max_bytes`.

use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

/// A base URL split for `wasi:http`: `http(s)://authority[/path]`.
pub struct Url {
    pub https: bool,
    pub authority: String,
    pub path: String,
}

impl Url {
    pub fn parse(url: &str) -> Option<Url> {
        let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(r), _) => (true, r),
            (None, Some(r)) => (false, r),
            _ => return None,
        };
        let (authority, path) = rest.split_once('/').map_or((rest, String::new()), |(a, p)| (a, format!("/{}", p.trim_end_matches('/'))));
        (!authority.is_empty()).then(|| Url { https, authority: authority.to_string(), path })
    }
}

/// POST `body` as JSON to `url` + `path`: the status and the response body.
pub fn post_json(url: &Url, path: &str, bearer: Option<&str>, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let auth = bearer.map(|key| format!("Bearer {key}"));
    let headers: Vec<(&str, &str)> = auth.as_deref().map(|a| ("authorization", a)).into_iter().collect();
    request("POST", url, path, &headers, Some(("application/json", body)), 1 << 20)
}

/// GET `url` + `path` with `headers`: the status and at most `max_bytes` of body.
pub fn get(url: &Url, path: &str, headers: &[(&str, &str)], max_bytes: usize) -> Result<(u16, Vec<u8>), String> {
    request("GET", url, path, headers, None, max_bytes)
}

/// One request: `method` to `url` + `path` (which may carry a query), with
/// `headers` and, when given, a body of a content type. The status and the
/// response body, an error past `max_bytes` of it.
pub fn request(method: &str, url: &Url, path: &str, headers: &[(&str, &str)], body: Option<(&str, &[u8])>, max_bytes: usize) -> Result<(u16, Vec<u8>), String> {
    let fields = Fields::new();
    for (k, v) in headers {
        fields.append(k, v.as_bytes()).map_err(|e| format!("header {k}: {e:?}"))?;
    }
    if let Some((content_type, bytes)) = body {
        fields.append("content-type", content_type.as_bytes()).map_err(|e| format!("header: {e:?}"))?;
        // A length, not chunks: many small HTTP servers read only bodies of a known length.
        fields.append("content-length", bytes.len().to_string().as_bytes()).map_err(|e| format!("header: {e:?}"))?;
    }
    let req = OutgoingRequest::new(fields);
    let method = match method {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        other => Method::Other(other.to_string()),
    };
    req.set_method(&method).map_err(|_| "method")?;
    req.set_scheme(Some(if url.https { &Scheme::Https } else { &Scheme::Http })).map_err(|_| "scheme")?;
    req.set_authority(Some(&url.authority)).map_err(|_| format!("authority {}", url.authority))?;
    req.set_path_with_query(Some(&format!("{}{path}", url.path))).map_err(|_| "path")?;
    let outgoing = req.body().map_err(|_| "request body")?;
    if let Some((_, bytes)) = body {
        let stream = outgoing.write().map_err(|_| "request stream")?;
        for chunk in bytes.chunks(4096) {
            stream.blocking_write_and_flush(chunk).map_err(|e| format!("sending the body: {e:?}"))?;
        }
    }
    let pending = outgoing_handler::handle(req, None).map_err(|e| format!("{e:?}"))?;
    OutgoingBody::finish(outgoing, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let resp = match pending.get() {
        Some(Ok(Ok(r))) => r,
        Some(Ok(Err(e))) => return Err(format!("{e:?}")),
        _ => return Err("no response".into()),
    };
    let status = resp.status();
    let incoming = resp.consume().map_err(|_| "response body")?;
    let stream = incoming.stream().map_err(|_| "response stream")?;
    let mut out = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => out.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => return Err(format!("reading the response: {}", e.to_debug_string())),
        }
        if out.len() > max_bytes {
            return Err(format!("the response is larger than {max_bytes} bytes"));
        }
    }
    drop(stream);
    let _ = IncomingBody::finish(incoming);
    Ok((status, out))
}
