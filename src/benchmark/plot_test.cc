#include "benchmark/plot.h"

// NOTE: cairo is a private dependency of kiln_benchmark_core, so its include directory is not
// ours; <cairo/cairo.h> resolves from the system include root (cairo's own includes are relative).
#include <cairo/cairo.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kiln::benchmark {
namespace {

std::string TempPng(const std::string& name) { return ::testing::TempDir() + name + ".png"; }

RequestRecord Ok(double start_s, double ttft_s, double e2e_s) {
  RequestRecord r;
  r.ok = true;
  r.start_s = start_s;
  r.ttft_s = ttft_s;
  r.e2e_s = e2e_s;
  r.output_tokens = 16;
  return r;
}

RequestRecord Failed(double start_s, double e2e_s) {
  RequestRecord r;
  r.error_type = "http 503";
  r.start_s = start_s;
  r.e2e_s = e2e_s;
  return r;
}

// A PNG loaded back through cairo, with colour tests on its pixels.
class Image {
 public:
  explicit Image(const std::string& path)
      : surface_(cairo_image_surface_create_from_png(path.c_str())) {}
  ~Image() { cairo_surface_destroy(surface_); }
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;

  bool ok() const { return cairo_surface_status(surface_) == CAIRO_STATUS_SUCCESS; }
  int width() const { return cairo_image_surface_get_width(surface_); }
  int height() const { return cairo_image_surface_get_height(surface_); }

  struct Rgb {
    int r, g, b;
  };
  Rgb At(int x, int y) const {
    const unsigned char* row =
        cairo_image_surface_get_data(surface_) + y * cairo_image_surface_get_stride(surface_);
    uint32_t v;
    std::memcpy(&v, row + 4 * x, 4);  // xRGB in native byte order; opaque, so not premultiplied
    return {static_cast<int>((v >> 16) & 0xff), static_cast<int>((v >> 8) & 0xff),
            static_cast<int>(v & 0xff)};
  }

  // The longest run of consecutive pixels on row y for which pred holds: {begin, length}.
  template <typename Pred>
  std::pair<int, int> LongestRun(int y, Pred pred) const {
    std::pair<int, int> best{-1, 0};
    for (int x = 0, begin = 0; x <= width(); ++x) {
      if (x < width() && pred(At(x, y))) continue;
      if (x - begin > best.second) best = {begin, x - begin};
      begin = x + 1;
    }
    return best;
  }
  // The longest such run over all rows.
  template <typename Pred>
  int LongestRunAnywhere(Pred pred) const {
    int best = 0;
    for (int y = 0; y < height(); ++y) best = std::max(best, LongestRun(y, pred).second);
    return best;
  }
  template <typename Pred>
  int Count(Pred pred) const {
    int n = 0;
    for (int y = 0; y < height(); ++y) {
      for (int x = 0; x < width(); ++x) n += pred(At(x, y)) ? 1 : 0;
    }
    return n;
  }

