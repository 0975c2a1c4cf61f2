//! NATS and PostgreSQL as `map-bench cluster` needs them: reachability
//! checks, a database of a run's own, and the clean-up of a cluster's
//! JetStream streams, over the plain wire protocols (no client libraries).

use std::fmt::Write as _;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// How long the reachability checks and the stream clean-up wait for an answer.
const NET_TIMEOUT: Duration = Duration::from_secs(3);

/// `scheme://[user[:password]@]host[:port][/…]` → `host:port` (the first
/// server of a comma-separated NATS list).
fn authority(url: &str, default_port: u16) -> Result<String, String> {
    let (_, rest) = url.split_once("://").ok_or_else(|| format!("{url}: not a URL"))?;
    let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    let host = hosts.split(',').next().unwrap_or(hosts);
    if host.is_empty() {
        return Err(format!("{url}: no host (map-bench checks TCP servers only)"));
    }
    let has_port = host
        .rsplit_once(':')
        .is_some_and(|(h, port)| !h.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && (!h.contains(':') || h.ends_with(']')));
    Ok(if has_port { host.to_string() } else { format!("{host}:{default_port}") })
}

async fn tcp(what: &str, url: &str, default_port: u16) -> Result<TcpStream, String> {
    let addr = authority(url, default_port)?;
    match tokio::time::timeout(NET_TIMEOUT, TcpStream::connect(&addr)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("{what} at {url} is unreachable ({addr}: {e})")),
        Err(_) => Err(format!("{what} at {url} is unreachable ({addr}: no connection in {NET_TIMEOUT:?})")),
    }
}

/// A NATS connection after the server's `INFO` line (returned too).
async fn nats_open(url: &str) -> Result<(BufReader<TcpStream>, String), String> {
    let mut r = BufReader::new(tcp("NATS", url, 4222).await?);
    let mut info = String::new();
    match tokio::time::timeout(NET_TIMEOUT, r.read_line(&mut info)).await {
        Ok(Ok(_)) if info.starts_with("INFO ") => Ok((r, info)),
        Ok(Ok(_)) => Err(format!("{url} does not answer like a NATS server (first line {:?})", info.trim_end())),
        Ok(Err(e)) => Err(format!("NATS at {url}: {e}")),
        Err(_) => Err(format!("NATS at {url}: no INFO line in {NET_TIMEOUT:?}")),
    }
}

pub async fn check_nats(url: &str) -> Result<(), String> {
    let (_, info) = nats_open(url).await?;
    if !info.contains("\"jetstream\":true") {
        return Err(format!("the NATS server at {url} has no JetStream (start it with nats-server -js)"));
    }
    Ok(())
}

/// A TCP connection and an SSLRequest, which every PostgreSQL server answers
/// with one byte (`S` or `N`) before any authentication.
pub async fn check_postgres(url: &str) -> Result<(), String> {
    let mut s = tcp("PostgreSQL", url, 5432).await?;
    let answer = async {
        s.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        Ok::<u8, std::io::Error>(b[0])
    };
    match tokio::time::timeout(NET_TIMEOUT, answer).await {
        Ok(Ok(b'S' | b'N')) => Ok(()),
        Ok(Ok(b)) => Err(format!("{url} does not answer like a PostgreSQL server (byte {b:#04x})")),
        Ok(Err(e)) => Err(format!("PostgreSQL at {url}: {e}")),
        Err(_) => Err(format!("PostgreSQL at {url}: no answer in {NET_TIMEOUT:?}")),
    }
}

/// How long CREATE DATABASE and DROP DATABASE may take.
const DDL_TIMEOUT: Duration = Duration::from_secs(30);

/// `url` naming database `db` instead of its own (the query string kept).
pub fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let query = rest.find('?').map_or("", |i| &rest[i..]);
    format!("{scheme}://{}/{db}{query}", &rest[..end])
}

/// User, password and database of a PostgreSQL URL (percent-escapes are
/// not decoded; no user: `$USER`, as libpq does; no database: the user's).
fn pg_login(url: &str) -> (String, Option<String>, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (user, password) = match rest[..end].rsplit_once('@') {
        Some((info, _)) => match info.split_once(':') {
            Some((u, p)) => (u.to_string(), Some(p.to_string())),
            None => (info.to_string(), None),
        },
        None => (String::new(), None),
    };
    let user = if user.is_empty() { std::env::var("USER").unwrap_or_else(|_| "postgres".into()) } else { user };
    let db = rest[end..].strip_prefix('/').unwrap_or("").split('?').next().unwrap_or("");
    let db = if db.is_empty() { user.clone() } else { db.to_string() };
    (user, password, db)
}

