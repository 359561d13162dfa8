// SampleRows / ScoreRows (kernels/sampling.h) against their CPU twins cpu::Sample / cpu::Score
// (label gpu: run on the GPU machine).
//
// What is compared, and the tolerance:
//   - token_id, rank, num_top and the top ids: exactly. The GPU repeats the CPU's per-token float
//     operations (sampling.cu's header), so only a near-tie can part them: a top-p prefix whose
//     weight lands within ~1e-16 relative of the target (the GPU sums weights exactly, the CPU in
//     double in its own order), a race between two scores one float ulp apart, or a weight where
//     glibc's expf misrounds (~0.502 ulp) and the GPU's double exp does not. Each has odds far
//     below 1e-6 per row on these inputs, so the test allows none, over every option alone and
//     combined, on random and adversarial logits.
//   - logprob and top logprobs: within 1e-5 absolute (the brief's bound): the log-sum-exp is
//     summed in a different order (split blocks, rescaled partial sums) than the CPU's double sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/sampler.h"
#include "kernels/sampling.h"

namespace kiln::kernels {
namespace {

#define CUDA_OK(expr) ASSERT_EQ(cudaSuccess, (expr)) << #expr

bool HasDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Device memory freed at scope exit.
template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t size = 0;
  explicit DeviceArray(size_t n) : size(n) {
    if (n > 0 && cudaMalloc(&ptr, n * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

template <typename T>
cudaError_t Upload(DeviceArray<T>& dev, const std::vector<T>& host) {
  if (host.empty()) return cudaSuccess;
  return cudaMemcpy(dev.ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
}

enum class LogitKind { kNormal, kTies, kAllEqual, kNegInf, kHuge };

// Fills one row of logits: normal with a random scale, or adversarial.
void FillRow(LogitKind kind, std::mt19937_64& rng, std::span<float> row) {
  const float scales[] = {0.3f, 1.0f, 3.0f, 8.0f};
  const float scale = scales[rng() % 4];
  std::normal_distribution<float> normal(0.0f, scale);
  for (float& x : row) x = normal(rng);
  const size_t n = row.size();
  switch (kind) {
    case LogitKind::kNormal:
      break;
    case LogitKind::kTies:  // few distinct values: ties at every cut
      for (float& x : row) x = std::round(x * 0.5f);
      break;
    case LogitKind::kAllEqual:
      std::fill(row.begin(), row.end(), 1.25f);
      break;
    case LogitKind::kNegInf:
      for (float& x : row) {
        if (rng() % 8 == 0) x = -INFINITY;
      }
      break;
    case LogitKind::kHuge:
      row[rng() % n] = (rng() % 2) ? 1e30f : 90.0f;
      break;
  }
}

// One row's options in both forms: host vectors behind the CPU spec, and the packed GPU row.
struct RowCase {
  SamplingRow gpu;
  std::vector<std::pair<int32_t, float>> bias;
  std::vector<int32_t> banned, prompt, output;
};

RowCase RandomRowCase(std::mt19937_64& rng, int32_t vocab, bool all_banned) {
  RowCase c;
  auto pick = [&](auto... options) {
    const std::common_type_t<decltype(options)...> values[] = {options...};
    return values[rng() % sizeof...(options)];
  };
  auto id = [&] { return static_cast<int32_t>(rng() % vocab); };
  SamplingRow& r = c.gpu;
  r.temperature = rng() % 4 == 0 ? 0.0f : pick(0.3f, 0.7f, 1.0f, 1.0f, 1.7f, 1e-3f);
  r.top_k = rng() % 2 ? 0 : pick(1, 2, 7, 50, 1000, 4096, 5000, vocab + 5);
  r.top_p = rng() % 2 ? 1.0f : pick(1e-7f, 0.1f, 0.5f, 0.8f, 0.9f, 0.95f, 0.999f);
  r.min_p = rng() % 3 ? 0.0f : pick(0.001f, 0.05f, 0.2f, 1.0f);
  r.num_top_logprobs = rng() % 2 ? 0 : static_cast<int32_t>(1 + rng() % kMaxTopLogprobs);
  r.seed = rng();
  if (rng() % 2) {  // penalties and their lists
    r.repetition_penalty = pick(1.0f, 1.1f, 0.8f, 1.3f);
    r.frequency_penalty = pick(0.0f, 0.5f, -0.3f);
    r.presence_penalty = pick(0.0f, 0.7f, -0.2f);
    const int32_t pool = 1 + static_cast<int32_t>(rng() % 64);  // repeats within and across lists
    std::vector<int32_t> ids(pool);
    for (int32_t& x : ids) x = id();
    const size_t num_prompt = rng() % 300, num_output = rng() % 4 == 0 ? rng() % 3000 : rng() % 80;
    for (size_t i = 0; i < num_prompt; ++i)
      c.prompt.push_back(rng() % 2 ? ids[rng() % pool] : id());
    for (size_t i = 0; i < num_output; ++i)
      c.output.push_back(rng() % 4 ? ids[rng() % pool] : id());
    if (rng() % 3 == 0) {
      for (int i = 0, n = static_cast<int>(rng() % 20); i < n; ++i) {
        const int32_t b = rng() % 3 ? id() : ids[rng() % pool];
        c.bias.push_back({b, std::uniform_real_distribution<float>(-8.0f, 8.0f)(rng)});
        if (rng() % 4 == 0) c.bias.push_back({b, 1.5f});  // a repeated id adds twice
      }
    }
    if (rng() % 3 == 0) {
      for (int i = 0, n = static_cast<int>(rng() % 30); i < n; ++i) c.banned.push_back(id());
    }
  } else {
    // The RNG position without penalties: output ids that do nothing but count.
    c.output.resize(rng() % 200, 0);
    for (int32_t& x : c.output) x = id();
  }
  if (all_banned) {
    c.banned.resize(vocab);
    for (int32_t i = 0; i < vocab; ++i) c.banned[i] = i;
  }
  r.rng_position = static_cast<int32_t>(c.output.size());
  return c;
}

SamplingSpec ToSpec(const RowCase& c) {
  SamplingSpec s;
  s.temperature = c.gpu.temperature;
  s.top_k = c.gpu.top_k;
  s.top_p = c.gpu.top_p;
  s.min_p = c.gpu.min_p;
  s.presence_penalty = c.gpu.presence_penalty;
  s.frequency_penalty = c.gpu.frequency_penalty;
  s.repetition_penalty = c.gpu.repetition_penalty;
  s.seed = c.gpu.seed;
  s.num_top_logprobs = c.gpu.num_top_logprobs;
  s.logit_bias = c.bias;
  s.banned_token_ids = c.banned;
  s.prompt_token_ids = c.prompt;
  s.output_token_ids = c.output;
  return s;
}

std::string Describe(const SamplingRow& r) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "T=%g k=%d p=%g min_p=%g rp=%g f=%g pres=%g top=%d seed=%llu pos=%d", r.temperature,
                r.top_k, r.top_p, r.min_p, r.repetition_penalty, r.frequency_penalty,
                r.presence_penalty, r.num_top_logprobs, static_cast<unsigned long long>(r.seed),
                r.rng_position);
  return buf;
}

// Runs fn(i) for i in [0, n) over the host's cores (the CPU reference is the slow part).
template <typename Fn>
void ParallelFor(int n, Fn fn) {
  const int num_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < n; i += num_threads) fn(i);
    });
  }
  for (std::thread& th : threads) th.join();
}

