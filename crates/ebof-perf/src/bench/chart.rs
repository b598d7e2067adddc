//! SVG charts of a bench report, drawn with plotters' SVG backend (text as SVG `<text>`, so no
//! font files or fontconfig are needed). Each function renders one chart to a string, or `None`
//! when the report has nothing to draw for it.

use plotters::prelude::*;

use super::plan::Role;
use super::report::{Report, StepReport, cdf};

const SIZE: (u32, u32) = (900, 500);
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

type DrawResult<T> = Result<T, String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Every chart the report can have: (file name, SVG text).
pub fn render_all(r: &Report) -> DrawResult<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (name, svg) in [
        ("reference.svg", reference_bars(r)?),
        ("latency-cdf.svg", latency_cdf(r)?),
        ("latency-histogram.svg", latency_histogram(r)?),
        ("cores.svg", cores(r)?),
        ("latency-vs-load.svg", latency_vs_load(r)?),
        ("scaling.svg", scaling(r)?),
    ] {
        if let Some(s) = svg {
            out.push((name.to_string(), s));
        }
    }
    Ok(out)
}

/// Ours as a percentage of the paper's figure, one bar per step with a reference; 100 % line.
fn reference_bars(r: &Report) -> DrawResult<Option<String>> {
    let rows: Vec<(&str, f64)> = r
        .steps
        .iter()
        .filter_map(|s| s.ratio.map(|x| (s.step.id.as_str(), x * 100.0)))
        .collect();
    if rows.is_empty() {
        return Ok(None);
    }
    let top = rows.iter().map(|r| r.1).fold(100.0f64, f64::max) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let n = rows.len();
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "ebof bench {}: ours as % of the paper's figure",
                    r.plan.name()
                ),
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((0..n - 1).into_segmented(), 0f64..top)
            .map_err(err)?;
        let labels: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n + 1)
            .x_label_style(("sans-serif", 11))
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
                SegmentValue::Exact(_) | SegmentValue::Last => String::new(),
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .y_desc("% of paper")
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                Histogram::vertical(&chart)
                    .style(COLORS[0].filled())
                    .margin(20)
                    .data(rows.iter().enumerate().map(|(i, (_, v))| (i, *v))),
            )
            .map_err(err)?
            .label("ours")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], COLORS[0].filled()));
        chart
            .draw_series(LineSeries::new(
                [(SegmentValue::Exact(0), 100.0), (SegmentValue::Last, 100.0)],
                COLORS[3].stroke_width(2),
            ))
            .map_err(err)?
            .label("paper = 100 %")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 15, y)], COLORS[3]));
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

/// Steps whose latency distribution is the point: the QD1 ones (or, failing that, all).
fn latency_steps(r: &Report) -> Vec<&StepReport> {
    let with_hist = |s: &&StepReport| s.outcome.as_ref().is_some_and(|o| !o.histogram.is_empty());
    let qd1: Vec<_> = r
        .steps
        .iter()
        .filter(|s| s.step.qd == 1)
        .filter(with_hist)
        .collect();
    if qd1.is_empty() {
        r.steps
            .iter()
            .filter(|s| s.step.role == Role::Measure)
            .filter(with_hist)
            .collect()
    } else {
        qd1
    }
}

fn lat_range(steps: &[&StepReport]) -> (f64, f64) {
    let mut lo = f64::MAX;
    let mut hi = 0f64;
    for s in steps {
        if let Some(o) = &s.outcome {
            for b in &o.histogram {
                lo = lo.min(b.le_us);
                hi = hi.max(b.le_us);
            }
        }
    }
    ((lo / 2.0).max(0.1), (hi * 2.0).max(1.0))
}

