#include "benchmark/plot.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kiln::benchmark {
namespace {

struct Rgb {
  double r, g, b;
};
constexpr Rgb kBlack{0, 0, 0};
constexpr Rgb kAxisGrey{0.3, 0.3, 0.3};
constexpr Rgb kGridGrey{0.92, 0.92, 0.92};
constexpr Rgb kWaitGrey{0.70, 0.70, 0.70};  // send -> first token
constexpr Rgb kBlue{0.16, 0.42, 0.75};      // decode; p50
constexpr Rgb kRed{0.86, 0.12, 0.12};       // failed requests
constexpr Rgb kOrange{0.92, 0.47, 0.08};    // p99

void SetColor(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

// NOTE: non-finite or negative values (a broken clock, a division by zero upstream) are drawn as
// 0, and absurd ones capped, rather than poisoning the axis ranges and pixel coordinates.
double Sane(double v) { return std::isfinite(v) ? std::clamp(v, 0.0, 1e15) : 0.0; }

// The smallest "nice" step (1, 2 or 5 x 10^k) that cuts `span` into at most `max_ticks` parts.
double NiceStep(double span, int max_ticks) {
  if (!(span > 0) || !std::isfinite(span)) return 1;
  const double raw = span / max_ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10 * magnitude;
}

// A linear data -> pixel mapping with round tick marks. p0 is where `lo` lands, p1 where `hi`
// does (for a y axis p0 is the bottom edge, so p0 > p1).
struct Axis {
  double lo = 0, hi = 1, step = 1;
  double p0 = 0, p1 = 1;

  double ToPx(double v) const { return p0 + (v - lo) / (hi - lo) * (p1 - p0); }
  // Tick values lo, lo + step, ... <= hi.
  std::vector<double> Ticks() const {
    std::vector<double> ticks;
    const int n = static_cast<int>(std::min(100.0, std::floor((hi - lo) / step + 1e-9)));
    for (int i = 0; i <= n; ++i) ticks.push_back(lo + i * step);
    return ticks;
  }
};

// An axis over [lo, hi] with a nice step; `round_hi` extends hi to the next tick.
Axis MakeAxis(double lo, double hi, double p0, double p1, int max_ticks, bool round_hi = true) {
  if (!(hi > lo)) hi = lo + 1;
  Axis axis{.lo = lo, .hi = hi, .step = NiceStep(hi - lo, max_ticks), .p0 = p0, .p1 = p1};
  axis.lo = std::floor(lo / axis.step) * axis.step;
  if (round_hi) axis.hi = std::ceil(hi / axis.step - 1e-9) * axis.step;
  if (!(axis.hi > axis.lo)) axis.hi = axis.lo + axis.step;
  return axis;
}

std::string FormatTick(double v, double step) {
  if (std::fabs(v) < step * 1e-6) v = 0;
  char buf[32];
  if (std::fabs(v) >= 1e6 || step < 1e-4) {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  } else {
    const int decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step))), 0, 4);
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  }
  return buf;
}

// Draws `text` with its anchor at (x, y): ax/ay are 0 (left/top), 0.5 (centre) or 1 (right/bottom).
void DrawText(cairo_t* cr, double x, double y, const std::string& text, double ax, double ay,
              double size = 12, bool bold = false, double angle = 0) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t ext;
  cairo_text_extents(cr, text.c_str(), &ext);
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -ext.x_bearing - ax * ext.width, -ext.y_bearing - ay * ext.height);
  cairo_show_text(cr, text.c_str());
  cairo_restore(cr);
}

