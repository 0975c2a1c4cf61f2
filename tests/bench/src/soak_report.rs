//! What `map-bench soak` prints and writes: the verdicts against the
//! targets, the totals of the mix, `soak.csv` and `soak.svg`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::paced::Meter;
use crate::plot;
use crate::report;
use crate::servers::Target;
use crate::soak::{pct, Counters, Recording, Sample, Settings, CHURN_ALIVE, MINUTE, PAIRS, RESUME_WINDOW_SECS, TURNS_PER_SEC, WRITERS};

/// `soak.csv` and `soak.svg` in `out`.
pub fn write_files(out: &Path, target: Target, samples: &[Sample]) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(out)?;
    let mut csv = String::from("t_s,rss_mib,p50_ms,p99_ms,sends,turns,events,sessions_churned,errors,server_cpu,generator_cpu\n");
    for s in samples {
        let opt = |x: Option<f64>, d: usize| x.map(|v| format!("{v:.d$}")).unwrap_or_default();
        let _ = writeln!(
            csv,
            "{:.0},{},{:.3},{:.3},{},{},{},{},{},{},{}",
            s.t,
            opt(s.rss_mib, 2),
            s.p50_ms,
            s.p99_ms,
            s.sends,
            s.turns,
            s.events,
            s.churned,
            s.errors,
            opt(s.server_cores, 3),
            opt(s.generator_cores, 3)
        );
    }
    let rss: Vec<(f64, f64)> = samples.iter().filter_map(|s| s.rss_mib.map(|r| (s.t, r))).collect();
    let p99: Vec<(f64, f64)> = samples.iter().map(|s| (s.t, s.p99_ms)).collect();
    let charts = [
        plot::Series { title: "server resident memory (VmRSS)", y_label: "RSS (MiB)", points: &rss },
        plot::Series { title: "map/send p99 per sample", y_label: "p99 (ms)", points: &p99 },
    ];
    let title = format!("map-bench soak: {}", target.name());
    let (csv_path, svg_path) = (out.join("soak.csv"), out.join("soak.svg"));
    std::fs::write(&csv_path, csv)?;
    std::fs::write(&svg_path, plot::svg(&title, "time (s)", &charts))?;
    Ok((csv_path, svg_path))
}

/// RSS at the end of the first minute and at the end; the last sample when
/// the run is shorter than a minute.
pub fn rss_first_and_end(samples: &[Sample]) -> Option<(f64, f64, f64, f64)> {
    let first = samples.iter().find(|s| s.t >= MINUTE - 0.5).or(samples.last())?;
    let end = samples.last()?;
    Some((first.t, first.rss_mib?, end.t, end.rss_mib?))
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "not measured",
    }
}

pub fn summary(s: &Settings, rec: &Recording, errors: u64, first_error: Option<String>) -> String {
    let mut t = format!("| soak: {} s on {} | first minute | end / last minute | ratio | target | met? |\n", s.secs, s.target.name());
    t.push_str("|---|---:|---:|---:|---:|---|\n");
    match rss_first_and_end(&rec.samples) {
        Some((t1, a, t2, b)) => {
            let r = b / a;
            let _ = writeln!(t, "| server RSS | {a:.1} MiB (at {t1:.0} s) | {b:.1} MiB (at {t2:.0} s) | {r:.3}× | ≤ 1.05× | {} |", verdict(Some(r <= 1.05)));
        }
        None => t.push_str("| server RSS | ? | ? | | ≤ 1.05× | not measured |\n"),
    }
    let (mut first, mut last) = (rec.first.clone(), rec.last.clone());
    let (a, b) = (first.summary(), last.summary());
    let ratio = (a.count > 0 && b.count > 0).then(|| b.p99_us / a.p99_us);
    let _ = writeln!(
        t,
        "| map/send p99 | {} ({} msgs) | {} ({} msgs) | {} | ≤ 1.2× | {} |",
        report::us(a.p99_us),
        a.count,
        report::us(b.p99_us),
        b.count,
        ratio.map(|r| format!("{r:.2}×")).unwrap_or_else(|| "n/a".into()),
        verdict(ratio.map(|r| r <= 1.2))
    );
    let first_error = first_error.map(|e| format!(" (first: {})", e.chars().take(160).collect::<String>())).unwrap_or_default();
    let _ = writeln!(t, "| errors | | {errors}{first_error} | | 0 | {} |", verdict(Some(errors == 0)));
    if s.secs < 2.0 * MINUTE {
        t.push_str("\nThe run is shorter than two minutes: the first and the last minute overlap.\n");
    }
    t
}

pub fn totals_table(s: &Settings, rate: f64, capacity: Option<f64>, rec: &Recording, n: &Counters) -> String {
    let sum = |f: fn(&Sample) -> u64| rec.samples.iter().map(f).sum::<u64>();
    let secs = rec.samples.last().map(|x| x.t).unwrap_or(s.secs).max(1e-9);
    let mean = |f: fn(&Sample) -> Option<f64>| {
        let v: Vec<f64> = rec.samples.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let mut t = String::from("\n| mix | done | per second | notes |\n|---|---:|---:|---|\n");
    let cap = capacity.map(|c| format!("half of the {c:.0}/s measured first (10 pairs x 10 in flight, 5 s)")).unwrap_or_else(|| "--rate".into());
    let _ = writeln!(
        t,
        "| map/send delivered | {} | {:.0} | paced at {rate:.0}/s over {PAIRS} pairs, open loop: {cap} |",
        sum(|x| x.sends),
        sum(|x| x.sends) as f64 / secs
    );
    let _ =
        writeln!(t, "| mail/turn | {} | {:.0} | {WRITERS} writers, {TURNS_PER_SEC}/s each, one at a time |", sum(|x| x.turns), sum(|x| x.turns) as f64 / secs);
    let overflows = Meter::get(&n.overflows);
    let _ = writeln!(
        t,
        "| events to the subscriber | {} | {:.0} | map/subscribe {{filter: {{}}}}; {overflows} overflow notices |",
        sum(|x| x.events),
        sum(|x| x.events) as f64 / secs
    );
    let _ = writeln!(
        t,
        "| sessions connected and left | {} | {:.1} | connect + register, each closes once {CHURN_ALIVE} newer are open; gateway resume_window_secs = {RESUME_WINDOW_SECS} |",
        sum(|x| x.churned),
        sum(|x| x.churned) as f64 / secs
    );
    let _ = writeln!(t, "| server CPU | | {} | mean share of one core over the samples |", pct(mean(|x| x.server_cores)));
    let _ = writeln!(
        t,
        "| generator CPU | | {} | the same for map-bench (one thread: at 100% it, not the server, limits the latencies) |",
        pct(mean(|x| x.generator_cores))
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: f64, rss: f64) -> Sample {
        Sample { t, rss_mib: Some(rss), ..Sample::default() }
    }

    #[test]
    fn first_minute_and_end() {
        let s: Vec<Sample> = (1..=12).map(|k| at(k as f64 * 10.0, 100.0 + k as f64)).collect();
        assert_eq!(rss_first_and_end(&s), Some((60.0, 106.0, 120.0, 112.0)));
        let short = [at(10.0, 50.0), at(20.0, 51.0)];
        assert_eq!(rss_first_and_end(&short), Some((20.0, 51.0, 20.0, 51.0)));
        assert_eq!(rss_first_and_end(&[]), None);
    }
}
