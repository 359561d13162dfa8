// engine_bench: the CPU engine's figures (issue "Engine core on CPU"), each beside its yardstick
// measured in the same run:
//   1. batch-1 decode tok/s on the model, against the memory roofline (weight bytes read per
//      token / measured copy bandwidth);
//   2. aggregate decode tok/s with 16 concurrent requests (and the ratio to batch 1);
//   3. scheduler + bookkeeping time per step (Schedule + BuildStepInputs + Update, from the
//      engine's own StepStats) with 256 running requests, on the model and on FakeRunner.
//
//   build/bench/engine_bench --model "$(scripts/fetch-default-model)" [--threads N] [--json F]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "engine/fake_runner.h"
#include "engine/llm.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;
using bench::Clock;
using bench::Seconds;

// Read+write bandwidth of a 1 GiB memcpy (best of 5), bytes/s.
double CopyBandwidth() {
  const size_t n = size_t{1} << 30;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, Seconds(t0, Clock::now()));
    a[i] = b[n - 1 - i];
  }
  return 2.0 * n / best;
}

std::vector<int32_t> RandomPrompt(std::mt19937& rng, int32_t len, int32_t vocab) {
  std::vector<int32_t> ids(len);
  for (int32_t& id : ids) id = std::uniform_int_distribution<int32_t>(3, vocab - 1)(rng);
  return ids;
}

// Decode tok/s of `batch` concurrent requests: generated tokens after each request's first,
// over the time from the first first-token to the last finish.
Json DecodeRun(LLM& llm, int32_t batch, int32_t prompt_len, int32_t gen_len) {
  std::mt19937 rng(batch);
  std::vector<Prompt> prompts;
  for (int32_t i = 0; i < batch; ++i) {
    prompts.push_back(Prompt::Tokens(RandomPrompt(rng, prompt_len, llm.model_config().vocab_size)));
  }
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = gen_len;
  p.ignore_eos = true;
  auto t0 = Clock::now();
  auto results = llm.Generate(prompts, p);
  const double wall = Seconds(t0, Clock::now());
  if (!results.ok()) {
    std::fprintf(stderr, "%s\n", results.status().ToString().c_str());
    std::exit(1);
  }
  double first = 1e30, last = 0;
  int64_t decoded = 0;
  for (const GenerateResult& r : *results) {
    const CompletionOutput& c = r.completions[0];
    first = std::min(first, c.first_token_ms);
    last = std::max(last, c.finish_ms);
    decoded += static_cast<int64_t>(c.token_ids.size()) - 1;
  }
  const double decode_s = (last - first) / 1e3;
  return {{"batch", batch},
          {"prompt_tokens", prompt_len},
          {"generated_tokens_per_request", gen_len},
          {"wall_s", wall},
          {"decode_s", decode_s},
          {"decode_tok_s", decoded / decode_s},
          {"end_to_end_tok_s", batch * gen_len / wall}};
}

// Runs `num_requests` short requests to keep `num_requests` running; returns the mean
// bookkeeping and execute time of the steps where all of them were running decodes.
Json BookkeepingRun(Engine& engine, int32_t num_requests, int32_t max_tokens, const char* what) {
  std::mt19937 rng(1234);
  const int32_t vocab = engine.model_config().vocab_size;
  static RequestId next_id = 1 << 20;
  for (int32_t i = 0; i < num_requests; ++i) {
    EngineRequest r;
    r.id = next_id++;
    r.prompt_token_ids = RandomPrompt(rng, 8, vocab);
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    if (!engine.AddRequest(std::move(r)).ok()) std::exit(1);
  }
  double book = 0, schedule = 0, build = 0, update = 0, execute = 0;
  int32_t steps = 0;
  while (engine.HasWork()) {
    engine.Step();
    const StepStats& s = engine.stats().last_step;
    if (s.num_decode_seqs == num_requests) {
      book += s.bookkeeping_us();
      schedule += s.schedule_us;
      build += s.build_us;
      update += s.update_us;
      execute += s.execute_us;
      ++steps;
    }
  }
  return {{"runner", what},
          {"running_requests", num_requests},
          {"decode_steps_measured", steps},
          {"bookkeeping_us_per_step", book / steps},
          {"schedule_us", schedule / steps},
          {"build_inputs_us", build / steps},
          {"update_us", update / steps},
          {"execute_us_per_step", execute / steps}};
}