 private:
  cairo_surface_t* surface_;
};

// The plot's colours, loosely: the bar grey (not the lighter grid nor the darker axes), the
// decode/p50 blue, the failure red, the p99 orange, and the white background.
bool IsBarGrey(Image::Rgb c) { return c.r == c.g && c.g == c.b && c.r >= 170 && c.r <= 190; }
bool IsBlue(Image::Rgb c) { return c.b > 160 && c.r < 70 && c.g > 90 && c.g < 130; }
bool IsRed(Image::Rgb c) { return c.r > 200 && c.g < 60 && c.b < 60; }
bool IsOrange(Image::Rgb c) { return c.r > 220 && c.g > 100 && c.g < 140 && c.b < 50; }
bool IsWhite(Image::Rgb c) { return c.r == 255 && c.g == 255 && c.b == 255; }

TEST(WriteTimelinePng, WritesAValidPngWithTheDocumentedSize) {
  const std::string path = TempPng("timeline_header");
  ASSERT_TRUE(WriteTimelinePng({Ok(0, 0.5, 3), Ok(1, 0.2, 2)}, path, "header").ok());
  std::ifstream in(path, std::ios::binary);
  unsigned char head[24] = {};
  ASSERT_TRUE(in.read(reinterpret_cast<char*>(head), sizeof(head)));
  const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_EQ(std::memcmp(head, kSignature, 8), 0);
  EXPECT_EQ(std::memcmp(head + 12, "IHDR", 4), 0);
  auto be32 = [&](int at) {
    return (uint32_t{head[at]} << 24) | (uint32_t{head[at + 1]} << 16) |
           (uint32_t{head[at + 2]} << 8) | head[at + 3];
  };
  EXPECT_EQ(be32(16), 1200u);
  EXPECT_EQ(be32(20), 700u);
}

TEST(WriteTimelinePng, OneRequestIsAGreyThenBlueBarInProportion) {
  // One request spans the whole x axis (0..10 s, a round tick) and the whole request axis, so the
  // canvas row at 38% of its height (the middle of the upper panel) crosses both bars.
  const std::string path = TempPng("timeline_one");
  ASSERT_TRUE(WriteTimelinePng({Ok(0, 2, 10)}, path, "one request").ok());
  Image image(path);
  ASSERT_TRUE(image.ok());
  ASSERT_EQ(image.width(), 1200);
  ASSERT_EQ(image.height(), 700);
  const int y = static_cast<int>(0.38 * image.height());
  const auto [grey_begin, grey_len] = image.LongestRun(y, IsBarGrey);
  const auto [blue_begin, blue_len] = image.LongestRun(y, IsBlue);
  ASSERT_GT(grey_len, 50);
  ASSERT_GT(blue_len, 500);
  // Grey from 0 s to the first token at 2 s, then blue to the end at 10 s: adjacent, 1:4.
  EXPECT_NEAR(blue_begin, grey_begin + grey_len, 1);
  EXPECT_NEAR(static_cast<double>(grey_len) / blue_len, 2.0 / 8.0, 0.01);
  EXPECT_TRUE(IsWhite(image.At(3, 3)));
  EXPECT_TRUE(IsWhite(image.At(image.width() - 3, image.height() / 2)));
  EXPECT_EQ(image.Count(IsRed), 0);  // nothing failed, so no red anywhere (legend included)
}

TEST(WriteTimelinePng, FailedRequestsAreRedOverTheirWholeSpan) {
  // The OK request decodes from 1 s to 10 s (9 s of blue); the failed one spans 1 s to 4 s.
  const std::string path = TempPng("timeline_failed");
  ASSERT_TRUE(WriteTimelinePng({Ok(0, 1, 10), Failed(1, 3)}, path, "failures").ok());
  Image image(path);
  ASSERT_TRUE(image.ok());
  // Measure the blue bar on a row through the OK request's grey bar (the in-flight panel below
  // has a long blue line of its own).
  int ok_row = 0;
  for (int y = 0; y < image.height(); ++y) {
    if (image.LongestRun(y, IsBarGrey).second > image.LongestRun(ok_row, IsBarGrey).second) {
      ok_row = y;
    }
  }
  const int blue = image.LongestRun(ok_row, IsBlue).second;
  const int red = image.LongestRunAnywhere(IsRed);
  ASSERT_GT(blue, 500);
  EXPECT_NEAR(static_cast<double>(red) / blue, 3.0 / 9.0, 0.01);
}

TEST(WriteTimelinePng, DegenerateTimesDoNotBreakThePlot) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string path = TempPng("timeline_degenerate");
  EXPECT_TRUE(WriteTimelinePng({Ok(0, 0, 0), Failed(0, 0)}, path, "zeros").ok());
  EXPECT_TRUE(Image(path).ok());
  EXPECT_TRUE(WriteTimelinePng({Ok(1e9, 5, 1e12), Ok(0, 1e300, 1e300), Ok(nan, inf, -inf),
                                Failed(-5, nan), Ok(2, 3, 1)},
                               path, "huge")
                  .ok());
  Image image(path);
  ASSERT_TRUE(image.ok());
  EXPECT_EQ(image.width(), 1200);
}