/// One message of the PostgreSQL protocol: its type and body.
async fn pg_read(s: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut body = vec![0u8; len.saturating_sub(4)];
    s.read_exact(&mut body).await?;
    Ok((head[0], body))
}

/// The message (`M`) and code (`C`) fields of an ErrorResponse.
fn pg_error(body: &[u8]) -> String {
    let (mut message, mut code) = (String::new(), String::new());
    for field in body.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let text = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'M' => message = text,
            b'C' => code = text,
            _ => {}
        }
    }
    format!("{message} (SQLSTATE {code})")
}

/// A session on the server of `url` (its database), after the server is
/// ready for a query. Speaks trust and cleartext-password authentication
/// only: enough for the local servers this benchmark runs against.
async fn pg_session(url: &str) -> Result<TcpStream, String> {
    let mut s = tcp("PostgreSQL", url, 5432).await?;
    let (user, password, db) = pg_login(url);
    let mut params = Vec::new();
    for x in ["user", &user, "database", &db] {
        params.extend_from_slice(x.as_bytes());
        params.push(0);
    }
    params.push(0);
    let mut startup = ((params.len() + 8) as u32).to_be_bytes().to_vec();
    startup.extend_from_slice(&196_608u32.to_be_bytes()); // protocol 3.0
    startup.extend_from_slice(&params);
    let io = |e: std::io::Error| format!("PostgreSQL at {url}: {e}");
    s.write_all(&startup).await.map_err(io)?;
    loop {
        let (kind, body) = pg_read(&mut s).await.map_err(io)?;
        match kind {
            b'R' => match body.get(..4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])) {
                Some(0) => {}
                Some(3) => {
                    let pw = password.clone().ok_or_else(|| format!("PostgreSQL at {url} asks for a password and the URL has none"))?;
                    let mut m = vec![b'p'];
                    m.extend_from_slice(&((pw.len() + 5) as u32).to_be_bytes());
                    m.extend_from_slice(pw.as_bytes());
                    m.push(0);
                    s.write_all(&m).await.map_err(io)?;
                }
                other => {
                    return Err(format!("PostgreSQL at {url} asks for authentication method {other:?}; map-bench speaks trust and cleartext passwords only"))
                }
            },
            b'E' => return Err(format!("PostgreSQL at {url}: {}", pg_error(&body))),
            b'Z' => return Ok(s),
            _ => {}
        }
    }
}

/// One statement over the simple-query protocol.
async fn pg_exec(s: &mut TcpStream, sql: &str) -> Result<(), String> {
    let mut m = vec![b'Q'];
    m.extend_from_slice(&((sql.len() + 5) as u32).to_be_bytes());
    m.extend_from_slice(sql.as_bytes());
    m.push(0);
    s.write_all(&m).await.map_err(|e| e.to_string())?;
    let mut failed = None;
    loop {
        let (kind, body) = pg_read(s).await.map_err(|e| e.to_string())?;
        match kind {
            b'E' => failed = Some(pg_error(&body)),
            b'Z' => return failed.map_or(Ok(()), Err),
            _ => {}
        }
    }
}

async fn pg_statement(url: &str, sql: &str) -> Result<(), String> {
    let run = async {
        let mut s = pg_session(url).await?;
        pg_exec(&mut s, sql).await.map_err(|e| format!("{sql} on {url}: {e}"))
    };
    tokio::time::timeout(DDL_TIMEOUT, run).await.map_err(|_| format!("{sql} on {url}: no answer in {DDL_TIMEOUT:?}"))?
}

/// Create database `name` on the server `url` points at.
pub async fn create_database(url: &str, name: &str) -> Result<(), String> {
    pg_statement(url, &format!("CREATE DATABASE \"{name}\"")).await
}

