//! `map-bench overhead`: what metrics and tracing cost on `map/send`. The
//! gateway runs in turn with metrics off, metrics on, and metrics plus
//! traces exported over OTLP/HTTP to a sink in this process (every request
//! sampled, then one in a hundred), for several rounds in alternation so
//! that drift on the machine spreads over every variant.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use crate::report;
use crate::scenarios::{self, Load, Outcome, Timing};
use crate::servers::{Paths, Server, Target};

struct Variant {
    name: &'static str,
    server: &'static str,
    /// Sections; `{OTLP}` becomes the sink's URL.
    sections: &'static str,
}

const VARIANTS: &[Variant] = &[
    Variant { name: "metrics off, no traces", server: "metrics = false", sections: "" },
    Variant { name: "metrics on, no traces", server: "metrics = true", sections: "" },
    Variant { name: "metrics + traces (all sampled)", server: "metrics = true", sections: "[telemetry]\notlp_endpoint = \"{OTLP}\"\nsample_ratio = 1.0" },
    Variant { name: "metrics + traces (1% sampled)", server: "metrics = true", sections: "[telemetry]\notlp_endpoint = \"{OTLP}\"\nsample_ratio = 0.01" },
];

/// An OTLP/HTTP receiver that reads each export and answers 200, on a
/// thread of its own (not the generator's): `http://127.0.0.1:PORT`.
fn otlp_sink() -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    // The head: up to the empty line; only Content-Length matters.
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let l = line.trim_end();
                        if l.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = l.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if reader.get_mut().write_all(ok).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(url)
}

/// Every variant `rounds` times in alternation; one row per variant with the
/// median round (by rate) and its ratios to metrics off.
pub async fn run(p: &Paths, pairs: usize, per: u64, timing: Timing, rounds: usize) -> Result<String, String> {
    let sink = otlp_sink().map_err(|e| format!("OTLP sink: {e}"))?;
    let mut results: Vec<Vec<Load>> = VARIANTS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, v) in VARIANTS.iter().enumerate() {
            let sections = v.sections.replace("{OTLP}", &sink);
            let server = Server::start_with(Target::Gateway, p, "overhead", v.server, &sections)?;
            let out = scenarios::send(&server, pairs, per, timing, false).await;
            server.stop();
            match out {
                Outcome::Load(l) => {
                    eprintln!("#   round {} {:<32} {:.0}/s p99 {}", round + 1, v.name, l.rate, report::us(l.lat.p99_us));
                    results[i].push(l);
                }
                other => return Err(format!("{}: {other:?}", v.name)),
            }
        }
    }
    let medians: Vec<Load> = results.into_iter().map(|r| Load::median(r).expect("rounds >= 1")).collect();
    let cpu_per_msg = Load::cpu_per_msg_us;
    let base = &medians[0];
    let mut table =
        String::from("| variant | rate | p50 | p99 | server CPU per message | rate vs off | CPU per message vs off |\n|---|---|---|---|---|---|---|\n");
    for (v, l) in VARIANTS.iter().zip(&medians) {
        let cpu = cpu_per_msg(l).map_or("?".into(), |c| format!("{c:.1} µs"));
        let cpu_ratio = match (cpu_per_msg(l), cpu_per_msg(base)) {
            (Some(a), Some(b)) => format!("{:.2}×", a / b),
            _ => "?".into(),
        };
        table.push_str(&format!(
            "| {} | {:.1}k/s | {} | {} | {cpu} | {:.2}× | {cpu_ratio} |\n",
            v.name,
            l.rate / 1000.0,
            report::us(l.lat.p50_us),
            report::us(l.lat.p99_us),
            l.rate / base.rate.max(1.0)
        ));
    }
    Ok(format!("map/send 1:1, {} in flight; median of {rounds} alternating rounds per variant\n\n{table}", pairs as u64 * per))
}