int Main(int argc, char** argv) {
  std::string model, json_path;
  int32_t threads = 0;
  bool only_bookkeeping = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--only-bookkeeping") {
      only_bookkeeping = true;
    } else {
      std::fprintf(stderr,
                   "usage: engine_bench --model M [--threads N] [--json FILE] "
                   "[--only-bookkeeping]\n");
      return 2;
    }
  }
  if (only_bookkeeping) {  // FakeRunner only: for profiling the engine's own work
    EngineOptions fake_options;
    fake_options.num_kv_blocks = 256 * 40;
    fake_options.scheduler.max_num_seqs = 256;
    const int32_t vocab = std::getenv("VOCAB") ? std::atoi(std::getenv("VOCAB")) : 32000;
    auto fake = Engine::Create(std::make_unique<testing::FakeRunner>(vocab, 2), fake_options);
    std::printf("%s\n", BookkeepingRun(**fake, 256, 200, "fake").dump(2).c_str());
    return 0;
  }
  if (model.empty()) {
    std::fprintf(stderr, "engine_bench: --model is required\n");
    return 2;
  }
  const double bandwidth = CopyBandwidth();

  LlmOptions options;
  options.device = "cpu";
  options.num_threads = threads;
  options.engine.scheduler.max_num_seqs = 256;
  auto llm = LLM::Create(model, options);
  if (!llm.ok()) {
    std::fprintf(stderr, "engine_bench: %s\n", llm.status().ToString().c_str());
    return 1;
  }
  const ModelConfig& config = (*llm)->model_config();
  // The CPU runner reads every weight matrix once per decode step in its stored format (q4_1,
  // q8_0, ... decoded in the product), so the batch-1 floor is the stored bytes over the
  // measured bandwidth.
  const double weight_bytes = static_cast<double>((*llm)->checkpoint().WeightBytes());
  const double roofline_tok_s = bandwidth / weight_bytes;

  DecodeRun(**llm, 1, 16, 8);  // warm-up (page in weights, thread pools)
  Json b1 = DecodeRun(**llm, 1, 128, 128);
  Json b16 = DecodeRun(**llm, 16, 128, 64);
  Json book_model = BookkeepingRun((*llm)->engine(), 256, 6, "model");

  EngineOptions fake_options;
  fake_options.num_kv_blocks = 256 * 40;
  fake_options.scheduler.max_num_seqs = 256;
  auto fake = Engine::Create(std::make_unique<testing::FakeRunner>(32000, 2), fake_options);
  Json book_fake = BookkeepingRun(**fake, 256, 200, "fake (no model work)");

  Json out = {
      {"model", model},
      {"num_parameters", config.NumParameters()},
      {"threads", threads},
      {"copy_bandwidth_gb_s", bandwidth / 1e9},
      {"weight_bytes_per_token", weight_bytes},
      {"batch1_roofline_tok_s", roofline_tok_s},
      {"batch1", b1},
      {"batch16", b16},
      {"batch16_over_batch1", b16["decode_tok_s"].get<double>() / b1["decode_tok_s"].get<double>()},
      {"bookkeeping_256_model", book_model},
      {"bookkeeping_256_fake", book_fake}};
  std::printf("%s\n", out.dump(2).c_str());
  std::printf("\n| figure | kiln | yardstick |\n|---|---|---|\n");
  std::printf(
      "| batch-1 decode | %.1f tok/s | roofline %.1f tok/s (%.1f GB/s copy, %.0f MB stored "
      "weights) |\n",
      b1["decode_tok_s"].get<double>(), roofline_tok_s, bandwidth / 1e9, weight_bytes / 1e6);
  std::printf("| 16 concurrent, decode | %.1f tok/s | %.2fx batch-1 |\n",
              b16["decode_tok_s"].get<double>(), out["batch16_over_batch1"].get<double>());
  std::printf("| bookkeeping / step, 256 running (model) | %.1f us | execute %.0f us |\n",
              book_model["bookkeeping_us_per_step"].get<double>(),
              book_model["execute_us_per_step"].get<double>());
  std::printf("| bookkeeping / step, 256 running (fake) | %.1f us | aim <= 100 us |\n",
              book_fake["bookkeeping_us_per_step"].get<double>());
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) { return kiln::Main(argc, argv); }
