//! Line charts as plain SVG: one chart per series, stacked, each with its
//! axes, ticks and labels.

use std::fmt::Write as _;

pub struct Series<'a> {
    pub title: &'a str,
    /// The y axis label (with its unit).
    pub y_label: &'a str,
    /// (x, y) in order of x.
    pub points: &'a [(f64, f64)],
}

const WIDTH: f64 = 760.0;
const CHART: f64 = 260.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 48.0;
const HEADER: f64 = 30.0;

/// About five round steps from 0 to at least `max`: (step, top).
pub fn ticks(max: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 { max } else { 1.0 };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    (step, (max / step).ceil() * step)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A number for a tick label: no trailing zeros.
fn label(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The whole picture: `title` over the charts, which share the x axis label.
pub fn svg(title: &str, x_label: &str, charts: &[Series]) -> String {
    let height = HEADER + charts.len() as f64 * (CHART + TOP + BOTTOM);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        WIDTH / 2.0,
        escape(title)
    );
    let x_max = charts.iter().flat_map(|c| c.points.iter().map(|p| p.0)).fold(0.0, f64::max);
    for (i, c) in charts.iter().enumerate() {
        let top = HEADER + i as f64 * (CHART + TOP + BOTTOM) + TOP;
        chart(&mut s, c, top, x_max, x_label);
    }
    s.push_str("</svg>\n");
    s
}

/// One chart whose plot area starts `top` pixels down.
fn chart(s: &mut String, c: &Series, top: f64, x_max: f64, x_label: &str) {
    let (left, right, bottom) = (LEFT, WIDTH - RIGHT, top + CHART);
    let (x_step, x_top) = ticks(x_max);
    let (y_step, y_top) = ticks(c.points.iter().map(|p| p.1).fold(0.0, f64::max));
    let px = |x: f64| left + x / x_top * (right - left);
    let py = |y: f64| bottom - y / y_top * (bottom - top);
    let _ = writeln!(s, "<text x=\"{left}\" y=\"{}\" font-size=\"13\" font-weight=\"bold\">{}</text>", top - 10.0, escape(c.title));
    let mut y = 0.0;
    while y <= y_top + y_step / 2.0 {
        let at = py(y);
        let _ = writeln!(s, "<line x1=\"{left}\" y1=\"{at:.1}\" x2=\"{right}\" y2=\"{at:.1}\" stroke=\"#e4e4e4\"/>");
        let _ = writeln!(s, "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", left - 6.0, at + 4.0, label(y));
        y += y_step;
    }
    let mut x = 0.0;
    while x <= x_top + x_step / 2.0 {
        let at = px(x);
        let _ = writeln!(s, "<line x1=\"{at:.1}\" y1=\"{bottom}\" x2=\"{at:.1}\" y2=\"{}\" stroke=\"black\"/>", bottom + 5.0);
        let _ = writeln!(s, "<text x=\"{at:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", bottom + 18.0, label(x));
        x += x_step;
    }
    let _ = writeln!(s, "<polyline points=\"{left},{top} {left},{bottom} {right},{bottom}\" fill=\"none\" stroke=\"black\"/>");
    let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", (left + right) / 2.0, bottom + 38.0, escape(x_label));
    let mid = (top + bottom) / 2.0;
    let _ = writeln!(s, "<text x=\"20\" y=\"{mid:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {mid:.1})\">{}</text>", escape(c.y_label));
    let line: Vec<String> = c.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
    let _ = writeln!(s, "<polyline points=\"{}\" fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"2\"/>", line.join(" "));
    for &(x, y) in c.points {
        let _ = writeln!(s, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#1f5fbf\"/>", px(x), py(y));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_ticks() {
        assert_eq!(ticks(120.0), (25.0, 125.0));
        assert_eq!(ticks(47.3), (10.0, 50.0));
        assert_eq!(ticks(0.83), (0.2, 1.0));
        assert_eq!(ticks(0.0), (0.2, 1.0));
    }

    #[test]
    fn two_charts_with_axes() {
        let rss = [(10.0, 40.0), (20.0, 41.5), (30.0, 41.0)];
        let p99 = [(10.0, 0.8), (20.0, 1.2), (30.0, 0.9)];
        let s =
            svg("soak <gateway>", "time (s)", &[Series { title: "RSS", y_label: "MiB", points: &rss }, Series { title: "p99", y_label: "ms", points: &p99 }]);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("soak &lt;gateway&gt;"));
        assert_eq!(s.matches("stroke=\"#1f5fbf\" stroke-width").count(), 2);
        assert_eq!(s.matches("<circle").count(), 6);
        assert_eq!(s.matches(">time (s)</text>").count(), 2);
        assert!(s.contains(">MiB</text>") && s.contains(">ms</text>"));
        // The x axis runs to 30 s in steps of 10.
        assert!(s.contains(">30</text>"));
    }
}
