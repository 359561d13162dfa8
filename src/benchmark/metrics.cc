#include "benchmark/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/check.h"
#include "core/stats.h"

namespace kiln::benchmark {
namespace {

using ojson = nlohmann::ordered_json;

// Parses all of `text` as a finite number, or returns false.
bool ParseNumber(std::string_view text, double* value) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(*value);
}

ojson DistributionToJson(const Distribution& d) {
  ojson j;
  j["count"] = d.count;
  j["mean"] = d.mean;
  j["stddev"] = d.stddev;
  j["min"] = d.min;
  j["p50"] = d.p50;
  j["p90"] = d.p90;
  j["p99"] = d.p99;
  j["max"] = d.max;
  return j;
}

// `text` centred in `width` columns of `fill` (the extra column, if any, on the right), as
// Python's "{:{fill}^{width}}" does.
std::string Center(std::string_view text, char fill, size_t width) {
  if (text.size() >= width) return std::string(text);
  const size_t left = (width - text.size()) / 2;
  const size_t right = width - text.size() - left;
  return std::string(left, fill) + std::string(text) + std::string(right, fill);
}

constexpr size_t kWidth = 50;

void AddLine(std::string* out, std::string_view label, std::string_view value) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-40.*s %.*s\n", static_cast<int>(label.size()), label.data(),
                static_cast<int>(value.size()), value.data());
  *out += buf;
}
void AddInt(std::string* out, std::string_view label, int64_t value) {
  AddLine(out, label, std::to_string(value));
}
void AddFloat(std::string* out, std::string_view label, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", value);
  AddLine(out, label, buf);
}

void AddDistribution(std::string* out, std::string_view heading, std::string_view name,
                     const Distribution& d) {
  *out += Center(heading, '-', kWidth) + "\n";
  const std::string n(name);
  AddFloat(out, "Mean " + n + " (ms):", d.mean);
  AddFloat(out, "Median " + n + " (ms):", d.p50);
  AddFloat(out, "P90 " + n + " (ms):", d.p90);
  AddFloat(out, "P99 " + n + " (ms):", d.p99);
}

}  // namespace

Result<Slo> ParseSlo(std::string_view spec) {
  Slo slo;
  bool seen[3] = {false, false, false};
  size_t pos = 0;
  while (pos < spec.size()) {
    const size_t begin = spec.find_first_not_of(", \t", pos);
    if (begin == std::string_view::npos) break;
    size_t end = spec.find_first_of(", \t", begin);
    if (end == std::string_view::npos) end = spec.size();
    pos = end;
    const std::string_view part = spec.substr(begin, end - begin);
    const std::string where = "SLO '" + std::string(part) + "'";
    const size_t colon = part.find(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument(where + ": expected KEY:MILLISECONDS, e.g. ttft:200");
    }
    const std::string_view key = part.substr(0, colon);
    double value = 0;
    if (!ParseNumber(part.substr(colon + 1), &value)) {
      return InvalidArgument(where + ": the value must be a number of milliseconds");
    }
    if (value < 0) return InvalidArgument(where + ": the value must be >= 0 milliseconds");
    int index = key == "ttft" ? 0 : key == "tpot" ? 1 : key == "e2el" ? 2 : -1;
    if (index < 0) {
      return InvalidArgument(where + ": unknown key '" + std::string(key) +
                             "' (expected ttft, tpot or e2el)");
    }
    if (seen[index]) return InvalidArgument(where + ": '" + std::string(key) + "' given twice");
    seen[index] = true;
    (index == 0 ? slo.ttft_ms : index == 1 ? slo.tpot_ms : slo.e2el_ms) = value;
  }
  return slo;
}

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return PercentileOfSorted(values, p);
}

Distribution Distribute(const std::vector<double>& values_s) {
  Distribution d;
  if (values_s.empty()) return d;
  std::vector<double> ms(values_s.size());
  for (size_t i = 0; i < values_s.size(); ++i) ms[i] = values_s[i] * 1000.0;
  std::sort(ms.begin(), ms.end());
  d.count = static_cast<int64_t>(ms.size());
  double sum = 0;
  for (double v : ms) sum += v;
  d.mean = sum / static_cast<double>(ms.size());
  double sq = 0;
  for (double v : ms) sq += (v - d.mean) * (v - d.mean);
  d.stddev = std::sqrt(sq / static_cast<double>(ms.size()));  // population (numpy's np.std)
  d.min = ms.front();
  d.max = ms.back();
  d.p50 = PercentileOfSorted(ms, 50);
  d.p90 = PercentileOfSorted(ms, 90);
  d.p99 = PercentileOfSorted(ms, 99);
  return d;
}

