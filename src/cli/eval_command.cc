// kiln eval perplexity | compare: the accuracy tools (docs/eval.md). `perplexity` scores a text
// with the sliding-window method; `compare` checks that two models or engines generate the same
// greedy tokens and near-identical distributions. src/eval/ holds the logic; this file is flags
// and output.
//
// Exit status of `compare`: 0 pass, 1 fail (a threshold not met), 2 error (bad input, a model
// that does not load), like diff(1); CLI11's usage errors keep their own codes (>= 100).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/json_report.h"
#include "cli/prompt_file.h"
#include "eval/compare.h"
#include "eval/perplexity.h"
#include "model/quantization.h"

namespace kiln::cli {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kCompareFailed = 1;
constexpr int kCompareError = 2;

Json DistributionJson(const eval::Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"min", d.min}, {"p10", d.p10},
          {"p50", d.p50},     {"p90", d.p90},   {"p99", d.p99}, {"max", d.max}};
}

// ---- kiln eval perplexity ---------------------------------------------------------------------

struct PerplexityCommandOptions {
  EngineFlags engine;
  std::string text_file;
  eval::PerplexityOptions run;
  std::string json;
};

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return IoError(path + ": read failed");
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    return InvalidArgument(path + ": is empty (perplexity needs text)");
  }
  return text;
}

void RunPerplexity(PerplexityCommandOptions& o) {
  const std::string cmd = "eval perplexity";
  // Flags first, so that a typo costs no model load.
  if (o.run.window < 0 || o.run.window == 1) {
    Fail(cmd, InvalidArgument("--window: must be >= 2 (0 = automatic), got " +
                              std::to_string(o.run.window)));
  }
  if (o.run.stride < 0 || (o.run.window > 0 && o.run.stride > o.run.window)) {
    Fail(cmd, InvalidArgument("--stride: must be in [1, --window] (0 = window / 2), got " +
                              std::to_string(o.run.stride)));
  }
  if (o.run.max_tokens < 0) {
    Fail(cmd, InvalidArgument("--max-tokens: must be >= 0 (0 = the whole text), got " +
                              std::to_string(o.run.max_tokens)));
  }
  auto text = ReadTextFile(o.text_file);
  if (!text.ok()) Fail(cmd, text.status().WithContext("--text"));
  auto options = ToLlmOptions(o.engine);
  if (!options.ok()) Fail(cmd, options.status());
  auto llm = LLM::Create(o.engine.model, *options);
  if (!llm.ok()) Fail(cmd, llm.status());

  o.run.progress = [](int32_t done, int32_t total) {
    std::fprintf(stderr, "kiln eval perplexity: %d/%d windows\n", done, total);
  };
  auto r = eval::EvaluatePerplexity(**llm, *text, o.run);
  if (!r.ok()) Fail(cmd, r.status());

  std::printf("============ kiln eval perplexity ============\n");
  std::printf("%-18s %s\n", "model", o.engine.model.c_str());
  std::printf("%-18s %s (%s bytes evaluated, %s tokens%s)\n", "text", o.text_file.c_str(),
              FormatCount(r->num_bytes).c_str(), FormatCount(r->num_tokens).c_str(),
              r->has_bos ? ", bos first" : "");
  std::printf("%-18s %d / %d (%d windows, %s tokens computed)\n", "window / stride", r->window,
              r->stride, r->num_windows, FormatCount(r->num_computed).c_str());
  std::printf("%-18s %s\n", "tokens scored", FormatCount(r->num_scored).c_str());
  std::printf("%-18s %.4f nats\n", "total NLL", r->total_nll);
  std::printf("%-18s %.6f nats/token\n", "mean NLL", r->mean_nll);
  std::printf("%-18s %.4f\n", "perplexity", r->perplexity);
  std::printf("%-18s %.6f\n", "bits per byte", r->bits_per_byte);
  std::printf("%-18s %.2f s (%.1f scored tok/s, %.1f computed tok/s)\n", "time", r->seconds,
              r->scored_tokens_per_second, r->computed_tokens_per_second);
  std::fflush(stdout);

  if (!o.json.empty()) {
    Json report = ReportHeader("kiln eval perplexity");
    report["config"] = {
        {"model", o.engine.model}, {"device", ResolveDevice(options->device)},
        {"dtype", options->dtype}, {"max_model_len", (*llm)->engine().max_model_len()},
        {"text", o.text_file},     {"window", r->window},
        {"stride", r->stride},     {"max_tokens", o.run.max_tokens}};
    report["result"] = {{"perplexity", r->perplexity},
                        {"mean_nll", r->mean_nll},
                        {"total_nll", r->total_nll},
                        {"bits_per_byte", r->bits_per_byte},
                        {"num_tokens", r->num_tokens},
                        {"num_bytes", r->num_bytes},
                        {"has_bos", r->has_bos},
                        {"num_windows", r->num_windows},
                        {"num_computed", r->num_computed},
                        {"num_scored", r->num_scored},
                        {"seconds", r->seconds},
                        {"scored_tokens_per_second", r->scored_tokens_per_second},
                        {"computed_tokens_per_second", r->computed_tokens_per_second}};
    WriteJson(cmd, o.json, report);
  }
}