// Grid lines, frame, tick labels and axis titles of the panel spanned by `x` and `y`.
void DrawAxes(cairo_t* cr, const Axis& x, const Axis& y, const std::string& x_title,
              const std::string& y_title) {
  const double left = x.p0, right = x.p1, bottom = std::max(y.p0, y.p1), top = std::min(y.p0, y.p1);
  cairo_set_line_width(cr, 1);
  SetColor(cr, kGridGrey);
  for (double t : x.Ticks()) {
    const double px = std::round(x.ToPx(t)) + 0.5;
    cairo_move_to(cr, px, top);
    cairo_line_to(cr, px, bottom);
  }
  for (double t : y.Ticks()) {
    const double py = std::round(y.ToPx(t)) + 0.5;
    cairo_move_to(cr, left, py);
    cairo_line_to(cr, right, py);
  }
  cairo_stroke(cr);
  SetColor(cr, kAxisGrey);
  cairo_rectangle(cr, left + 0.5, top + 0.5, right - left, bottom - top);
  cairo_stroke(cr);
  SetColor(cr, kBlack);
  for (double t : x.Ticks()) DrawText(cr, x.ToPx(t), bottom + 5, FormatTick(t, x.step), 0.5, 0);
  for (double t : y.Ticks()) DrawText(cr, left - 6, y.ToPx(t), FormatTick(t, y.step), 1, 0.5);
  if (!x_title.empty()) DrawText(cr, (left + right) / 2, bottom + 24, x_title, 0.5, 0, 13);
  DrawText(cr, left - 52, (top + bottom) / 2, y_title, 0.5, 0.5, 13, false, -std::numbers::pi / 2);
}

// One legend entry: a swatch (a box, or a line when `dash` >= 0) and its text; returns the x
// after it.
double DrawLegendEntry(cairo_t* cr, double x, double y, Rgb color, const std::string& text,
                       double dash = -1) {
  SetColor(cr, color);
  if (dash < 0) {
    cairo_rectangle(cr, x, y - 6, 22, 12);
    cairo_fill(cr);
  } else {
    cairo_set_line_width(cr, 2);
    if (dash > 0) cairo_set_dash(cr, &dash, 1, 0);
    cairo_move_to(cr, x, y);
    cairo_line_to(cr, x + 22, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
  }
  SetColor(cr, kBlack);
  DrawText(cr, x + 28, y, text, 0, 0.5);
  cairo_text_extents_t ext;
  cairo_text_extents(cr, text.c_str(), &ext);
  return x + 28 + ext.x_advance + 18;
}

// An image surface and its context, released on every path.
class Canvas {
 public:
  Canvas(int width, int height)
      : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height)),
        cr_(cairo_create(surface_)) {
    cairo_set_source_rgb(cr_, 1, 1, 1);
    cairo_paint(cr_);
  }
  ~Canvas() {
    cairo_destroy(cr_);
    cairo_surface_destroy(surface_);
  }
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  cairo_t* cr() const { return cr_; }

  // Finishes drawing and writes the PNG; kInternal naming `path` when drawing fails, kIoError when
  // writing does.
  Status WritePng(const std::string& path) {
    cairo_status_t status = cairo_surface_status(surface_);
    if (status == CAIRO_STATUS_SUCCESS) status = cairo_status(cr_);
    if (status != CAIRO_STATUS_SUCCESS) {
      return Internal("cannot draw plot " + path + ": " + cairo_status_to_string(status));
    }
    cairo_surface_flush(surface_);
    status = cairo_surface_write_to_png(surface_, path.c_str());
    if (status != CAIRO_STATUS_SUCCESS) {
      return IoError("cannot write PNG " + path + ": " + cairo_status_to_string(status) +
                     " (does its directory exist and is it writable?)");
    }
    return Status::Ok();
  }

 private:
  cairo_surface_t* surface_;
  cairo_t* cr_;
};

// Fills the pixel-snapped rectangle [x0, x1] x [y0, y1], at least one pixel each way.
void FillSnapped(cairo_t* cr, double x0, double x1, double y0, double y1) {
  const double left = std::round(x0), top = std::round(y0);
  cairo_rectangle(cr, left, top, std::max(1.0, std::round(x1) - left),
                  std::max(1.0, std::round(y1) - top));
  cairo_fill(cr);
}

}  // namespace