// Logprobs within 1e-5; a -inf logit's logprob is -inf on both.
bool Near(float a, float b) { return a == b || std::fabs(a - b) <= 1e-5f; }

// Compares one GPU result with the CPU's; returns an empty string when they agree.
std::string Compare(const SampledToken& g, const ScoredToken& c) {
  char buf[256];
  if (g.token_id != c.token_id || g.rank != c.rank ||
      g.num_top != static_cast<int32_t>(c.top_logprobs.size()) || !Near(g.logprob, c.logprob)) {
    std::snprintf(buf, sizeof(buf), "token %d/%d rank %d/%d logprob %.7g/%.7g num_top %d/%zu",
                  g.token_id, c.token_id, g.rank, c.rank, g.logprob, c.logprob, g.num_top,
                  c.top_logprobs.size());
    return buf;
  }
  for (int i = 0; i < g.num_top; ++i) {
    if (g.top_ids[i] != c.top_logprobs[i].token_id ||
        !Near(g.top_logprobs[i], c.top_logprobs[i].logprob)) {
      std::snprintf(buf, sizeof(buf), "top %d: id %d/%d logprob %.7g/%.7g", i, g.top_ids[i],
                    c.top_logprobs[i].token_id, g.top_logprobs[i], c.top_logprobs[i].logprob);
      return buf;
    }
  }
  return "";
}

