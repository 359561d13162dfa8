#include "benchmark/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace kiln::benchmark {
namespace {

using json = nlohmann::json;

// NOTE: the distributions below are written out rather than taken from <random>, whose
// uniform_int/normal/gamma distributions and std::shuffle are implementation-defined: a seed then
// gives the same prompts and arrival times with libstdc++ and libc++ (up to libm rounding).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, n), unbiased (rejection of the top partial range). REQUIRES: n > 0.
  uint64_t Index(uint64_t n) {
    const uint64_t max = std::numeric_limits<uint64_t>::max();
    const uint64_t limit = max - (max % n + 1) % n;  // the largest multiple of n, minus 1
    uint64_t x = engine_();
    while (x > limit) x = engine_();
    return x % n;
  }
  // Uniform in [0, 1), 53 random bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller, one value per call).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]: log stays finite
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  // Gamma with `shape` and scale 1 (Marsaglia and Tsang 2000; shape < 1 boosted by U^(1/shape)).
  double Gamma(double shape) {
    if (shape < 1.0) {
      const double u = 1.0 - Uniform();
      return Gamma(shape + 1.0) * std::pow(u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
      const double x = Normal();
      double v = 1.0 + c * x;
      if (v <= 0) continue;
      v = v * v * v;
      const double u = 1.0 - Uniform();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }
  // Fisher-Yates.
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[Index(i)]);
  }

 private:
  std::mt19937_64 engine_;
};

// The ids random prompts are drawn from: the tokenizer's non-special ids, else [0, vocab_size).
Result<std::vector<int32_t>> TokenPool(const DatasetOptions& options, const Tokenizer* tokenizer) {
  std::vector<int32_t> pool;
  if (tokenizer != nullptr) {
    for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
      if (!tokenizer->is_special(id)) pool.push_back(id);
    }
    if (pool.empty()) {
      return InvalidArgument("dataset '" + options.kind +
                             "': the tokenizer has no non-special tokens to draw prompts from");
    }
    return pool;
  }
  if (options.vocab_size <= 0) {
    return InvalidArgument("dataset '" + options.kind +
                           "' needs a tokenizer or a vocab_size > 0 to draw token ids from");
  }
  pool.resize(options.vocab_size);
  for (int32_t id = 0; id < options.vocab_size; ++id) pool[id] = id;
  return pool;
}

Status RequirePositive(std::string_view kind, std::string_view name, int64_t value) {
  if (value > 0) return Status::Ok();
  return InvalidArgument("dataset '" + std::string(kind) + "': " + std::string(name) +
                         " must be > 0, got " + std::to_string(value));
}

// A length around `mean`: exactly mean when stddev <= 0, else a rounded normal draw clamped to
// [1, 2 * mean].
int32_t DrawLength(Rng* rng, int32_t mean, double stddev) {
  if (stddev <= 0) return mean;
  const double x = std::round(mean + stddev * rng->Normal());
  return static_cast<int32_t>(std::clamp(x, 1.0, 2.0 * mean));
}

void DrawIds(Rng* rng, const std::vector<int32_t>& pool, int32_t n, std::vector<int32_t>* out) {
  for (int32_t i = 0; i < n; ++i) out->push_back(pool[rng->Index(pool.size())]);
}

// Appends the text of ids[begin, end) to *text as Decode(ids, /*skip_special=*/false) would after
// whatever *at_start says was produced before, so a prompt decoded in parts equals its decoding
// whole.
void AppendText(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, size_t begin,
                size_t end, bool* at_start, std::string* text) {
  for (size_t i = begin; i < end; ++i) {
    tokenizer.AppendPiece(ids[i], /*skip_special=*/false, at_start, text);
  }
}

Result<std::vector<BenchRequest>> MakeRandom(const DatasetOptions& options,
                                             const Tokenizer* tokenizer) {
  KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "input_len", options.input_len));
  KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "output_len", options.output_len));
  if (!std::isfinite(options.input_len_stddev) || !std::isfinite(options.output_len_stddev)) {
    return InvalidArgument("dataset 'random': the length stddevs must be finite numbers");
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> pool, TokenPool(options, tokenizer));
  Rng rng(options.seed);
  std::vector<BenchRequest> requests(options.num_requests);
  for (BenchRequest& r : requests) {
    r.input_len = DrawLength(&rng, options.input_len, options.input_len_stddev);
    r.output_len = DrawLength(&rng, options.output_len, options.output_len_stddev);
    r.prompt_ids.reserve(r.input_len);
    DrawIds(&rng, pool, r.input_len, &r.prompt_ids);
    if (tokenizer != nullptr) r.prompt_text = tokenizer->Decode(r.prompt_ids, false);
  }
  return requests;
}

