//! The printed tables: absolute numbers, ratios, goals.

use std::fmt::Write as _;

use crate::scenarios::{Load, Outcome};
use crate::servers::Target;

pub struct Row {
    /// Stable key (`send1`, `send100`, …).
    pub key: &'static str,
    pub label: String,
    pub target: Target,
    pub outcome: Outcome,
}

/// Microseconds for people: `87 µs`, `1.24 ms`.
pub fn us(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.1} ms", x / 1000.0)
    } else if x >= 1000.0 {
        format!("{:.2} ms", x / 1000.0)
    } else {
        format!("{x:.0} µs")
    }
}

pub fn rate(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.1}k", x / 1000.0)
    } else {
        format!("{x:.0}")
    }
}

/// `48% · 7.5 µs/msg`: share of one core, and CPU time per counted message.
pub fn cores(x: Option<f64>, rate: f64) -> String {
    match x {
        Some(c) if rate > 0.0 => format!("{:.0}% · {:.1} µs/msg", c * 100.0, c * 1e6 / rate),
        Some(c) => format!("{:.0}%", c * 100.0),
        None => "?".into(),
    }
}

/// A load's cells from rate to generator CPU: `rate | p50 | p99 | max | errors | server CPU | generator CPU`.
pub fn load_cells(l: &Load) -> String {
    format!(
        "{}/s | {} | {} | {} | {} | {} | {}",
        rate(l.rate),
        us(l.lat.p50_us),
        us(l.lat.p99_us),
        us(l.lat.max_us),
        l.errors,
        cores(l.server_cores, l.rate),
        cores(l.generator_cores, l.rate)
    )
}

/// A table of ratios between pairs of loads: `(label, x, y)` gives x / y
/// for rate, p50, p99 and server CPU per `unit`.
pub fn ratio_table(unit: &str, rows: &[(&str, &Load, &Load)]) -> String {
    let mut t = format!("\n| ratio | rate (higher is better) | p50 (lower is better) | p99 (lower is better) | server CPU per {unit} (lower is better) |\n");
    t.push_str("|---|---:|---:|---:|---:|\n");
    for (label, x, y) in rows {
        let _ = writeln!(
            t,
            "| {label} | {} | {} | {} | {} |",
            ratio(Some(x.rate), Some(y.rate)),
            ratio(Some(x.lat.p50_us), Some(y.lat.p50_us)),
            ratio(Some(x.lat.p99_us), Some(y.lat.p99_us)),
            ratio(x.cpu_per_msg_us(), y.cpu_per_msg_us())
        );
    }
    t
}

pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "n/a".into(),
    }
}

/// A metric's name and how to read it from an outcome.
type Metric = (&'static str, fn(&Outcome) -> Option<f64>);

pub struct Report<'a> {
    pub rows: &'a [Row],
}

