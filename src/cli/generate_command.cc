// kiln generate: offline batch generation with the engine (kiln::LLM) — prompts from the
// command line or a JSONL file; text or JSONL out.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/prompt_file.h"
#include "engine/llm.h"

namespace kiln::cli {
namespace {

using Json = nlohmann::ordered_json;

struct GenerateOptions {
  EngineFlags engine;
  std::vector<std::string> prompts;
  std::string input;
  bool chat = false;
  std::string system;
  std::string output = "text";
  bool stats = false;
  // Sampling.
  SamplingParams params;
  std::optional<float> temperature;
  int64_t seed = -1;
  int32_t logprobs = -1;
  int32_t prompt_logprobs = -1;
};

Json ScoredJson(const ScoredToken& t) {
  Json top = Json::array();
  for (const TokenLogprob& a : t.top_logprobs) top.push_back({a.token_id, a.logprob});
  return {{"token_id", t.token_id}, {"logprob", t.logprob}, {"rank", t.rank}, {"top", top}};
}

std::vector<Prompt> CollectPrompts(const GenerateOptions& o) {
  const PromptFileOptions file_options{PromptFileFormat::kJsonl, o.chat, o.system};
  std::vector<Prompt> prompts;
  for (const std::string& text : o.prompts) prompts.push_back(TextPrompt(text, file_options));
  if (!o.input.empty()) {
    auto from_file = ReadPromptFile(o.input, file_options);
    if (!from_file.ok()) Fail("generate", from_file.status());
    for (Prompt& p : *from_file) prompts.push_back(std::move(p));
  }
  if (prompts.empty()) {
    Fail("generate", InvalidArgument("give prompts with --prompt TEXT or --input FILE.jsonl"));
  }
  return prompts;
}

void Run(GenerateOptions o) {
  std::vector<Prompt> prompts = CollectPrompts(o);

  auto options = ToLlmOptions(o.engine);
  if (!options.ok()) Fail("generate", options.status());
  auto llm = LLM::Create(o.engine.model, *options);
  if (!llm.ok()) Fail("generate", llm.status());

  SamplingParams params = o.params;
  // NOTE: greedy without --temperature, so a plain `kiln generate` is reproducible.
  params.temperature = o.temperature.value_or(0.0f);
  if (o.seed >= 0) params.seed = static_cast<uint64_t>(o.seed);
  if (o.logprobs >= 0) params.logprobs = o.logprobs;
  if (o.prompt_logprobs >= 0) params.prompt_logprobs = o.prompt_logprobs;

  auto results = (*llm)->Generate(prompts, params);
  if (!results.ok()) Fail("generate", results.status());

  for (size_t i = 0; i < results->size(); ++i) {
    const GenerateResult& r = (*results)[i];
    if (o.output == "jsonl") {
      Json completions = Json::array();
      for (const CompletionOutput& c : r.completions) {
        Json logprobs = Json::array();
        for (const ScoredToken& t : c.logprobs) logprobs.push_back(ScoredJson(t));
        Json jc = {{"index", c.index},
                   {"text", c.text},
                   {"token_ids", c.token_ids},
                   {"finish_reason", std::string(FinishReasonName(c.finish_reason))},
                   {"stop_reason", nullptr},
                   {"first_token_ms", c.first_token_ms},
                   {"finish_ms", c.finish_ms}};
        if (c.stop_string.has_value()) {
          jc["stop_reason"] = *c.stop_string;
        } else if (c.stop_token_id >= 0) {
          jc["stop_reason"] = c.stop_token_id;
        }
        if (params.logprobs.has_value()) jc["logprobs"] = logprobs;
        completions.push_back(jc);
      }
      Json line = {{"index", i},
                   {"prompt_token_ids", r.prompt_token_ids},
                   {"num_cached_tokens", r.num_cached_tokens},
                   {"completions", completions}};
      if (params.prompt_logprobs.has_value()) {
        Json plp = Json::array();
        plp.push_back(nullptr);  // the first prompt token has no logprob
        for (const ScoredToken& t : r.prompt_logprobs) plp.push_back(ScoredJson(t));
        line["prompt_logprobs"] = plp;
      }
      std::printf("%s\n", line.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    } else {
      for (const CompletionOutput& c : r.completions) {
        if (results->size() > 1 || r.completions.size() > 1) {
          std::printf("--- prompt %zu, completion %d (%s) ---\n", i, c.index,
                      std::string(FinishReasonName(c.finish_reason)).c_str());
        }
        std::printf("%s\n", c.text.c_str());
      }
    }
  }
  std::fflush(stdout);

  const EngineStats& s = (*llm)->engine().stats();
  if (o.stats) {
    std::fprintf(stderr,
                 "kiln generate: %lld steps, %lld prompt + %lld generated tokens, %lld "
                 "preemptions; execute %.1f ms, bookkeeping %.1f us/step; prefix cache %lld/%lld "
                 "tokens\n",
                 static_cast<long long>(s.num_steps), static_cast<long long>(s.num_prompt_tokens),
                 static_cast<long long>(s.num_generated_tokens),
                 static_cast<long long>(s.num_preemptions), s.total_execute_us / 1e3,
                 s.num_steps ? s.total_bookkeeping_us / s.num_steps : 0.0,
                 static_cast<long long>(s.kv.num_hit_tokens),
                 static_cast<long long>(s.kv.num_lookup_tokens));
  }
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text for prompts (offline, batched)");
  AddEngineFlags(cmd, &o->engine);
  cmd->add_option("--prompt", o->prompts, "a prompt (repeatable)");
  cmd->add_option("--input", o->input,
                  "JSONL file: one {\"prompt\": ...} | {\"messages\": [...]} | "
                  "{\"prompt_token_ids\": [...]} per line");
  cmd->add_flag("--chat", o->chat, "wrap text prompts as a user message in the chat template");
  cmd->add_option("--system", o->system, "a system message for --chat");
  cmd->add_option("--output", o->output, "text or jsonl")->check(CLI::IsMember({"text", "jsonl"}));
  cmd->add_flag("--stats", o->stats, "print engine statistics to stderr");
  // Sampling.
  SamplingParams& p = o->params;
  p.max_tokens = 256;
  cmd->add_option("--max-tokens", p.max_tokens, "tokens to generate at most (default 256)");
  cmd->add_option("--min-tokens", p.min_tokens, "tokens before eos/stop ids may end it");
  cmd->add_option("--temperature", o->temperature, "0 = greedy (the default)");
  cmd->add_option("--top-p", p.top_p, "nucleus sampling mass");
  cmd->add_option("--top-k", p.top_k, "sample among the k best (0 = all)");
  cmd->add_option("--min-p", p.min_p, "drop tokens below min_p * p_max");
  cmd->add_option("--presence-penalty", p.presence_penalty, "OpenAI presence penalty");
  cmd->add_option("--frequency-penalty", p.frequency_penalty, "OpenAI frequency penalty");
  cmd->add_option("--repetition-penalty", p.repetition_penalty, "HF repetition penalty");
  cmd->add_option("--seed", o->seed, "random seed (default: random)");
  cmd->add_option("-n,--n", p.n, "completions per prompt");
  cmd->add_option("--stop", p.stop, "stop string (repeatable)");
  cmd->add_option("--stop-token-id", p.stop_token_ids, "stop token id (repeatable)");
  cmd->add_flag("--ignore-eos", p.ignore_eos, "keep generating past eos");
  cmd->add_option("--logprobs", o->logprobs, "top-N logprobs per generated token (jsonl)");
  cmd->add_option("--prompt-logprobs", o->prompt_logprobs, "top-N logprobs per prompt token");
  cmd->callback([o] { Run(*o); });
}

}  // namespace kiln::cli