Result<std::vector<BenchRequest>> MakeSharedPrefix(const DatasetOptions& options,
                                                   const Tokenizer* tokenizer) {
  KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "num_prefixes", options.num_prefixes));
  KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "prefix_len", options.prefix_len));
  KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "question_len", options.question_len));
  KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "output_len", options.output_len));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> pool, TokenPool(options, tokenizer));
  Rng rng(options.seed);
  std::vector<std::vector<int32_t>> prefixes(options.num_prefixes);
  for (std::vector<int32_t>& p : prefixes) DrawIds(&rng, pool, options.prefix_len, &p);

  std::vector<BenchRequest> requests(options.num_requests);
  for (int32_t i = 0; i < options.num_requests; ++i) {
    BenchRequest& r = requests[i];
    r.prompt_ids = prefixes[i % options.num_prefixes];
    DrawIds(&rng, pool, options.question_len, &r.prompt_ids);
    r.prefix_len = options.prefix_len;
    r.input_len = options.prefix_len + options.question_len;
    r.output_len = options.output_len;
    if (tokenizer != nullptr) {
      bool at_start = true;
      AppendText(*tokenizer, r.prompt_ids, 0, r.prefix_len, &at_start, &r.prompt_text);
      r.prefix_text_len = static_cast<int32_t>(r.prompt_text.size());
      AppendText(*tokenizer, r.prompt_ids, r.prefix_len, r.prompt_ids.size(), &at_start,
                 &r.prompt_text);
    }
  }
  return requests;
}

Result<std::string> ReadFile(const std::string& kind, const std::string& path) {
  if (path.empty()) return InvalidArgument("dataset '" + kind + "' needs a path to its file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open the " + kind + " dataset (does it exist?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError(path + ": read failed");
  return ss.str();
}

// A jsonl line's "output_len" (or its synonym "max_tokens"), or 0 when it has neither.
Result<int32_t> OutputLenField(const json& obj, const std::string& where) {
  for (const char* key : {"output_len", "max_tokens"}) {
    auto it = obj.find(key);
    if (it == obj.end()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
        it->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument(where + ": \"" + key + "\" must be a positive integer, got " +
                             it->dump());
    }
    return static_cast<int32_t>(it->get<int64_t>());
  }
  return 0;
}

Result<std::vector<BenchRequest>> MakeJsonl(const DatasetOptions& options,
                                            const Tokenizer* tokenizer) {
  KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "output_len", options.output_len));
  KILN_ASSIGN_OR_RETURN(std::string text, ReadFile(options.kind, options.path));
  std::vector<BenchRequest> entries;
  std::istringstream lines(text);
  std::string line;
  for (int64_t line_no = 1; std::getline(lines, line); ++line_no) {
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    const std::string where = options.path + ":" + std::to_string(line_no);
    json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return InvalidArgument(where + ": not valid JSON");
    if (!obj.is_object()) {
      return InvalidArgument(where + ": expected a JSON object like {\"prompt\": \"...\"}");
    }
    auto prompt = obj.find("prompt");
    if (prompt == obj.end() || !prompt->is_string()) {
      return InvalidArgument(where + ": expected a string field \"prompt\"");
    }
    BenchRequest r;
    r.prompt_text = prompt->get<std::string>();
    KILN_ASSIGN_OR_RETURN(int32_t output_len, OutputLenField(obj, where));
    r.output_len = output_len > 0 ? output_len : options.output_len;
    if (tokenizer != nullptr) {
      r.prompt_ids = tokenizer->Encode(r.prompt_text, /*add_special=*/false,
                                       /*parse_special=*/false);
      r.input_len = static_cast<int32_t>(r.prompt_ids.size());
    }
    entries.push_back(std::move(r));
  }
  if (entries.empty()) return InvalidArgument(options.path + ": no prompts (every line is blank)");
  std::vector<BenchRequest> requests;
  requests.reserve(options.num_requests);
  for (int32_t i = 0; i < options.num_requests; ++i)
    requests.push_back(entries[i % entries.size()]);
  return requests;
}

// The first two turns of a ShareGPT entry: the prompt and the reply whose length is asked for.
struct Conversation {
  std::string prompt;
  std::string reply;
};

// The conversations of a ShareGPT file, in file order; entries with fewer than two turns are
// left out. Every entry is checked, so an error does not depend on the seed.
Result<std::vector<Conversation>> ParseShareGpt(const std::string& text, const std::string& path) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  if (!root.is_array()) {
    return InvalidArgument(path + ": expected a JSON list of {\"conversations\": [...]} entries");
  }
  std::vector<Conversation> conversations;
  for (size_t i = 0; i < root.size(); ++i) {
    const json& entry = root[i];
    const std::string where = path + ": entry " + std::to_string(i) + " (counting from 0)";
    if (!entry.is_object()) return InvalidArgument(where + ": expected a JSON object");
    auto turns = entry.find("conversations");
    if (turns == entry.end() || !turns->is_array()) {
      return InvalidArgument(where + ": expected a list field \"conversations\"");
    }
    for (size_t t = 0; t < turns->size(); ++t) {
      const json& turn = (*turns)[t];
      if (!turn.is_object() || !turn.contains("value") || !turn["value"].is_string()) {
        return InvalidArgument(where + ": turn " + std::to_string(t) +
                               " has no string field \"value\"");
      }
    }
    if (turns->size() < 2) continue;
    conversations.push_back(
        {(*turns)[0]["value"].get<std::string>(), (*turns)[1]["value"].get<std::string>()});
  }
  return conversations;
}

