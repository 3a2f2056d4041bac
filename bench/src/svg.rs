//! Hand-written SVG line charts for the bench results (no plotting dependency): a logarithmic
//! x axis (partitions, sending tasks), a linear y axis from 0, one polyline with dots per series,
//! a legend.

use std::fmt::Write as _;

/// One line of a chart.
pub struct Series {
    /// Shown in the legend.
    pub name: String,
    /// This project's client (solid line) or the peer (dashed).
    pub ours: bool,
    /// `(x, y)` points, x > 0; drawn in x order.
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 7] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
];

/// The chart as SVG text. `note` is printed under the title (e.g. the load average). The x axis
/// is ticked at `x_ticks` (those inside its range: task counts 1, 2, 4, 8, 16 read better at
/// their own values), or at 1, 2 and 5 times the powers of ten when `x_ticks` is empty.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    note: &str,
    series: &[Series],
    x_ticks: &[f64],
) -> String {
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| *x > 0.0)
        .collect();
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (mut x_min, mut x_max) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    if xs.is_empty() {
        (x_min, x_max) = (1.0, 10.0);
    }
    // A decade of margin-free room: at least a factor 2 on each side of a single point.
    let (lx_min, lx_max) = ((x_min / 1.5).log10(), (x_max * 1.5).log10());
    let y_max = nice_ceiling(ys.fold(0.0_f64, f64::max));
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let px = |x: f64| LEFT + (x.log10() - lx_min) / (lx_max - lx_min) * plot_w;
    let py = |y: f64| TOP + plot_h - y / y_max * plot_h;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="18" font-size="15" font-weight="bold">{}</text>"#,
        LEFT,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="33" fill="#666">{}</text>"##,
        LEFT,
        escape(note)
    );
    // Axes, y grid and ticks.
    let _ = writeln!(
        out,
        r#"<path d="M{LEFT} {TOP} V{} H{}" stroke="black" fill="none"/>"#,
        TOP + plot_h,
        LEFT + plot_w
    );
    for i in 0..=5 {
        let y = y_max * f64::from(i) / 5.0;
        let yy = py(y);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            yy + 4.0,
            format_number(y)
        );
    }
    // x ticks at `x_ticks`, or at 1-2-5 steps, inside the range.
    let mut ticks: Vec<f64> = x_ticks.iter().copied().filter(|x| *x > 0.0).collect();
    if ticks.is_empty() {
        let mut decade = 10f64.powf(lx_min.floor());
        while decade <= 10f64.powf(lx_max) {
            ticks.extend([1.0, 2.0, 5.0].map(|m| decade * m));
            decade *= 10.0;
        }
    }
    for x in ticks {
        if x.log10() < lx_min || x.log10() > lx_max {
            continue;
        }
        let xx = px(x);
        let _ = writeln!(
            out,
            r#"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="black"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            TOP + plot_h,
            TOP + plot_h + 5.0,
            TOP + plot_h + 18.0,
            format_number(x)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        H - 20.0,
        escape(x_label)
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    // Series and legend.
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let dash = if s.ours {
            ""
        } else {
            r#" stroke-dasharray="6 4""#
        };
        let mut points = s.points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = points
            .iter()
            .filter(|p| p.0 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" stroke="{color}" stroke-width="2" fill="none"{dash}/>"#,
            path.join(" ")
        );
        for &(x, y) in points.iter().filter(|p| p.0 > 0.0) {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"><title>{}: {} at {}</title></circle>"#,
                px(x),
                py(y),
                escape(&s.name),
                format_number(y),
                format_number(x)
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + plot_w + 15.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 25.0,
            lx + 30.0,
            ly + 4.0,
            escape(&s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// One group of bars (a case): its label and one value per client, in the chart's client
/// order (None: no figure, e.g. a client that cannot run the case).
pub struct BarGroup {
    /// The case, shown left of its bars.
    pub label: String,
    /// `(value, low, high)` per client: the median and the range over the repeats.
    pub values: Vec<Option<(f64, f64, f64)>>,
    /// Text after each client's value (e.g. how many of its runs failed); empty for none.
    pub notes: Vec<String>,
}

/// A horizontal grouped bar chart: one group per case, one bar per client (the colours in the
/// legend), each bar with its value printed and a whisker for its range; x from 0.
pub fn bar_chart(
    title: &str,
    x_label: &str,
    note: &str,
    clients: &[String],
    groups: &[BarGroup],
) -> String {
    const LABEL_W: f64 = 250.0;
    const BAR_H: f64 = 12.0;
    const GAP: f64 = 14.0;
    let width = 900.0;
    let plot_w = width - LABEL_W - 150.0;
    let group_h = BAR_H * clients.len().max(1) as f64 + GAP;
    let height = TOP + 30.0 + group_h * groups.len() as f64 + 50.0;
    let x_max = fine_ceiling(
        groups
            .iter()
            .flat_map(|g| g.values.iter().flatten().map(|v| v.2.max(v.0)))
            .fold(0.0_f64, f64::max),
    );
    let px = |x: f64| LABEL_W + x / x_max * plot_w;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0}" viewBox="0 0 {width} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{width}" height="{height:.0}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text x="10" y="18" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<text x="10" y="33" fill="#666">{}</text>"##,
        escape(note)
    );
    let plot_top = TOP + 10.0;
    let plot_bottom = plot_top + group_h * groups.len() as f64;
    for i in 0..=5 {
        let x = x_max * f64::from(i) / 5.0;
        let xx = px(x);
        let _ = writeln!(
            out,
            r##"<line x1="{xx:.1}" y1="{plot_top:.1}" x2="{xx:.1}" y2="{plot_bottom:.1}" stroke="#ddd"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            plot_bottom + 14.0,
            format_number(x)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LABEL_W + plot_w / 2.0,
        plot_bottom + 32.0,
        escape(x_label)
    );
    for (g, group) in groups.iter().enumerate() {
        let top = plot_top + group_h * g as f64 + GAP / 2.0;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LABEL_W - 8.0,
            top + BAR_H * clients.len() as f64 / 2.0 + 4.0,
            escape(&group.label)
        );
        for (c, value) in group.values.iter().enumerate() {
            let y = top + BAR_H * c as f64;
            let color = COLORS[c % COLORS.len()];
            match value {
                Some((v, lo, hi)) => {
                    let _ = writeln!(
                        out,
                        r#"<rect x="{LABEL_W}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{}: {}</title></rect>"#,
                        (px(*v) - LABEL_W).max(0.5),
                        BAR_H - 2.0,
                        escape(&clients[c]),
                        format_number(*v)
                    );
                    if hi > lo {
                        let _ = writeln!(
                            out,
                            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>"#,
                            px(*lo),
                            y + BAR_H / 2.0 - 1.0,
                            px(*hi),
                            y + BAR_H / 2.0 - 1.0
                        );
                    }
                    let note = group.notes.get(c).map_or("", String::as_str);
                    let _ = writeln!(
                        out,
                        r#"<text x="{:.1}" y="{:.1}">{}{}</text>"#,
                        px(v.max(*hi)) + 4.0,
                        y + BAR_H - 3.0,
                        format_number(*v),
                        escape(note)
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        r##"<text x="{:.1}" y="{:.1}" fill="#999">n/a</text>"##,
                        LABEL_W + 4.0,
                        y + BAR_H - 3.0
                    );
                }
            }
        }
    }
    for (c, name) in clients.iter().enumerate() {
        let ly = plot_top + 6.0 + 16.0 * c as f64;
        let lx = width - 140.0;
        let _ = writeln!(
            out,
            r#"<rect x="{lx:.1}" y="{:.1}" width="14" height="10" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            ly - 9.0,
            COLORS[c % COLORS.len()],
            lx + 20.0,
            ly,
            escape(name)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// The smallest 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 or 10 times a power of ten at or above `v` (1 for
/// 0): a bar chart's axis, which should not leave half of the plot empty.
fn fine_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// The smallest 1, 2 or 5 times a power of ten at or above `v` (1 for 0).
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// `1,250,000`, `0.62`, `48`.
fn format_number(v: f64) -> String {
    if v >= 1000.0 {
        let n = v.round() as u64;
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if v >= 10.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_chart_has_every_client_case_and_gap() {
        let clients = vec!["kafkit".to_string(), "Java".to_string()];
        let groups = vec![BarGroup {
            label: "48 p, acks=1".into(),
            values: vec![Some((2.0e6, 1.5e6, 2.5e6)), None],
            notes: vec![" (1 of 3 runs failed)".into(), String::new()],
        }];
        let svg = bar_chart("t", "records/s", "note", &clients, &groups);
        for text in [
            "kafkit",
            "Java",
            "48 p, acks=1",
            "n/a",
            "2,000,000 (1 of 3 runs failed)",
        ] {
            assert!(svg.contains(text), "{text}");
        }
        // The axis ends at 2.5 M (the range's top), not at 5 M.
        assert!(svg.contains(">2,500,000<"), "{svg}");
        assert_eq!(fine_ceiling(2.46e6), 2.5e6);
        assert_eq!(fine_ceiling(0.0), 1.0);
    }

    #[test]
    fn a_chart_has_every_series_and_point() {
        let _one = crate::alloc::exclusive();
        let series = vec![
            Series {
                name: "kafkit, mock".into(),
                ours: true,
                points: vec![(1000.0, 1.2e6), (48.0, 2.0e6)],
            },
            Series {
                name: "librdkafka <C>".into(),
                ours: false,
                points: vec![(48.0, 1.0e6)],
            },
        ];
        let svg = line_chart("t", "partitions", "records/s", "load 1.0", &series, &[]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("librdkafka &lt;C&gt;"));
        assert!(svg.contains("stroke-dasharray"));
    }

    #[test]
    fn ticks_at_the_values_given() {
        let _one = crate::alloc::exclusive();
        let series = vec![Series {
            name: "kafkit".into(),
            ours: true,
            points: vec![(1.0, 3.0e6), (4.0, 2.0e6), (16.0, 1.0e6)],
        }];
        let svg = line_chart("t", "tasks", "records/s", "", &series, &[1.0, 4.0, 16.0]);
        for label in [">1</text>", ">4</text>", ">16</text>"] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(!svg.contains(">5</text>"));
        let plain = line_chart("t", "tasks", "records/s", "", &series, &[]);
        assert!(plain.contains(">5</text>") && !plain.contains(">4</text>"));
    }

    #[test]
    fn ceilings_and_numbers() {
        let _one = crate::alloc::exclusive();
        assert_eq!(nice_ceiling(1.7e6), 2e6);
        assert_eq!(nice_ceiling(0.62), 1.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(format_number(1_250_000.0), "1,250,000");
        assert_eq!(format_number(0.62), "0.62");
        assert_eq!(format_number(48.0), "48");
    }
}