/// Cumulative latency distribution per step, log latency axis.
fn latency_cdf(r: &Report) -> DrawResult<Option<String>> {
    let steps = latency_steps(r);
    if steps.is_empty() {
        return Ok(None);
    }
    let series = steps
        .iter()
        .filter_map(|s| Some((s.step.id.clone(), cdf(&s.outcome.as_ref()?.histogram))))
        .collect();
    line_chart(Line {
        title: "Latency CDF",
        x_desc: "latency (µs)",
        y_desc: "fraction of I/Os ≤ latency",
        series,
        x: Axis::Log(lat_range(&steps)),
        y: Axis::Linear(Some((0.0, 1.0))),
        legend: SeriesLabelPosition::LowerRight,
    })
}

/// Latency histogram (log2 buckets) per step, as the share of I/Os in each bucket.
fn latency_histogram(r: &Report) -> DrawResult<Option<String>> {
    let steps = latency_steps(r);
    if steps.is_empty() {
        return Ok(None);
    }
    let series = steps
        .iter()
        .filter_map(|s| {
            let h = &s.outcome.as_ref()?.histogram;
            let total = h.iter().map(|b| b.count).sum::<u64>().max(1) as f64;
            let pts = h
                .iter()
                .filter(|b| b.count > 0)
                .map(|b| (b.le_us, b.count as f64 / total))
                .collect();
            Some((s.step.id.clone(), pts))
        })
        .collect();
    line_chart(Line {
        title: "Latency histogram",
        x_desc: "latency (µs, bucket upper bound)",
        y_desc: "share of I/Os",
        series,
        x: Axis::Log(lat_range(&steps)),
        y: Axis::Log((1e-7, 1.0)),
        legend: SeriesLabelPosition::UpperRight,
    })
}

/// An axis: linear from 0 to the data's maximum (or the given range), or logarithmic.
enum Axis {
    Linear(Option<(f64, f64)>),
    Log((f64, f64)),
}

/// Points (x, y) of a line chart with a title and axis names.
struct Line<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    series: Vec<(String, Vec<(f64, f64)>)>,
    x: Axis,
    y: Axis,
    legend: SeriesLabelPosition,
}

fn line_chart(l: Line<'_>) -> DrawResult<Option<String>> {
    let pts = || l.series.iter().flat_map(|s| s.1.iter());
    if pts().count() == 0 {
        return Ok(None);
    }
    let x_max = pts().map(|p| p.0).fold(0f64, f64::max) * 1.1 + 1e-9;
    let y_max = pts().map(|p| p.1).fold(0f64, f64::max) * 1.2 + 1e-9;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(l.title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart.map_err(err)?;
                chart
                    .configure_mesh()
                    .x_desc(l.x_desc)
                    .y_desc(l.y_desc)
                    .draw()
                    .map_err(err)?;
                for (i, (name, p)) in l.series.iter().enumerate() {
                    let c = COLORS[i % COLORS.len()];
                    chart
                        .draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))
                        .map_err(err)?
                        .label(name.clone())
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 15, y)], c));
                    chart
                        .draw_series(p.iter().map(|q| Circle::new(*q, 3, c.filled())))
                        .map_err(err)?;
                }
                chart
                    .configure_series_labels()
                    .position(l.legend)
                    .border_style(BLACK)
                    .background_style(WHITE.mix(0.8))
                    .draw()
                    .map_err(err)?;
            }};
        }
        let lin = |a: &Axis, max: f64| match a {
            Axis::Linear(Some((lo, hi))) => *lo..*hi,
            Axis::Linear(None) | Axis::Log(_) => 0.0..max,
        };
        let (xl, yl) = (lin(&l.x, x_max), lin(&l.y, y_max));
        match (&l.x, &l.y) {
            (Axis::Linear(_), Axis::Linear(_)) => draw!(builder.build_cartesian_2d(xl, yl)),
            (Axis::Linear(_), Axis::Log((lo, hi))) => {
                draw!(builder.build_cartesian_2d(xl, (*lo..*hi).log_scale()))
            }
            (Axis::Log((lo, hi)), Axis::Linear(_)) => {
                draw!(builder.build_cartesian_2d((*lo..*hi).log_scale(), yl))
            }
            (Axis::Log((xlo, xhi)), Axis::Log((ylo, yhi))) => draw!(
                builder.build_cartesian_2d((*xlo..*xhi).log_scale(), (*ylo..*yhi).log_scale())
            ),
        }
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