struct BatchResult {
  int num_rows = 0;
  int num_mismatches = 0;
};

// One batch of random rows through SampleRows and cpu::Sample; rows_out gets the GPU results.
void RunSampleBatch(int32_t num_rows, int32_t vocab, int64_t stride, uint64_t seed,
                    BatchResult* result, std::vector<SampledToken>* rows_out = nullptr,
                    std::vector<float>* logits_out = nullptr,
                    std::vector<RowCase>* cases_out = nullptr) {
  std::mt19937_64 rng(seed);
  std::vector<float> logits(static_cast<size_t>(num_rows) * stride, 0.0f);
  std::vector<RowCase> cases(num_rows);
  for (int32_t r = 0; r < num_rows; ++r) {
    const LogitKind kinds[] = {LogitKind::kNormal, LogitKind::kNormal,   LogitKind::kNormal,
                               LogitKind::kTies,   LogitKind::kAllEqual, LogitKind::kNegInf,
                               LogitKind::kHuge};
    FillRow(kinds[rng() % 7], rng, std::span<float>(logits.data() + r * stride, vocab));
    cases[r] = RandomRowCase(rng, vocab, rng() % 50 == 0);
  }
  // Pack the lists.
  std::vector<SamplingRow> rows(num_rows);
  std::vector<int32_t> bias_ids, banned_ids, token_ids;
  std::vector<float> bias_values;
  for (int32_t r = 0; r < num_rows; ++r) {
    SamplingRow& row = rows[r];
    row = cases[r].gpu;
    row.bias_begin = static_cast<int32_t>(bias_ids.size());
    for (const auto& [id, v] : cases[r].bias) {
      bias_ids.push_back(id);
      bias_values.push_back(v);
    }
    row.bias_end = static_cast<int32_t>(bias_ids.size());
    row.banned_begin = static_cast<int32_t>(banned_ids.size());
    banned_ids.insert(banned_ids.end(), cases[r].banned.begin(), cases[r].banned.end());
    row.banned_end = static_cast<int32_t>(banned_ids.size());
    row.prompt_begin = static_cast<int32_t>(token_ids.size());
    token_ids.insert(token_ids.end(), cases[r].prompt.begin(), cases[r].prompt.end());
    row.prompt_end = row.output_begin = static_cast<int32_t>(token_ids.size());
    token_ids.insert(token_ids.end(), cases[r].output.begin(), cases[r].output.end());
    row.output_end = static_cast<int32_t>(token_ids.size());
  }
  DeviceArray<float> d_logits(logits.size()), d_bias_values(bias_values.size() + 1);
  DeviceArray<SamplingRow> d_rows(num_rows);
  DeviceArray<int32_t> d_bias_ids(bias_ids.size() + 1), d_banned(banned_ids.size() + 1),
      d_tokens(token_ids.size() + 1);
  DeviceArray<SampledToken> d_out(num_rows);
  const size_t ws_bytes = SamplingWorkspaceBytes(num_rows, vocab);
  DeviceArray<uint8_t> d_ws(ws_bytes);
  ASSERT_TRUE(d_logits.ptr && d_rows.ptr && d_out.ptr && d_ws.ptr);
  CUDA_OK(Upload(d_logits, logits));
  CUDA_OK(Upload(d_rows, rows));
  CUDA_OK(Upload(d_bias_ids, bias_ids));
  CUDA_OK(Upload(d_bias_values, bias_values));
  CUDA_OK(Upload(d_banned, banned_ids));
  CUDA_OK(Upload(d_tokens, token_ids));
  // Poison: the outputs, and the workspace (SampleRows must not rely on it being clear).
  CUDA_OK(cudaMemset(d_out.ptr, 0xff, num_rows * sizeof(SampledToken)));
  CUDA_OK(cudaMemset(d_ws.ptr, 0x5a, ws_bytes));
  SamplingInputs in;
  in.logits = d_logits.ptr;
  in.logits_stride = stride;
  in.num_rows = num_rows;
  in.vocab_size = vocab;
  in.rows = d_rows.ptr;
  in.bias_ids = d_bias_ids.ptr;
  in.bias_values = d_bias_values.ptr;
  in.banned_ids = d_banned.ptr;
  in.token_ids = d_tokens.ptr;
  CUDA_OK(SampleRows(in, d_ws.ptr, ws_bytes, d_out.ptr, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<SampledToken> out(num_rows);
  CUDA_OK(
      cudaMemcpy(out.data(), d_out.ptr, num_rows * sizeof(SampledToken), cudaMemcpyDeviceToHost));
  std::vector<ScoredToken> ref(num_rows);
  ParallelFor(num_rows, [&](int r) {
    ref[r] =
        cpu::Sample(std::span<const float>(logits.data() + r * stride, vocab), ToSpec(cases[r]));
  });
  for (int32_t r = 0; r < num_rows; ++r) {
    ++result->num_rows;
    const std::string diff = Compare(out[r], ref[r]);
    if (!diff.empty()) {
      ++result->num_mismatches;
      if (result->num_mismatches <= 10) {
        ADD_FAILURE() << "vocab " << vocab << " row " << r << "/" << num_rows << " ("
                      << Describe(rows[r]) << " bias " << cases[r].bias.size() << " banned "
                      << cases[r].banned.size() << " prompt " << cases[r].prompt.size()
                      << "): " << diff;
      }
    }
  }
  if (rows_out) *rows_out = std::move(out);
  if (logits_out) *logits_out = std::move(logits);
  if (cases_out) *cases_out = std::move(cases);
}

class SampleRowsTest : public ::testing::TestWithParam<int32_t> {
 protected:
  void SetUp() override {
    if (!HasDevice()) GTEST_SKIP() << "no CUDA device visible (this test runs on the GPU machine)";
  }
};

TEST_P(SampleRowsTest, MatchesCpuSampleOnRandomRowsAndOptions) {
  const int32_t vocab = GetParam();
  BatchResult result;
  uint64_t seed = 1000 + vocab;
  const int32_t batches[] = {1, 7, 83, 256};
  // KILN_SAMPLING_TEST_QUICK: one round, for the compute-sanitizer runs.
  const int reps = std::getenv("KILN_SAMPLING_TEST_QUICK") ? 1 : vocab > 100000 ? 3 : 6;
  for (int rep = 0; rep < reps; ++rep) {
    for (int32_t num_rows : batches) {
      // Odd strides (unaligned rows) on every other batch.
      const int64_t stride = (rep % 2) ? vocab + 3 : vocab;
      RunSampleBatch(num_rows, vocab, stride, seed++, &result);
      if (HasFatalFailure()) return;
    }
  }
  std::printf("vocab %d: %d rows, %d mismatches\n", vocab, result.num_rows, result.num_mismatches);
  EXPECT_EQ(result.num_mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, SampleRowsTest, ::testing::Values(5125, 49152, 128256));

// A seeded row gives the same token whatever batch it runs in: the first rows of a batch, alone.
TEST(SampleRowsBatchTest, RowsAreIndependentOfTheirBatch) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device visible (this test runs on the GPU machine)";
  BatchResult big, small;
  std::vector<SampledToken> out_big, out_small;
  RunSampleBatch(83, 49152, 49152, 77, &big, &out_big);
  // The same seed draws the same first rows (RunSampleBatch draws row by row).
  RunSampleBatch(1, 49152, 49152, 77, &small, &out_small);
  ASSERT_EQ(out_small.size(), 1u);
  EXPECT_EQ(out_small[0].token_id, out_big[0].token_id);
  EXPECT_EQ(out_small[0].rank, out_big[0].rank);
  EXPECT_NEAR(out_small[0].logprob, out_big[0].logprob, 1e-6);
  EXPECT_EQ(big.num_mismatches + small.num_mismatches, 0);
}

TEST(SampleRowsBatchTest, RejectsBadArguments) {
  SamplingInputs in;
  in.num_rows = 1;
  in.vocab_size = 0;
  EXPECT_EQ(SampleRows(in, nullptr, 0, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(ScoreRows(nullptr, 10, 1, 10, nullptr, kMaxTopLogprobs + 1, nullptr, nullptr),
            cudaErrorInvalidValue);
}

class ScoreRowsTest : public ::testing::TestWithParam<int32_t> {
 protected:
  void SetUp() override {
    if (!HasDevice()) GTEST_SKIP() << "no CUDA device visible (this test runs on the GPU machine)";
  }
};

TEST_P(ScoreRowsTest, MatchesCpuScore) {
  const int32_t vocab = GetParam();
  std::mt19937_64 rng(vocab);
  for (int32_t num_top : {0, 1, 5, kMaxTopLogprobs}) {
    for (int32_t num_rows : {1, 7, 83}) {
      const int64_t stride = vocab + (num_rows % 2);
      std::vector<float> logits(num_rows * stride, 0.0f);
      std::vector<int32_t> targets(num_rows);
      for (int32_t r = 0; r < num_rows; ++r) {
        const LogitKind kinds[] = {LogitKind::kNormal, LogitKind::kTies, LogitKind::kAllEqual,
                                   LogitKind::kNegInf, LogitKind::kHuge};
        FillRow(kinds[rng() % 5], rng, std::span<float>(logits.data() + r * stride, vocab));
        targets[r] = static_cast<int32_t>(rng() % vocab);
      }
      DeviceArray<float> d_logits(logits.size());
      DeviceArray<int32_t> d_targets(num_rows);
      DeviceArray<SampledToken> d_out(num_rows);
      CUDA_OK(Upload(d_logits, logits));
      CUDA_OK(Upload(d_targets, targets));
      CUDA_OK(cudaMemset(d_out.ptr, 0xff, num_rows * sizeof(SampledToken)));
      CUDA_OK(ScoreRows(d_logits.ptr, stride, num_rows, vocab, d_targets.ptr, num_top, d_out.ptr,
                        nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<SampledToken> out(num_rows);
      CUDA_OK(cudaMemcpy(out.data(), d_out.ptr, num_rows * sizeof(SampledToken),
                         cudaMemcpyDeviceToHost));
      for (int32_t r = 0; r < num_rows; ++r) {
        const ScoredToken ref = cpu::Score(
            std::span<const float>(logits.data() + r * stride, vocab), targets[r], num_top);
        const std::string diff = Compare(out[r], ref);
        EXPECT_TRUE(diff.empty()) << "vocab " << vocab << " row " << r << " num_top " << num_top
                                  << ": " << diff;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, ScoreRowsTest, ::testing::Values(5125, 49152, 128256));

// Placeholders (< 0) take the previous step's sampled token of the row they name; real ids stay.
// 769 tokens: several blocks, a partial last one.
TEST(ResolvePreviousTokensTest, ReplacesOnlyPlaceholders) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device visible (this test runs on the GPU machine)";
  constexpr int32_t kRows = 83, kTokens = 769;
  std::vector<SampledToken> previous(kRows);
  for (int32_t r = 0; r < kRows; ++r) previous[r].token_id = 1000 + 7 * r;
  std::mt19937_64 rng(3);
  std::vector<int32_t> tokens(kTokens), want(kTokens);
  for (int32_t i = 0; i < kTokens; ++i) {
    const int32_t row = static_cast<int32_t>(rng() % kRows);
    const bool placeholder = rng() % 3 == 0;
    tokens[i] = placeholder ? -1 - row : static_cast<int32_t>(rng() % 50000);
    want[i] = placeholder ? previous[row].token_id : tokens[i];
  }
  DeviceArray<SampledToken> d_previous(kRows);
  DeviceArray<int32_t> d_tokens(kTokens);
  CUDA_OK(Upload(d_previous, previous));
  CUDA_OK(Upload(d_tokens, tokens));
  CUDA_OK(ResolvePreviousTokens(d_tokens.ptr, kTokens, d_previous.ptr, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int32_t> got(kTokens);
  CUDA_OK(cudaMemcpy(got.data(), d_tokens.ptr, kTokens * sizeof(int32_t), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want);
  EXPECT_EQ(ResolvePreviousTokens(d_tokens.ptr, 0, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(ResolvePreviousTokens(nullptr, 5, d_previous.ptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kiln::kernels