void AddPerplexity(CLI::App* eval) {
  auto o = std::make_shared<PerplexityCommandOptions>();
  CLI::App* cmd = eval->add_subcommand(
      "perplexity", "Perplexity of a model on a text file (sliding window over prompt logprobs)");
  AddEngineFlags(cmd, &o->engine);
  cmd->add_option("--text", o->text_file, "the text file (UTF-8) to score")->required();
  cmd->add_option("--window", o->run.window,
                  "tokens per window (default: min(1024, max model len - 1))");
  cmd->add_option("--stride", o->run.stride,
                  "tokens between window starts (default: window / 2); = window for disjoint "
                  "chunks");
  cmd->add_option("--max-tokens", o->run.max_tokens,
                  "evaluate only the first N tokens of the text (default 0 = all)");
  cmd->add_option("--json", o->json, "write the figures as JSON here");
  cmd->callback([o] { RunPerplexity(*o); });
}

// ---- kiln eval compare ------------------------------------------------------------------------

// The engine settings one side may change from the shared engine flags ("" = keep the shared
// value).
struct SideFlags {
  std::string device;
  std::string dtype;
  std::string quantization;
  std::string kv_cache_dtype;
};

// The LlmOptions of one side: the shared engine flags, then the side's own settings.
Result<LlmOptions> SideLlmOptions(const EngineFlags& shared, const SideFlags& side,
                                  const std::string& prefix) {
  KILN_ASSIGN_OR_RETURN(LlmOptions o, ToLlmOptions(shared));
  if (!side.device.empty()) o.device = side.device;
  if (!side.dtype.empty()) o.dtype = side.dtype;
  if (!side.quantization.empty()) {
    const Status st = ParseQuantMethod(side.quantization).status();
    if (!st.ok()) return InvalidArgument(prefix + st.message());
    o.quantization = side.quantization;
  }
  if (!side.kv_cache_dtype.empty()) {
    const Status st = ParseKvCacheDType(side.kv_cache_dtype).status();
    if (!st.ok()) return InvalidArgument(prefix + st.message());
    o.kv_cache_dtype = side.kv_cache_dtype;
  }
  return o;
}

struct CompareCommandOptions {
  EngineFlags engine;  // every flag but the model, for both sides
  std::string model_a;
  std::string model_b;
  SideFlags side_a;
  SideFlags side_b;
  std::string prompts_file;
  std::string prompts_format = "auto";
  bool chat = false;
  std::string system;
  eval::CompareOptions run;
  std::optional<double> max_mean_kl;
  std::string json;
};

Json SideJson(const std::string& model, const LlmOptions& o, const eval::SideRun& run) {
  return {{"model", model},
          {"device", ResolveDevice(o.device)},
          {"dtype", o.dtype},
          {"generated_tokens", run.num_generated_tokens},
          {"generate_seconds", run.generate_seconds},
          {"score_seconds", run.score_seconds}};
}