Status WriteTimelinePng(const std::vector<RequestRecord>& records, const std::string& path,
                        const std::string& title) {
  if (records.empty()) return InvalidArgument("no requests to plot in " + path);
  struct Span {
    double start, first, end;
    bool ok;
  };
  std::vector<Span> spans;
  spans.reserve(records.size());
  double t_max = 0;
  bool any_failed = false;
  for (const RequestRecord& r : records) {
    const double start = Sane(r.start_s);
    const double e2e = Sane(r.e2e_s);
    const double ttft = std::min(Sane(r.ttft_s), e2e);
    spans.push_back({start, start + ttft, start + e2e, r.ok});
    t_max = std::max(t_max, start + e2e);
    any_failed |= !r.ok;
  }
  // Send order is start order; stable so that equal start times keep the caller's order.
  std::stable_sort(spans.begin(), spans.end(),
                   [](const Span& a, const Span& b) { return a.start < b.start; });

  constexpr int kWidth = 1200, kHeight = 700;
  constexpr double kLeft = 80, kRight = 1170, kTop = 50, kBottom = 470;
  constexpr double kFlightTop = 520, kFlightBottom = 630;
  Canvas canvas(kWidth, kHeight);
  cairo_t* cr = canvas.cr();
  const int n = static_cast<int>(spans.size());
  const Axis x = MakeAxis(0, t_max, kLeft, kRight, 12);
  // Request i fills the row [i, i + 1) of the y axis; rows thinner than a pixel share pixels.
  Axis y = MakeAxis(0, n, kTop, kBottom, 8, /*round_hi=*/false);
  y.step = std::max(1.0, y.step);
  DrawAxes(cr, x, y, "", "request (send order)");

  for (int i = 0; i < n; ++i) {
    const Span& s = spans[i];
    if (s.ok) {
      SetColor(cr, kWaitGrey);
      FillSnapped(cr, x.ToPx(s.start), x.ToPx(s.first), y.ToPx(i + 0.3), y.ToPx(i + 0.7));
      SetColor(cr, kBlue);
      FillSnapped(cr, x.ToPx(s.first), x.ToPx(s.end), y.ToPx(i + 0.1), y.ToPx(i + 0.9));
    } else {
      SetColor(cr, kRed);
      FillSnapped(cr, x.ToPx(s.start), x.ToPx(s.end), y.ToPx(i + 0.1), y.ToPx(i + 0.9));
    }
  }

  // Requests in flight: +1 at each start, -1 at each end (ends first on ties).
  std::vector<std::pair<double, int>> events;
  events.reserve(2 * spans.size());
  for (const Span& s : spans) {
    events.push_back({s.start, +1});
    events.push_back({s.end, -1});
  }
  std::sort(events.begin(), events.end());
  int in_flight = 0, max_in_flight = 0;
  for (const auto& [t, delta] : events) max_in_flight = std::max(max_in_flight, in_flight += delta);
  const Axis fy = MakeAxis(0, std::max(1, max_in_flight), kFlightBottom, kFlightTop, 4);
  DrawAxes(cr, x, fy, "seconds since start", "in flight");
  in_flight = 0;
  cairo_move_to(cr, x.ToPx(0), fy.ToPx(0));
  for (const auto& [t, delta] : events) {
    cairo_line_to(cr, x.ToPx(t), fy.ToPx(in_flight));
    in_flight += delta;
    cairo_line_to(cr, x.ToPx(t), fy.ToPx(in_flight));
  }
  cairo_line_to(cr, x.ToPx(x.hi), fy.ToPx(in_flight));
  cairo_line_to(cr, x.ToPx(x.hi), fy.ToPx(0));
  cairo_close_path(cr);
  cairo_set_source_rgba(cr, kBlue.r, kBlue.g, kBlue.b, 0.25);
  cairo_fill_preserve(cr);
  SetColor(cr, kBlue);
  cairo_set_line_width(cr, 1.5);
  cairo_stroke(cr);

  SetColor(cr, kBlack);
  DrawText(cr, kLeft, 22, title, 0, 0.5, 16, true);
  char counts[64];
  std::snprintf(counts, sizeof(counts), "%d requests, peak %d in flight", n, max_in_flight);
  DrawText(cr, kLeft, 40, counts, 0, 0.5, 11);
  double lx = 640;
  lx = DrawLegendEntry(cr, lx, 22, kWaitGrey, "send to first token");
  lx = DrawLegendEntry(cr, lx, 22, kBlue, "decode");
  if (any_failed) DrawLegendEntry(cr, lx, 22, kRed, "failed");
  return canvas.WritePng(path);
}