Result<std::vector<BenchRequest>> MakeShareGpt(const DatasetOptions& options,
                                               const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) {
    return InvalidArgument(
        "dataset 'sharegpt' needs a tokenizer (to count prompt and reply "
        "tokens)");
  }
  if (options.fixed_output_len) {
    KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "output_len", options.output_len));
  }
  KILN_ASSIGN_OR_RETURN(std::string text, ReadFile(options.kind, options.path));
  KILN_ASSIGN_OR_RETURN(std::vector<Conversation> conversations, ParseShareGpt(text, options.path));
  Rng rng(options.seed);
  rng.Shuffle(&conversations);

  // vLLM's sample_sharegpt_requests: shuffle, then take entries in order until enough pass.
  constexpr size_t kMinLen = 4;
  constexpr size_t kMaxPromptLen = 1024;
  constexpr size_t kMaxTotalLen = 2048;
  std::vector<BenchRequest> requests;
  for (const Conversation& c : conversations) {
    if (requests.size() == static_cast<size_t>(options.num_requests)) break;
    std::vector<int32_t> ids = tokenizer->Encode(c.prompt, false, false);
    size_t output_len = options.output_len;
    if (!options.fixed_output_len) {
      output_len = tokenizer->Encode(c.reply, false, false).size();
      if (output_len < kMinLen) continue;
    }
    if (ids.size() < kMinLen || ids.size() > kMaxPromptLen) continue;
    if (ids.size() + output_len > kMaxTotalLen) continue;
    BenchRequest r;
    r.prompt_text = c.prompt;
    r.input_len = static_cast<int32_t>(ids.size());
    r.prompt_ids = std::move(ids);
    r.output_len = static_cast<int32_t>(output_len);
    requests.push_back(std::move(r));
  }
  if (requests.size() < static_cast<size_t>(options.num_requests)) {
    return InvalidArgument(options.path + ": only " + std::to_string(requests.size()) + " of " +
                           std::to_string(conversations.size()) +
                           " conversations pass the length filters (prompt and reply >= 4 "
                           "tokens, prompt <= 1024, sum <= 2048), but " +
                           std::to_string(options.num_requests) +
                           " requests were asked for; lower the number of requests");
  }
  return requests;
}

}  // namespace

Result<std::vector<BenchRequest>> MakeDataset(const DatasetOptions& options,
                                              const Tokenizer* tokenizer) {
  KILN_RETURN_IF_ERROR(RequirePositive(options.kind, "num_requests", options.num_requests));
  if (options.kind == "random") return MakeRandom(options, tokenizer);
  if (options.kind == "shared-prefix") return MakeSharedPrefix(options, tokenizer);
  if (options.kind == "jsonl") return MakeJsonl(options, tokenizer);
  if (options.kind == "sharegpt") return MakeShareGpt(options, tokenizer);
  return InvalidArgument("unknown dataset kind '" + options.kind +
                         "' (expected random, jsonl, sharegpt or shared-prefix)");
}

BenchRequest WarmupVariant(const BenchRequest& r) {
  BenchRequest v = r;
  if (!v.prompt_ids.empty())
    std::rotate(v.prompt_ids.begin(), v.prompt_ids.begin() + 1, v.prompt_ids.end());
  if (!v.prompt_text.empty()) {
    constexpr std::string_view kMark = "warm-up: ";
    v.prompt_text.insert(0, kMark);
    if (v.prefix_text_len > 0) v.prefix_text_len += static_cast<int32_t>(kMark.size());
  }
  return v;
}

std::vector<double> ArrivalTimes(int32_t n, double rate, double burstiness, uint64_t seed) {
  CHECK(rate > 0) << "rate " << rate;
  CHECK(burstiness > 0) << "burstiness " << burstiness;
  std::vector<double> times(std::max(n, 0), 0.0);
  if (std::isinf(rate)) return times;
  // vLLM sends a request, then waits a gamma-distributed gap: the first goes at time 0.
  Rng rng(seed);
  const double scale = 1.0 / (rate * burstiness);  // mean = shape * scale = 1 / rate
  for (int32_t i = 1; i < n; ++i) times[i] = times[i - 1] + scale * rng.Gamma(burstiness);
  return times;
}

}  // namespace kiln::benchmark