void PrintCompareSummary(const CompareCommandOptions& o, const eval::ComparisonRun& run) {
  const eval::CompareReport& r = run.report;
  auto verdict = [](bool ok) { return ok ? "pass" : "FAIL"; };
  std::printf("============ kiln eval compare ============\n");
  std::printf("%-26s %s\n", "A (reference)", o.model_a.c_str());
  std::printf("%-26s %s\n", "B", o.model_b.c_str());
  std::printf("%-26s %d (greedy, up to %d tokens%s)\n", "prompts", r.num_prompts, o.run.max_tokens,
              o.run.ignore_eos ? ", eos ignored" : "");
  std::printf("%-26s %s / %s\n", "tokens generated A / B",
              FormatCount(run.a.num_generated_tokens).c_str(),
              FormatCount(run.b.num_generated_tokens).c_str());
  std::printf("%-26s %d/%d = %.4f   (min %.4f: %s)\n", "exact match", r.num_exact_match,
              r.num_prompts, r.exact_match_rate, o.run.min_exact_match,
              verdict(r.exact_match_passed));
  const eval::Distribution& d = r.first_divergence;
  if (d.count > 0) {
    std::printf(
        "%-26s %lld prompts: mean %.1f, min %.0f, p10 %.1f, p50 %.1f, p90 %.1f, "
        "max %.0f\n",
        "first divergence (token)", static_cast<long long>(d.count), d.mean, d.min, d.p10, d.p50,
        d.p90, d.max);
    std::printf("%-26s", "  histogram");
    for (const eval::HistogramBucket& b : r.divergence_histogram) {
      if (b.hi - b.lo == 1) {
        std::printf(" [%d]:%lld", b.lo, static_cast<long long>(b.count));
      } else {
        std::printf(" [%d,%d):%lld", b.lo, b.hi, static_cast<long long>(b.count));
      }
    }
    std::printf("\n");
  } else {
    std::printf("%-26s none\n", "first divergence (token)");
  }
  std::printf("%-26s mean %.6f, p50 %.6f, p90 %.6f, p99 %.6f, max %.6f nats (%s positions)",
              "KL(A||B) top-k", r.kl.mean, r.kl.p50, r.kl.p90, r.kl.p99, r.kl.max,
              FormatCount(r.num_positions).c_str());
  if (o.run.max_mean_kl.has_value()) {
    std::printf("   (max mean %.6f: %s)", *o.run.max_mean_kl, verdict(r.kl_passed));
  }
  std::printf("\n");
  std::printf("%-26s k = %d; %.2f %% of positions exact (A's top-k all in B's top-%d)\n",
              "  KL support", o.run.kl_top_k, 100.0 * r.kl_exact_fraction,
              eval::kCompareTopLogprobs);
  std::printf("%-26s %.2f %% (B's argmax on A's prefixes = A's token)\n", "top-1 agreement",
              100.0 * r.top1_agreement);
  std::printf("%-26s %.2f %% (A's scored argmax = its greedy token)\n", "A self-consistency",
              100.0 * r.top1_self_agreement);
  std::printf("%-26s A %.2f + %.2f s, B %.2f + %.2f s (generate + score)\n", "time",
              run.a.generate_seconds, run.a.score_seconds, run.b.generate_seconds,
              run.b.score_seconds);
  std::printf("RESULT: %s\n", r.passed ? "PASS" : "FAIL");
  std::fflush(stdout);
}

Json CompareJson(const CompareCommandOptions& o, const LlmOptions& a_options,
                 const LlmOptions& b_options, const eval::ComparisonRun& run) {
  const eval::CompareReport& r = run.report;
  Json report = ReportHeader("kiln eval compare");
  report["config"] = {
      {"prompts", o.prompts_file},
      {"num_prompts", r.num_prompts},
      {"max_tokens", o.run.max_tokens},
      {"ignore_eos", o.run.ignore_eos},
      {"kl_top_k", o.run.kl_top_k},
      {"min_exact_match", o.run.min_exact_match},
      {"max_mean_kl", o.run.max_mean_kl.has_value() ? Json(*o.run.max_mean_kl) : Json(nullptr)}};
  report["a"] = SideJson(o.model_a, a_options, run.a);
  report["b"] = SideJson(o.model_b, b_options, run.b);
  Json histogram = Json::array();
  for (const eval::HistogramBucket& b : r.divergence_histogram) {
    histogram.push_back({{"lo", b.lo}, {"hi", b.hi}, {"count", b.count}});
  }
  report["result"] = {{"passed", r.passed},
                      {"exact_match_passed", r.exact_match_passed},
                      {"kl_passed", r.kl_passed},
                      {"num_exact_match", r.num_exact_match},
                      {"exact_match_rate", r.exact_match_rate},
                      {"first_divergence", DistributionJson(r.first_divergence)},
                      {"divergence_histogram", histogram},
                      {"num_positions", r.num_positions},
                      {"kl", DistributionJson(r.kl)},
                      {"kl_exact_fraction", r.kl_exact_fraction},
                      {"top1_agreement", r.top1_agreement},
                      {"top1_self_agreement", r.top1_self_agreement}};
  Json per_prompt = Json::array();
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const eval::PromptComparison& p = r.prompts[i];
    const eval::SideOutput& a = run.a.outputs[i];
    const eval::SideOutput& b = run.b.outputs[i];
    per_prompt.push_back(
        {{"index", i},
         {"exact_match", p.exact_match},
         {"first_divergence", p.first_divergence},
         {"mean_kl", p.mean_kl},
         {"max_kl", p.max_kl},
         {"top1_agreement",
          p.num_positions > 0 ? static_cast<double>(p.num_top1_agree) / p.num_positions : 0.0},
         {"a_text", a.text},
         {"b_text", b.text},
         {"a_token_ids", a.token_ids},
         {"b_token_ids", b.token_ids},
         {"a_finish_reason", std::string(FinishReasonName(a.finish_reason))},
         {"b_finish_reason", std::string(FinishReasonName(b.finish_reason))}});
  }
  report["prompts"] = per_prompt;
  return report;
}