TEST(WriteTimelinePng, MoreRequestsThanPixelRows) {
  std::vector<RequestRecord> records;
  for (int i = 0; i < 5000; ++i) {
    records.push_back(i % 97 == 0 ? Failed(i * 0.01, 0.5) : Ok(i * 0.01, 0.1, 2 + i % 7));
  }
  const std::string path = TempPng("timeline_many");
  ASSERT_TRUE(WriteTimelinePng(records, path, "5000 requests").ok());
  Image image(path);
  ASSERT_TRUE(image.ok());
  EXPECT_GT(image.Count(IsBlue), 10000);
  EXPECT_GT(image.Count(IsRed), 100);
}

TEST(WriteTimelinePng, EmptyInputIsInvalidArgument) {
  const Status s = WriteTimelinePng({}, TempPng("timeline_empty"), "empty");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

TEST(WriteTimelinePng, UnwritablePathIsAnErrorNamingIt) {
  const std::string path = "/nonexistent-kiln-dir/sub/timeline.png";
  const Status s = WriteTimelinePng({Ok(0, 1, 2)}, path, "t");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
}

LatencyPoint Point(std::string label, double tput, double ttft50, double ttft99, double itl50,
                   double itl99) {
  return {std::move(label), tput, ttft50, ttft99, itl50, itl99};
}

TEST(WriteLatencyThroughputPng, SinglePoint) {
  const std::string path = TempPng("latency_one");
  ASSERT_TRUE(WriteLatencyThroughputPng({Point("inf", 1500, 80, 200, 12, 30)}, path, "one").ok());
  Image image(path);
  ASSERT_TRUE(image.ok());
  EXPECT_EQ(image.width(), 1200);
  EXPECT_EQ(image.height(), 500);
  EXPECT_TRUE(IsWhite(image.At(3, 3)));
  // Two p50 markers (and the legend lines) in blue, two p99 markers in orange.
  EXPECT_GT(image.Count(IsBlue), 2 * 30);
  EXPECT_GT(image.Count(IsOrange), 2 * 30);
}

TEST(WriteLatencyThroughputPng, ManyUnsortedPointsDrawLines) {
  std::vector<LatencyPoint> points;
  for (int i = 11; i >= 0; --i) {  // given in descending rate: the plot sorts by throughput
    const double rate = 1 << i;
    points.push_back(Point(std::to_string(1 << i) + " req/s", 100 * rate, 50 + rate, 90 + 3 * rate,
                           10 + 0.01 * rate, 25 + 0.05 * rate));
  }
  points.push_back(Point("zero", 0, 0, 0, 0, 0));
  const std::string path = TempPng("latency_many");
  ASSERT_TRUE(WriteLatencyThroughputPng(points, path, "sweep").ok());
  Image image(path);
  ASSERT_TRUE(image.ok());
  // A solid p50 line across the panels: far more blue than the markers alone would give.
  EXPECT_GT(image.Count(IsBlue), 13 * 2 * 40);
  EXPECT_GT(image.Count(IsOrange), 13 * 2 * 40);
}

TEST(WriteLatencyThroughputPng, ErrorsForNoPointsAndAnUnwritablePath) {
  const Status empty = WriteLatencyThroughputPng({}, TempPng("latency_empty"), "empty");
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument) << empty.ToString();
  const std::string path = "/nonexistent-kiln-dir/latency.png";
  const Status bad = WriteLatencyThroughputPng({Point("a", 1, 1, 1, 1, 1)}, path, "t");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find(path), std::string::npos) << bad.ToString();
}

}  // namespace
}  // namespace kiln::benchmark
