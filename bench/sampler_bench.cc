// sampler_bench: time per call of the CPU reference sampler (backend/cpu/sampler.h) on one row of
// random logits, for the common settings.
//
// usage: sampler_bench [VOCAB_SIZE (default 49152)] [LOGIT_STDDEV (default 3)]
//
// Yardstick, measured in the same run: one plain pass over the row (a serial fp32 max) and
// Score() alone (a max pass plus one expf per token), which every Sample() call includes. The
// logits are roughly normal; real model rows are usually peakier, which makes top_p cheaper.
// Median of 200 calls, one thread, the RNG position advancing each call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "backend/cpu/sampler.h"
#include "core/philox.h"

namespace {

double MedianMicros(const std::function<int32_t(int)>& fn) {
  std::vector<double> times;
  int32_t sink = 0;
  for (int i = 0; i < 201; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    sink += fn(i);
    const auto t1 = std::chrono::steady_clock::now();
    if (i > 0) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  if (sink == -1) std::printf("\n");  // keeps the calls alive
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t vocab_size = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 49152;
  const double stddev = argc > 2 ? std::strtod(argv[2], nullptr) : 3.0;
  std::vector<float> logits(vocab_size);
  for (size_t i = 0; i < vocab_size; ++i) {
    const kiln::Philox4x32Block b =
        kiln::Philox4x32({{static_cast<uint32_t>(i), 0, 0, 1}}, {{99, 0}});
    const double u1 = kiln::UniformFloat(b.w[0]);
    const double u2 = kiln::UniformFloat(b.w[1]);
    logits[i] = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) *
                                   std::cos(2.0 * 3.14159265358979 * u2));
  }
  const std::vector<int32_t> outputs(256, 7);
  std::vector<int32_t> prompt(2048);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 37 % vocab_size);

  std::printf("vocab %zu, logit stddev %.1f; median us per call\n", vocab_size, stddev);
  std::printf("%-52s %9.1f\n", "baseline: one fp32 max pass", MedianMicros([&](int) {
                float m = -INFINITY;
                for (float x : logits) m = std::max(m, x);
                return static_cast<int32_t>(m);
              }));
  std::printf("%-52s %9.1f\n", "baseline: Score(target, 0)",
              MedianMicros([&](int i) { return kiln::cpu::Score(logits, i, 0).rank; }));

  struct Case {
    const char* name;
    kiln::SamplingSpec spec;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, auto&& set) {
    kiln::SamplingSpec spec;
    set(spec);
    cases.push_back({name, spec});
  };
  add("greedy", [](kiln::SamplingSpec&) {});
  add("greedy, 20 top logprobs", [](kiln::SamplingSpec& s) { s.num_top_logprobs = 20; });
  add("greedy, rep/freq/presence (2048 prompt, 256 out)", [&](kiln::SamplingSpec& s) {
    s.repetition_penalty = 1.1f;
    s.frequency_penalty = 0.5f;
    s.presence_penalty = 0.5f;
    s.prompt_token_ids = prompt;
  });
  add("temperature 1", [](kiln::SamplingSpec& s) { s.temperature = 1.0f; });
  add("temperature 1, top_k 50", [](kiln::SamplingSpec& s) {
    s.temperature = 1.0f;
    s.top_k = 50;
  });
  add("temperature 1, top_p 0.9", [](kiln::SamplingSpec& s) {
    s.temperature = 1.0f;
    s.top_p = 0.9f;
  });
  add("temperature 0.7, top_p 0.9", [](kiln::SamplingSpec& s) {
    s.temperature = 0.7f;
    s.top_p = 0.9f;
  });
  add("temperature 1, min_p 0.05", [](kiln::SamplingSpec& s) {
    s.temperature = 1.0f;
    s.min_p = 0.05f;
  });
  add("temperature 1, top_k 50, top_p 0.9, min_p 0.05", [](kiln::SamplingSpec& s) {
    s.temperature = 1.0f;
    s.top_k = 50;
    s.top_p = 0.9f;
    s.min_p = 0.05f;
  });
  for (Case& c : cases) {
    const bool has_penalties = c.spec.repetition_penalty != 1.0f;
    std::printf("%-52s %9.1f\n", c.name, MedianMicros([&](int i) {
                  kiln::SamplingSpec spec = c.spec;
                  spec.seed = 1234;
                  spec.output_token_ids =
                      std::span<const int32_t>(outputs).subspan(0, has_penalties ? 256 : i % 256);
                  return kiln::cpu::Sample(logits, spec).token_id;
                }));
  }
  return 0;
}