/// Drop a database made by `create_database` (its connections too); a failure is only reported.
pub async fn drop_database(url: &str, name: &str) {
    match pg_statement(url, &format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await {
        Ok(()) => eprintln!("# dropped the database {name}"),
        Err(e) => eprintln!("# WARNING: could not drop the database {name}: {e}"),
    }
}

/// Delete the cluster's streams (`<name>_events`, `<name>_dir`); a failure is only reported.
pub async fn cleanup_streams(nats: &str, name: &str) {
    let streams = [format!("{name}_events"), format!("{name}_dir")];
    match tokio::time::timeout(NET_TIMEOUT, delete_streams(nats, &streams)).await {
        Ok(Ok(())) => eprintln!("# deleted the JetStream streams {}", streams.join(", ")),
        Ok(Err(e)) => eprintln!("# WARNING: could not delete the JetStream streams {}: {e}", streams.join(", ")),
        Err(_) => eprintln!("# WARNING: could not delete the JetStream streams {}: no answer in {NET_TIMEOUT:?}", streams.join(", ")),
    }
}

/// `$JS.API.STREAM.DELETE.<stream>` for each stream over the plain NATS
/// protocol, each with a reply subject of its own. A stream that is not
/// there (a node failed before making it) counts as deleted.
async fn delete_streams(url: &str, streams: &[String]) -> Result<(), String> {
    let (mut r, _) = nats_open(url).await?;
    let inbox = format!("_INBOX.map_bench_{}", std::process::id());
    let mut out = format!("CONNECT {{\"verbose\":false,\"pedantic\":false,\"name\":\"map-bench\"}}\r\nSUB {inbox}.* 1\r\n");
    for (i, s) in streams.iter().enumerate() {
        let _ = write!(out, "PUB $JS.API.STREAM.DELETE.{s} {inbox}.{i} 0\r\n\r\n");
    }
    let io = |e: std::io::Error| format!("NATS at {url}: {e}");
    r.get_mut().write_all(out.as_bytes()).await.map_err(io)?;
    let mut pending: Vec<bool> = vec![true; streams.len()];
    let mut failures = Vec::new();
    let mut line = String::new();
    while pending.iter().any(|&p| p) {
        line.clear();
        if r.read_line(&mut line).await.map_err(io)? == 0 {
            return Err(format!("NATS at {url} closed the connection"));
        }
        let l = line.trim_end();
        if l == "PING" {
            r.get_mut().write_all(b"PONG\r\n").await.map_err(io)?;
        } else if l.starts_with("-ERR") {
            return Err(format!("NATS at {url}: {l}"));
        } else if let Some(rest) = l.strip_prefix("MSG ") {
            // MSG <subject> <sid> [reply-to] <#bytes>
            let f: Vec<&str> = rest.split_whitespace().collect();
            let len: usize = f.last().and_then(|n| n.parse().ok()).ok_or_else(|| format!("NATS at {url}: bad line {l:?}"))?;
            let i: Option<usize> = f.first().and_then(|s| s.rsplit('.').next()).and_then(|i| i.parse().ok());
            let mut payload = vec![0u8; len + 2];
            r.read_exact(&mut payload).await.map_err(io)?;
            let Some(i) = i.filter(|&i| i < streams.len()) else { continue };
            pending[i] = false;
            let v: serde_json::Value = serde_json::from_slice(&payload[..len]).unwrap_or_default();
            let ok = v.get("success").and_then(serde_json::Value::as_bool) == Some(true);
            let missing = v.pointer("/error/code").and_then(serde_json::Value::as_u64) == Some(404);
            if !ok && !missing {
                failures.push(format!("{}: {}", streams[i], String::from_utf8_lossy(&payload[..len])));
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::{authority, pg_login, with_database};

    #[test]
    fn authorities() {
        assert_eq!(authority("nats://127.0.0.1:4222", 4222).unwrap(), "127.0.0.1:4222");
        assert_eq!(authority("nats://localhost", 4222).unwrap(), "localhost:4222");
        assert_eq!(authority("nats://u:p@h:1,h2:2", 4222).unwrap(), "h:1");
        assert_eq!(authority("postgres://root@127.0.0.1:5432/test", 5432).unwrap(), "127.0.0.1:5432");
        assert_eq!(authority("postgres://root:secret@db/test?sslmode=disable", 5432).unwrap(), "db:5432");
        assert_eq!(authority("postgres://[::1]:6543/x", 5432).unwrap(), "[::1]:6543");
        assert!(authority("postgres:///test?host=/run/postgresql", 5432).is_err());
    }

    #[test]
    fn databases_and_logins() {
        assert_eq!(with_database("postgres://root@127.0.0.1:5432/test", "x"), "postgres://root@127.0.0.1:5432/x");
        assert_eq!(with_database("postgres://u:p@db/test?sslmode=disable", "x"), "postgres://u:p@db/x?sslmode=disable");
        assert_eq!(with_database("postgres://db:5432", "x"), "postgres://db:5432/x");
        assert_eq!(pg_login("postgres://root@127.0.0.1:5432/test"), ("root".into(), None, "test".into()));
        assert_eq!(pg_login("postgres://u:secret@db/app?sslmode=disable"), ("u".into(), Some("secret".into()), "app".into()));
        assert_eq!(pg_login("postgres://u@db"), ("u".into(), None, "u".into()));
    }
}