/// A log axis over the positive values of `v`, with room around them.
fn log_range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = v
        .filter(|x| *x > 0.0)
        .fold((f64::MAX, 0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if hi == 0.0 {
        (0.1, 1.0)
    } else {
        (lo / 2.0, hi * 2.0)
    }
}

/// ADQ sweep: IOPS and p99.99 latency against (assumed) target cores.
fn cores(r: &Report) -> DrawResult<Option<String>> {
    let mut iops = Vec::new();
    let mut tail = Vec::new();
    for s in &r.steps {
        if let (Role::Cores { cores }, Some(o)) = (s.step.role, &s.outcome) {
            iops.push((f64::from(cores), o.iops / 1000.0));
            if let Some(l) = &o.latency_us {
                tail.push((f64::from(cores), l.p99_99));
            }
        }
    }
    if iops.is_empty() {
        return Ok(None);
    }
    line_chart(Line {
        title: "4K randread QD32, 3 connections per target core",
        x_desc: "target cores (3 connections each)",
        y_desc: "kIOPS / p99.99 µs",
        series: vec![("kIOPS".into(), iops), ("p99.99 latency (µs)".into(), tail)],
        x: Axis::Linear(None),
        y: Axis::Linear(None),
        legend: SeriesLabelPosition::UpperLeft,
    })
}

/// Latency percentiles against achieved IOPS, open-loop steps.
fn latency_vs_load(r: &Report) -> DrawResult<Option<String>> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = ["p50", "p99", "p99.9", "p99.99"]
        .iter()
        .map(|n| (n.to_string(), Vec::new()))
        .collect();
    for s in &r.steps {
        if let (Role::Load { .. }, Some(o)) = (s.step.role, &s.outcome)
            && let Some(l) = &o.latency_us
        {
            let x = o.iops / 1000.0;
            for (i, v) in [l.p50, l.p99, l.p99_9, l.p99_99].into_iter().enumerate() {
                series[i].1.push((x, v));
            }
        }
    }
    if series[0].1.is_empty() {
        return Ok(None);
    }
    line_chart(Line {
        title: "Latency versus load (open loop, 4K randread)",
        x_desc: "achieved kIOPS",
        y_desc: "latency (µs)",
        y: Axis::Log(log_range(
            series.iter().flat_map(|s| s.1.iter().map(|p| p.1)),
        )),
        series,
        x: Axis::Linear(None),
        legend: SeriesLabelPosition::UpperLeft,
    })
}

/// Aggregate bandwidth against parallel connections.
fn scaling(r: &Report) -> DrawResult<Option<String>> {
    let pts: Vec<(f64, f64)> = r
        .steps
        .iter()
        .filter_map(|s| match (s.step.role, &s.outcome) {
            (Role::Scaling { connections }, Some(o)) => Some((f64::from(connections), o.mib_s)),
            _ => None,
        })
        .collect();
    if pts.is_empty() {
        return Ok(None);
    }
    line_chart(Line {
        title: "Aggregate 128K sequential read bandwidth",
        x_desc: "parallel connections",
        y_desc: "MiB/s",
        series: vec![("MiB/s".into(), pts)],
        x: Axis::Linear(None),
        y: Axis::Linear(None),
        legend: SeriesLabelPosition::UpperLeft,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_render_as_svg() {
        let r = crate::bench::report::tests::sample(1.0);
        let charts = render_all(&r).unwrap();
        let names: Vec<_> = charts.iter().map(|c| c.0.as_str()).collect();
        assert!(names.contains(&"reference.svg"), "{names:?}");
        for (n, svg) in &charts {
            assert!(
                svg.contains("<svg") && svg.trim_end().ends_with("</svg>"),
                "{n}"
            );
        }
    }
}