impl Report<'_> {
    fn find(&self, key: &str, target: Target) -> Option<&Outcome> {
        self.rows.iter().find(|r| r.key == key && r.target == target).map(|r| &r.outcome)
    }

    fn load(&self, key: &str, target: Target) -> Option<&Load> {
        match self.find(key, target)? {
            Outcome::Load(l) if l.lat.count > 0 => Some(l),
            _ => None,
        }
    }

    /// The table of absolute numbers.
    pub fn absolute(&self) -> String {
        let mut s = String::new();
        s.push_str("| scenario | target | rate | p50 | p99 | max | errors | server CPU | generator CPU | notes |\n");
        s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
        for r in self.rows {
            let _ = match &r.outcome {
                Outcome::Load(l) => writeln!(
                    s,
                    "| {} | {} | {} | {}{} |",
                    r.label,
                    r.target.name(),
                    load_cells(l),
                    l.note,
                    l.first_error.as_ref().map(|e| format!("; first error: {}", e.chars().take(120).collect::<String>())).unwrap_or_default()
                ),
                Outcome::Idle { sessions, per_session_kib, rss_before_kib, rss_after_kib, open_secs, failed } => writeln!(
                    s,
                    "| {} | {} | {:.1} KiB/session | | | | {} | | | VmRSS {:.1} → {:.1} MiB with {} sessions (opened in {:.1} s) |",
                    r.label,
                    r.target.name(),
                    per_session_kib,
                    failed,
                    *rss_before_kib as f64 / 1024.0,
                    *rss_after_kib as f64 / 1024.0,
                    sessions,
                    open_secs
                ),
                Outcome::Startup { ms, note } => {
                    writeln!(s, "| {} | {} | {:.0} ms | | | | | | | {} |", r.label, r.target.name(), ms, note)
                }
                Outcome::NotApplicable(why) => writeln!(s, "| {} | {} | n/a | | | | | | | {} |", r.label, r.target.name(), why),
                Outcome::Failed(why) => writeln!(s, "| {} | {} | FAILED | | | | | | | {} |", r.label, r.target.name(), why.replace('\n', " ")),
            };
        }
        s
    }

    fn keys(&self) -> Vec<(&'static str, &str)> {
        let mut keys: Vec<(&'static str, &str)> = Vec::new();
        for r in self.rows {
            if !keys.iter().any(|(k, _)| *k == r.key) {
                keys.push((r.key, r.label.as_str()));
            }
        }
        keys
    }

    /// Gateway vs reference and vs ceiling, per scenario and metric.
    pub fn ratios(&self) -> String {
        let mut s = String::new();
        s.push_str("| scenario | metric | gateway / reference | gateway / ceiling |\n|---|---|---:|---:|\n");
        for (key, label) in self.keys() {
            let metrics: Vec<Metric> = match self.find(key, Target::Gateway) {
                Some(Outcome::Load(_)) => vec![
                    ("rate (higher is better)", (|o| match o {
                        Outcome::Load(l) if l.lat.count > 0 => Some(l.rate),
                        _ => None,
                    })),
                    ("p50 (lower is better)", (|o| match o {
                        Outcome::Load(l) if l.lat.count > 0 => Some(l.lat.p50_us),
                        _ => None,
                    })),
                    ("p99 (lower is better)", (|o| match o {
                        Outcome::Load(l) if l.lat.count > 0 => Some(l.lat.p99_us),
                        _ => None,
                    })),
                    ("server CPU per message (lower is better)", (|o| match o {
                        Outcome::Load(l) if l.rate > 0.0 => l.server_cores.map(|c| c / l.rate),
                        _ => None,
                    })),
                ],
                Some(Outcome::Idle { .. }) => vec![(
                    "KiB per idle session (lower is better)",
                    (|o| match o {
                        Outcome::Idle { per_session_kib, .. } => Some(*per_session_kib),
                        _ => None,
                    }),
                )],
                Some(Outcome::Startup { .. }) => vec![(
                    "ms to ready (lower is better)",
                    (|o| match o {
                        Outcome::Startup { ms, .. } => Some(*ms),
                        _ => None,
                    }),
                )],
                _ => continue,
            };
            for (name, f) in metrics {
                let gw = self.find(key, Target::Gateway).and_then(&f);
                let re = self.find(key, Target::Reference).and_then(&f);
                let ce = self.find(key, Target::Ceiling).and_then(&f);
                if re.is_none() && ce.is_none() {
                    continue;
                }
                let _ = writeln!(s, "| {label} | {name} | {} | {} |", ratio(gw, re), ratio(gw, ce));
            }
        }
        s
    }

    /// The goals of the issue, each with the numbers it was judged on.
    pub fn goals(&self) -> String {
        let mut s = String::new();
        s.push_str("| goal | measured | met? |\n|---|---|---|\n");
        let verdict = |ok: Option<bool>| match ok {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let gw = self.load("send100", Target::Gateway);
        let ce = self.load("send100", Target::Ceiling);
        let re = self.load("send100", Target::Reference);
        let t = gw.zip(ce).map(|(g, c)| g.rate / c.rate);
        let _ = writeln!(
            s,
            "| 1:1 throughput (100 in flight) ≥ 80% of the ceiling | {} | {} |",
            t.map(|x| format!("{:.0}% ({} vs {}/s)", x * 100.0, rate(gw.unwrap().rate), rate(ce.unwrap().rate))).unwrap_or_default(),
            verdict(t.map(|x| x >= 0.8))
        );
        let p = gw.zip(ce).map(|(g, c)| g.lat.p99_us / c.lat.p99_us);
        let _ = writeln!(
            s,
            "| p99 (100 in flight) ≤ 1.5× the ceiling's | {} | {} |",
            p.map(|x| format!("{:.2}× ({} vs {})", x, us(gw.unwrap().lat.p99_us), us(ce.unwrap().lat.p99_us))).unwrap_or_default(),
            verdict(p.map(|x| x <= 1.5))
        );
        let q = gw.zip(re).map(|(g, r)| g.lat.p99_us / r.lat.p99_us);
        let _ = writeln!(
            s,
            "| p99 (100 in flight) ≤ 1/5 of the reference's | {} | {} |",
            q.map(|x| format!("{:.2}× ({} vs {})", x, us(gw.unwrap().lat.p99_us), us(re.unwrap().lat.p99_us))).unwrap_or_default(),
            verdict(q.map(|x| x <= 0.2))
        );
        let g1 = self.load("send1", Target::Gateway);
        let c1 = self.load("send1", Target::Ceiling);
        let l = g1.zip(c1).map(|(g, c)| g.lat.p50_us / c.lat.p50_us);
        let _ = writeln!(
            s,
            "| 1-in-flight p50 within 2× of the ceiling's | {} | {} |",
            l.map(|x| format!("{:.2}× ({} vs {})", x, us(g1.unwrap().lat.p50_us), us(c1.unwrap().lat.p50_us))).unwrap_or_default(),
            verdict(l.map(|x| x <= 2.0))
        );
        s
    }
}
