//! The report's pictures, as hand-written SVG (CRATES.md allows it; no dependency, no fonts:
//! text is left to the viewer's `sans-serif`).
//!
//! ```text
//!  failed-per-second.svg   x: seconds, y: failed requests/s, one polyline per setup + legend
//!  stale-window.svg        one bar per setup (its stale window), a tick mark at its bound
//! ```

use std::fmt::Write;

use crate::report::Report;

/// Canvas and margins, in SVG user units: a 4:2 picture that reads well in a README.
const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 400.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 48.0;

/// Line colours, distinguishable in colour and in greyscale (the Okabe–Ito palette).
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442",
];

/// A "nice" axis maximum (1, 2 or 5 × 10^k) at or above `value`, and its step (a fifth).
fn nice_axis(value: f64) -> (f64, f64) {
    let value = value.max(1.0);
    let magnitude = 10f64.powf(value.log10().floor());
    let max = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|factor| factor * magnitude)
        .find(|max| *max >= value)
        .unwrap_or(10.0 * magnitude);
    (max, max / 5.0)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn open(svg: &mut String, title: &str) {
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        escape(title)
    );
}

/// Axes with a y scale from 0 to `y_max` (ticks every `y_step`) and an x label.
fn axes(svg: &mut String, y_max: f64, y_step: f64, y_label: &str) {
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
    for i in 0..=((y_max / y_step).round() as u32) {
        let value = (f64::from(i) * y_step * 1e6).round() / 1e6;
        let y = y0 - (y0 - y1) * value / y_max;
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            value
        );
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#000"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#000"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (y0 + y1) / 2.0,
        escape(y_label)
    );
}

/// Failed requests per second over time, one line per setup.
pub fn failed_per_second(report: &Report) -> String {
    let mut svg = String::new();
    open(&mut svg, "Failed requests per second");
    let seconds = report
        .setups
        .iter()
        .map(|s| s.failed_per_s.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let peak = report
        .setups
        .iter()
        .flat_map(|s| s.failed_per_s.iter().copied())
        .max()
        .unwrap_or(0);
    let (y_max, y_step) = nice_axis(peak as f64);
    axes(&mut svg, y_max, y_step, "failed requests / s");
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
    let x_of = |second: f64| x0 + (x1 - x0) * second / seconds as f64;
    let x_step = if seconds > 30 { 10 } else { 5 }.min(seconds);
    for second in (0..=seconds).step_by(x_step) {
        let x = x_of(second as f64);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{}" stroke="#000"/><text x="{x:.1}" y="{}" text-anchor="middle">{second}</text>"##,
            y0 + 5.0,
            y0 + 18.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">time (s) — crash at {} s</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 10.0,
        report.scenario.crash_at_s
    );
    let crash = x_of(report.scenario.crash_at_s);
    let _ = writeln!(
        svg,
        r##"<line x1="{crash:.1}" y1="{y0}" x2="{crash:.1}" y2="{y1}" stroke="#999" stroke-dasharray="4 3"/>"##
    );
    for (i, setup) in report.setups.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        // A step line: each second's count held across that second.
        let mut points = String::new();
        for (second, &count) in setup.failed_per_s.iter().enumerate() {
            let y = y0 - (y0 - y1) * count as f64 / y_max;
            let _ = write!(
                points,
                "{:.1},{y:.1} {:.1},{y:.1} ",
                x_of(second as f64),
                x_of(second as f64 + 1.0)
            );
        }
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.trim_end()
        );
        let ly = TOP + 12.0 + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            x1 + 12.0,
            x1 + 32.0,
            x1 + 38.0,
            ly + 4.0,
            escape(&setup.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The stale window of each setup as a bar, with its bound as a mark.
pub fn stale_windows(report: &Report) -> String {
    let mut svg = String::new();
    open(&mut svg, "Stale window (crash to last failed request)");
    let peak = report
        .setups
        .iter()
        .flat_map(|s| [s.stale_window_s, s.expected.stale_window_bound_s.unwrap_or(0.0)])
        .fold(0.0, f64::max);
    let (y_max, y_step) = nice_axis(peak);
    axes(&mut svg, y_max, y_step, "seconds");
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
    let slot = (x1 - x0) / report.setups.len().max(1) as f64;
    for (i, setup) in report.setups.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let x = x0 + slot * i as f64 + slot * 0.2;
        let width = slot * 0.6;
        let height = (y0 - y1) * setup.stale_window_s / y_max;
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="{:.1}" width="{width:.1}" height="{height:.1}" fill="{colour}"/><text x="{:.1}" y="{}" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" text-anchor="middle">{:.2}</text>"#,
            y0 - height,
            x + width / 2.0,
            y0 + 18.0,
            escape(&setup.name),
            x + width / 2.0,
            y0 - height - 6.0,
            setup.stale_window_s
        );
        if let Some(bound) = setup.expected.stale_window_bound_s {
            let y = y0 - (y0 - y1) * bound / y_max;
            let _ = writeln!(
                svg,
                r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#000" stroke-width="2" stroke-dasharray="5 3"/>"##,
                x - 4.0,
                x + width + 4.0
            );
        }
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#000" stroke-width="2" stroke-dasharray="5 3"/><text x="{}" y="{}">bound</text>"##,
        x1 + 12.0,
        TOP + 12.0,
        x1 + 32.0,
        TOP + 12.0,
        x1 + 38.0,
        TOP + 16.0
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_end_on_round_numbers_above_the_data() {
        assert_eq!(nice_axis(0.0).0, 1.0);
        assert_eq!(nice_axis(13.0).0, 20.0);
        assert_eq!(nice_axis(200.0).0, 200.0);
        assert_eq!(nice_axis(420.0).0, 500.0);
        for value in [0.3, 7.0, 13.0, 99.0, 420.0, 8_000.0] {
            let (max, step) = nice_axis(value);
            assert!(
                max >= value && step > 0.0 && max / step <= 10.0,
                "{value}: {max} {step}"
            );
        }
    }
}
