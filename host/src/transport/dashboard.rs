//! `GET /dashboard`: the live dashboard, a static page embedded in the
//! binary. It holds no data: it asks for a tenant credential and the admin
//! token, and reads everything through `/map` and the admin API.
//! `MAP_GATEWAY_DASHBOARD_DIR` serves the files from a directory instead,
//! read at each request (for working on the page).

use hyper::{Method, Response, StatusCode};

use super::reply::{full, method_not_allowed, Body};

const FILES: [(&str, &str, &str); 3] = [
    ("index.html", "text/html; charset=utf-8", include_str!("../../dashboard/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../../dashboard/app.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("../../dashboard/style.css")),
];

pub fn serve(method: &Method, path: &str) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        return method_not_allowed("GET");
    }
    let name = match path.trim_start_matches("/dashboard").trim_start_matches('/') {
        "" => "index.html",
        other => other,
    };
    let Some((name, content_type, embedded)) = FILES.iter().find(|(n, ..)| *n == name) else {
        return full(StatusCode::NOT_FOUND, "text/plain", "not found\n");
    };
    let body = match std::env::var_os("MAP_GATEWAY_DASHBOARD_DIR") {
        Some(dir) => match std::fs::read_to_string(std::path::Path::new(&dir).join(name)) {
            Ok(text) => text,
            Err(e) => return full(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{name}: {e}\n")),
        },
        None => embedded.to_string(),
    };
    let mut resp = full(StatusCode::OK, content_type, body);
    let h = resp.headers_mut();
    // The page runs only its own files, and never inside another site's frame.
    h.insert(
        "content-security-policy",
        hyper::header::HeaderValue::from_static("default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'"),
    );
    h.insert("x-content-type-options", hyper::header::HeaderValue::from_static("nosniff"));
    h.insert("cache-control", hyper::header::HeaderValue::from_static("no-cache"));
    resp
}
