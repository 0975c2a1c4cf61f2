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
                    (
                        "rate (higher is better)",
                        (|o| match o {
                            Outcome::Load(l) if l.lat.count > 0 => Some(l.rate),
                            _ => None,
                        }),
                    ),
                    (
                        "p50 (lower is better)",
                        (|o| match o {
                            Outcome::Load(l) if l.lat.count > 0 => Some(l.lat.p50_us),
                            _ => None,
                        }),
                    ),
                    (
                        "p99 (lower is better)",
                        (|o| match o {
                            Outcome::Load(l) if l.lat.count > 0 => Some(l.lat.p99_us),
                            _ => None,
                        }),
                    ),
                    (
                        "server CPU per message (lower is better)",
                        (|o| match o {
                            Outcome::Load(l) if l.rate > 0.0 => l.server_cores.map(|c| c / l.rate),
                            _ => None,
                        }),
                    ),
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

    /// The performance targets, each with the numbers it was judged on.
    pub fn goals(&self) -> String {
        let mut s = String::new();
        s.push_str("| goal | measured | met? |\n|---|---|---|\n");
        let cpu = |l: &Load| l.server_cores.filter(|_| l.rate > 0.0).map(|c| c / l.rate * 1e6);
        let p99 = |l: &Load| (l.lat.count > 0).then_some(l.lat.p99_us);
        let p50 = |l: &Load| (l.lat.count > 0).then_some(l.lat.p50_us);
        let rate = |l: &Load| (l.rate > 0.0).then_some(l.rate);
        type Of = fn(&Load) -> Option<f64>;
        // (goal, scenario, metric, against, its unit, at most (true) or at least, the bound)
        let rows: [(&str, &str, Of, Target, &str, bool, f64); 8] = [
            ("`map/send` 1:1, 100 in flight: server CPU per message ≤ 1.4× the ceiling's", "send100", cpu, Target::Ceiling, "µs", true, 1.4),
            ("`map/send` 1:1, 100 in flight: p99 ≤ 1.5× the ceiling's", "send100", p99, Target::Ceiling, "µs", true, 1.5),
            ("`map/send` 1:1, 100 in flight: p99 ≤ 1/5 of the reference's", "send100", p99, Target::Reference, "µs", true, 0.2),
            ("`map/send` 1:1, 1 in flight: p50 ≤ 2× the ceiling's", "send1", p50, Target::Ceiling, "µs", true, 2.0),
            ("scope fan-out to 10: server CPU per delivery ≤ 1.4× the ceiling's", "fanout10", cpu, Target::Ceiling, "µs", true, 1.4),
            ("scope fan-out to 100: server CPU per delivery ≤ 1.4× the ceiling's", "fanout100", cpu, Target::Ceiling, "µs", true, 1.4),
            ("`mail/turn`, 100 in flight: rate ≥ 5× the reference's", "mail", rate, Target::Reference, "/s", false, 5.0),
            ("`mail/turn`, 100 in flight: server CPU per turn ≤ 0.25× the reference's", "mail", cpu, Target::Reference, "µs", true, 0.25),
        ];
        for (goal, key, of, against, unit, at_most, bound) in rows {
            let pair = self.load(key, Target::Gateway).and_then(of).zip(self.load(key, against).and_then(of));
            let (measured, ok) = match pair {
                Some((g, o)) if o > 0.0 => (format!("{:.2}× ({g:.1} vs {o:.1} {unit})", g / o), Some(if at_most { g / o <= bound } else { g / o >= bound })),
                _ => (String::new(), None),
            };
            let _ = writeln!(s, "| {goal} | {measured} | {} |", verdict(ok));
        }
        let idle = match self.find("idle", Target::Gateway) {
            Some(Outcome::Idle { per_session_kib, .. }) => Some(*per_session_kib),
            _ => None,
        };
        let _ = writeln!(s, "| idle session ≤ 14 KiB | {} | {} |", idle.map(|k| format!("{k:.1} KiB")).unwrap_or_default(), verdict(idle.map(|k| k <= 14.0)));
        s
    }
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "not measured",
    }
}