Status WriteLatencyThroughputPng(const std::vector<LatencyPoint>& points, const std::string& path,
                                 const std::string& title) {
  if (points.empty()) return InvalidArgument("no latency points to plot in " + path);
  std::vector<LatencyPoint> sorted = points;
  for (LatencyPoint& p : sorted) {
    for (double* v :
         {&p.output_throughput, &p.ttft_p50_ms, &p.ttft_p99_ms, &p.itl_p50_ms, &p.itl_p99_ms}) {
      *v = Sane(*v);
    }
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.output_throughput < b.output_throughput;
  });

  constexpr int kWidth = 1200, kHeight = 500;
  constexpr double kTop = 60, kBottom = 430, kPanelWidth = 470;
  Canvas canvas(kWidth, kHeight);
  cairo_t* cr = canvas.cr();
  SetColor(cr, kBlack);
  DrawText(cr, 90, 22, title, 0, 0.5, 16, true);

  double x_max = 0;
  for (const LatencyPoint& p : sorted) x_max = std::max(x_max, p.output_throughput);
  // NOTE: 12% headroom on the right so the last point's label stays inside the panel.
  x_max = x_max > 0 ? x_max * 1.12 : 1;

  struct Panel {
    const char* name;
    double LatencyPoint::*p50;
    double LatencyPoint::*p99;
  };
  const Panel panels[] = {{"TTFT", &LatencyPoint::ttft_p50_ms, &LatencyPoint::ttft_p99_ms},
                          {"ITL", &LatencyPoint::itl_p50_ms, &LatencyPoint::itl_p99_ms}};
  double left = 90;
  for (const Panel& panel : panels) {
    double y_max = 0;
    for (const LatencyPoint& p : sorted) y_max = std::max({y_max, p.*panel.p50, p.*panel.p99});
    const Axis x = MakeAxis(0, x_max, left, left + kPanelWidth, 8);
    const Axis y = MakeAxis(0, y_max > 0 ? y_max * 1.08 : 1, kBottom, kTop, 8);
    DrawAxes(cr, x, y, "output throughput (tok/s)", std::string(panel.name) + " (ms)");
    DrawText(cr, left + kPanelWidth / 2, kTop - 12, panel.name, 0.5, 0.5, 14, true);

    cairo_save(cr);
    cairo_rectangle(cr, x.p0, y.p1, x.p1 - x.p0, y.p0 - y.p1);
    cairo_clip(cr);
    for (const auto& [member, color, dash] :
         {std::tuple{panel.p99, kOrange, 7.0}, std::tuple{panel.p50, kBlue, 0.0}}) {
      SetColor(cr, color);
      cairo_set_line_width(cr, 2);
      if (dash > 0) cairo_set_dash(cr, &dash, 1, 0);
      for (const LatencyPoint& p : sorted) {
        cairo_line_to(cr, x.ToPx(p.output_throughput), y.ToPx(p.*member));
      }
      cairo_stroke(cr);
      cairo_set_dash(cr, nullptr, 0, 0);
      for (const LatencyPoint& p : sorted) {
        cairo_new_sub_path(cr);
        cairo_arc(cr, x.ToPx(p.output_throughput), y.ToPx(p.*member), 4, 0, 2 * std::numbers::pi);
      }
      cairo_fill(cr);
    }
    SetColor(cr, kBlack);
    // NOTE: labels alternate above and below their p50 point so that neighbours at low
    // throughput (where points crowd) do not print over each other.
    for (size_t i = 0; i < sorted.size(); ++i) {
      const bool above = i % 2 == 0;
      const double py =
          std::clamp(y.ToPx(sorted[i].*panel.p50) + (above ? -6 : 6), kTop + 14, kBottom - 14);
      DrawText(cr, x.ToPx(sorted[i].output_throughput) + 6, py, sorted[i].label, 0, above ? 1 : 0,
               11);
    }
    cairo_restore(cr);

    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_rectangle(cr, left + 4, kTop + 4, 160, 24);
    cairo_fill(cr);
    const double lx = DrawLegendEntry(cr, left + 12, kTop + 16, kBlue, "p50", 0);
    DrawLegendEntry(cr, lx - 4, kTop + 16, kOrange, "p99", 7);
    left += kPanelWidth + 130;
  }
  return canvas.WritePng(path);
}

}  // namespace kiln::benchmark
