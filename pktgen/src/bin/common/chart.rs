//! What the plot binaries share: tick labels ([`num`]), grid colours, and the line
//! chart of (log2 x, y) series drawn as lines with markers, x labelled in powers of two.

use plotters::prelude::*;

/// Grid lines at the labelled key points, and the faint ones between.
pub const GRID: RGBColor = RGBColor(215, 215, 215);
pub const LIGHT_GRID: RGBColor = RGBColor(240, 240, 240);

/// A tick label: an integer without `.0`, else at most three significant digits
/// with trailing zeros dropped.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    if (v - v.round()).abs() <= 1e-9 * v.abs().max(1.0) {
        return format!("{}", v.round() as i64);
    }
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let t = format!("{v:.digits$}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A named series of (log2 x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

/// Draws `data` into `area` with `title`, the x axis described as `xdesc` (labels
/// `2^x`), the y axis as `ylabel` and the legend at `legend`.
pub fn panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    xdesc: &str,
    ylabel: &str,
    data: &[Series],
    legend: SeriesLabelPosition,
) -> Result<(), Box<dyn std::error::Error>> {
    let xs = || data.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let xmin = xs().fold(f64::INFINITY, f64::min).floor();
    let xmin = if xmin.is_finite() { xmin } else { 0.0 };
    let xmax = xs().fold(0.0, f64::max).max(xmin + 1.0);
    let ymax = data
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(xmin..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc(xdesc)
        .y_desc(ylabel)
        .x_labels((xmax - xmin) as usize + 1)
        .x_label_formatter(&|x: &f64| format!("{}", 2f64.powf(x.round()) as u32))
        .y_label_formatter(&|y: &f64| num(*y))
        .bold_line_style(GRID)
        .light_line_style(LIGHT_GRID)
        .draw()?;
    for (i, (name, pts)) in data.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