Summary Summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo) {
  Summary s;
  s.num_requests = static_cast<int32_t>(records.size());
  s.duration_s = duration_s;
  s.has_slo = slo.any();
  s.slo = slo;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++s.num_failed;
      const std::string type = r.error_type.empty() ? "unknown" : r.error_type;
      ++s.errors[type];
      s.error_examples.emplace(type, r.error_message);  // keeps the first
      continue;
    }
    ++s.num_completed;
    if (r.input_tokens >= 0) s.total_input_tokens += r.input_tokens;
    s.total_output_tokens += r.output_tokens;
    // NOTE: a request that produced no output has no first token, so no TTFT.
    if (r.output_tokens > 0) ttfts.push_back(r.ttft_s);
    e2els.push_back(r.e2e_s);
    itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
    double tpot = 0;  // as vLLM: 0 for goodput when there is a single output token
    if (r.output_tokens > 1) {
      tpot = (r.e2e_s - r.ttft_s) / (r.output_tokens - 1);
      tpots.push_back(tpot);
    }
    if (s.has_slo) {
      const bool good = (slo.ttft_ms <= 0 || r.ttft_s * 1000.0 <= slo.ttft_ms) &&
                        (slo.tpot_ms <= 0 || tpot * 1000.0 <= slo.tpot_ms) &&
                        (slo.e2el_ms <= 0 || r.e2e_s * 1000.0 <= slo.e2el_ms);
      if (good) ++s.num_good;
    }
  }
  if (duration_s > 0) {
    s.request_throughput = s.num_completed / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_throughput =
        static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    s.goodput = s.num_good / duration_s;
  }
  s.ttft = Distribute(ttfts);
  s.tpot = Distribute(tpots);
  s.itl = Distribute(itls);
  s.e2el = Distribute(e2els);
  return s;
}

nlohmann::ordered_json SummaryToJson(const Summary& s) {
  ojson j;
  j["num_requests"] = s.num_requests;
  j["num_completed"] = s.num_completed;
  j["num_failed"] = s.num_failed;
  j["errors"] = ojson::object();
  for (const auto& [type, count] : s.errors) j["errors"][type] = count;
  j["error_examples"] = ojson::object();
  for (const auto& [type, message] : s.error_examples) j["error_examples"][type] = message;
  j["duration_s"] = s.duration_s;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["output_throughput"] = s.output_throughput;
  j["total_throughput"] = s.total_throughput;
  if (s.has_slo) {
    j["slo"] = {{"ttft_ms", s.slo.ttft_ms}, {"tpot_ms", s.slo.tpot_ms}, {"e2el_ms", s.slo.e2el_ms}};
    j["num_good"] = s.num_good;
    j["goodput"] = s.goodput;
  }
  j["ttft"] = DistributionToJson(s.ttft);
  j["tpot"] = DistributionToJson(s.tpot);
  j["itl"] = DistributionToJson(s.itl);
  j["e2el"] = DistributionToJson(s.e2el);
  return j;
}

std::string FormatSummary(const Summary& s, std::string_view title) {
  std::string padded_title = " ";
  padded_title.append(title).append(" ");
  std::string out = Center(padded_title, '=', kWidth) + "\n";
  AddInt(&out, "Successful requests:", s.num_completed);
  AddInt(&out, "Failed requests:", s.num_failed);
  AddFloat(&out, "Benchmark duration (s):", s.duration_s);
  AddInt(&out, "Total input tokens:", s.total_input_tokens);
  AddInt(&out, "Total generated tokens:", s.total_output_tokens);
  AddFloat(&out, "Request throughput (req/s):", s.request_throughput);
  if (s.has_slo) AddFloat(&out, "Request goodput (req/s):", s.goodput);
  AddFloat(&out, "Output token throughput (tok/s):", s.output_throughput);
  AddFloat(&out, "Total token throughput (tok/s):", s.total_throughput);
  AddDistribution(&out, "Time to First Token", "TTFT", s.ttft);
  AddDistribution(&out, "Time per Output Token (excl. 1st token)", "TPOT", s.tpot);
  AddDistribution(&out, "Inter-token Latency", "ITL", s.itl);
  AddDistribution(&out, "End-to-end Latency", "E2EL", s.e2el);
  if (!s.errors.empty()) {
    out += Center("Errors", '-', kWidth) + "\n";
    for (const auto& [type, count] : s.errors) {
      AddInt(&out, type + ":", count);
      auto example = s.error_examples.find(type);
      if (example != s.error_examples.end() && !example->second.empty()) {
        constexpr size_t kMaxMessage = 200;
        std::string message = example->second.substr(0, kMaxMessage);
        if (example->second.size() > kMaxMessage) message += "...";
        out += "  first: " + message + "\n";
      }
    }
  }
  out += std::string(kWidth, '=') + "\n";
  return out;
}

}  // namespace kiln::benchmark