void RunCompare(CompareCommandOptions& o) {
  const std::string cmd = "eval compare";
  auto fail = [&](const Status& s) { Fail(cmd, s, kCompareError); };
  o.run.max_mean_kl = o.max_mean_kl;
  Status valid = eval::ValidateCompareOptions(o.run);
  if (!valid.ok()) fail(valid);
  auto format = ParsePromptFileFormat(o.prompts_format);
  if (!format.ok()) fail(format.status().WithContext("--prompts-format"));
  auto prompts = ReadPromptFile(o.prompts_file, {*format, o.chat, o.system});
  if (!prompts.ok()) fail(prompts.status().WithContext("--prompts"));
  if (prompts->empty()) fail(InvalidArgument("--prompts: " + o.prompts_file + " holds no prompts"));
  auto a_options = SideLlmOptions(o.engine, o.side_a, "--a-");
  if (!a_options.ok()) fail(a_options.status());
  auto b_options = SideLlmOptions(o.engine, o.side_b, "--b-");
  if (!b_options.ok()) fail(b_options.status());

  auto make_a = [&] { return LLM::Create(o.model_a, *a_options); };
  auto make_b = [&] { return LLM::Create(o.model_b, *b_options); };
  auto log = [&](const std::string& line) {
    std::fprintf(stderr, "kiln eval compare: %s\n", line.c_str());
  };
  auto run = eval::RunComparison(make_a, make_b, *prompts, o.run, log);
  if (!run.ok()) fail(run.status());
  PrintCompareSummary(o, *run);
  if (!o.json.empty()) {
    WriteJson(cmd, o.json, CompareJson(o, *a_options, *b_options, *run));
  }
  if (!run->report.passed) throw CLI::RuntimeError(kCompareFailed);
}

void AddSideFlags(CLI::App* cmd, const std::string& side, SideFlags* f) {
  const std::string who = side == "a" ? "A" : "B";
  cmd->add_option("--" + side + "-device", f->device, who + " only: --device");
  cmd->add_option("--" + side + "-dtype", f->dtype, who + " only: --dtype");
  cmd->add_option("--" + side + "-quantization", f->quantization,
                  who + " only: the quantization method");
  cmd->add_option("--" + side + "-kv-cache-dtype", f->kv_cache_dtype,
                  who + " only: the KV cache dtype");
}

void AddCompare(CLI::App* eval) {
  auto o = std::make_shared<CompareCommandOptions>();
  CLI::App* cmd = eval->add_subcommand(
      "compare",
      "Output equivalence of two models or engines: greedy exact match, first divergence, "
      "KL over top-k (exit 0 pass, 1 fail, 2 error)");
  AddEngineFlags(cmd, &o->engine);
  // The shared flags apply to both sides; the models are the two positionals instead.
  cmd->remove_option(cmd->get_option("--model"));
  cmd->add_option("a", o->model_a, "model A, the reference (HF directory or .gguf)")->required();
  cmd->add_option("b", o->model_b, "model B, compared against A")->required();
  AddSideFlags(cmd, "a", &o->side_a);
  AddSideFlags(cmd, "b", &o->side_b);
  cmd->add_option("--prompts", o->prompts_file,
                  "prompts: text (one per line) or JSONL ({\"prompt\": ...} | "
                  "{\"messages\": [...]} | {\"prompt_token_ids\": [...]})")
      ->required();
  cmd->add_option("--prompts-format", o->prompts_format,
                  "auto (JSONL for .jsonl/.json names, else text), text or jsonl");
  cmd->add_flag("--chat", o->chat, "wrap text prompts as a user message in A's chat template");
  cmd->add_option("--system", o->system, "a system message for --chat");
  cmd->add_option("--max-tokens", o->run.max_tokens, "greedy tokens per prompt (default 64)");
  cmd->add_flag("--ignore-eos", o->run.ignore_eos, "generate past eos (always --max-tokens)");
  cmd->add_option("--kl-top-k", o->run.kl_top_k,
                  "A's top-k tokens the KL is taken over, 1..20 (default 10)");
  cmd->add_option("--min-exact-match", o->run.min_exact_match,
                  "pass needs at least this share of prompts with identical tokens (default 0.9)");
  cmd->add_option("--max-mean-kl", o->max_mean_kl,
                  "pass needs the mean KL(A||B) (nats) at most this (default: not checked)");
  cmd->add_option("--json", o->json, "write the figures and every prompt's outputs as JSON here");
  cmd->callback([o] { RunCompare(*o); });
}

}  // namespace

void AddEvalCommand(CLI::App& app) {
  CLI::App* eval = app.add_subcommand(
      "eval", "Accuracy: perplexity on a text, output equivalence of two models or engines");
  eval->require_subcommand(1);
  AddPerplexity(eval);
  AddCompare(eval);
}

}  // namespace kiln::cli
