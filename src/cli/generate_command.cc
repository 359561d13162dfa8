// kiln generate: offline batch generation with the engine (kiln::LLM) — prompts from the
// command line or a JSONL file; text or JSONL out.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/units.h"
#include "engine/llm.h"

namespace kiln::cli {
namespace {

using Json = nlohmann::ordered_json;

struct GenerateOptions {
  std::string model;
  std::vector<std::string> prompts;
  std::string input;
  bool chat = false;
  std::string system;
  std::string output = "text";
  bool stats = false;
  // Engine.
  std::string device = "auto";
  int32_t threads = 0;
  std::string kv_cache_memory;  // "" = automatic
  float gpu_memory_utilization = 0.9f;
  int32_t block_size = 16;
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_prefill_chunk_tokens = 0;
  int32_t max_model_len = 0;
  bool no_prefix_caching = false;
  std::string scheduling_policy = "fcfs";
  std::string capacity_policy = "max_utilization";
  std::string chat_template;
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

// A prompt from one JSONL line: {"prompt": "..."} | {"messages": [...]} |
// {"prompt_token_ids": [...]}.
Result<Prompt> PromptFromJsonLine(const std::string& line, const std::string& origin, bool chat,
                                  const std::string& system) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(origin + ": not a JSON object");
  if (j.contains("messages")) {
    if (!j["messages"].is_array()) return InvalidArgument(origin + ": messages must be a list");
    return Prompt::Chat(j["messages"]);
  }
  if (j.contains("prompt_token_ids")) {
    const Json& ids = j["prompt_token_ids"];
    if (!ids.is_array()) return InvalidArgument(origin + ": prompt_token_ids must be a list");
    std::vector<int32_t> out;
    for (const Json& id : ids) {
      if (!id.is_number_integer()) {
        return InvalidArgument(origin + ": prompt_token_ids must hold integers");
      }
      out.push_back(id.get<int32_t>());
    }
    return Prompt::Tokens(std::move(out));
  }
  if (j.contains("prompt") && j["prompt"].is_string()) {
    std::string text = j["prompt"].get<std::string>();
    if (!chat) return Prompt::Text(std::move(text));
    Json messages = Json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    return Prompt::Chat(std::move(messages));
  }
  return InvalidArgument(origin +
                         ": expected a \"prompt\" string, \"messages\" or \"prompt_token_ids\"");
}

std::vector<Prompt> CollectPrompts(const GenerateOptions& o) {
  std::vector<Prompt> prompts;
  for (const std::string& text : o.prompts) {
    if (!o.chat) {
      prompts.push_back(Prompt::Text(text));
      continue;
    }
    Json messages = Json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", text}});
    prompts.push_back(Prompt::Chat(std::move(messages)));
  }
  if (!o.input.empty()) {
    std::ifstream in(o.input);
    if (!in) Fail("generate", NotFound(o.input + ": cannot open"));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto p = PromptFromJsonLine(line, o.input + ":" + std::to_string(n), o.chat, o.system);
      if (!p.ok()) Fail("generate", p.status());
      prompts.push_back(std::move(*p));
    }
  }
  if (prompts.empty()) {
    Fail("generate", InvalidArgument("give prompts with --prompt TEXT or --input FILE.jsonl"));
  }
  return prompts;
}

void Run(GenerateOptions o) {
  std::vector<Prompt> prompts = CollectPrompts(o);

  LlmOptions options;
  options.device = o.device;
  options.num_threads = o.threads;
  options.tokenizer.chat_template_file = o.chat_template;
  EngineOptions& e = options.engine;
  if (!o.kv_cache_memory.empty()) {
    auto kv_bytes = ParseByteSize(o.kv_cache_memory);
    if (!kv_bytes.ok()) Fail("generate", kv_bytes.status());
    e.kv_cache_memory_bytes = *kv_bytes;
  }
  options.gpu_memory_utilization = o.gpu_memory_utilization;
  e.block_size = o.block_size;
  e.max_model_len = o.max_model_len;
  e.enable_prefix_caching = !o.no_prefix_caching;
  e.scheduler.max_num_seqs = o.max_num_seqs;
  e.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  e.scheduler.max_prefill_chunk_tokens = o.max_prefill_chunk_tokens;
  auto sched = ParseSchedulingPolicy(o.scheduling_policy);
  if (!sched.ok()) Fail("generate", sched.status());
  e.scheduler.scheduling_policy = *sched;
  auto capacity = ParseCapacityPolicy(o.capacity_policy);
  if (!capacity.ok()) Fail("generate", capacity.status());
  e.scheduler.capacity_policy = *capacity;

  auto llm = LLM::Create(o.model, options);
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
  cmd->add_option("model,--model", o->model, "HF checkpoint directory or .gguf file")->required();
  cmd->add_option("--prompt", o->prompts, "a prompt (repeatable)");
  cmd->add_option("--input", o->input,
                  "JSONL file: one {\"prompt\": ...} | {\"messages\": [...]} | "
                  "{\"prompt_token_ids\": [...]} per line");
  cmd->add_flag("--chat", o->chat, "wrap text prompts as a user message in the chat template");
  cmd->add_option("--system", o->system, "a system message for --chat");
  cmd->add_option("--chat-template", o->chat_template, "a file that replaces the chat template");
  cmd->add_option("--output", o->output, "text or jsonl")->check(CLI::IsMember({"text", "jsonl"}));
  cmd->add_flag("--stats", o->stats, "print engine statistics to stderr");
  // Engine.
  cmd->add_option("--device", o->device, "cpu or auto");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  cmd->add_option("--kv-cache-memory", o->kv_cache_memory,
                  "KV pool size, e.g. 1GiB (default: 1GiB on CPU; on CUDA what "
                  "--gpu-memory-utilization leaves)");
  cmd->add_option("--gpu-memory-utilization", o->gpu_memory_utilization,
                  "CUDA: share of the device's memory for weights, workspace and KV cache")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--block-size", o->block_size, "tokens per KV block");
  cmd->add_option("--max-num-seqs", o->max_num_seqs, "requests running at once");
  cmd->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "tokens per step");
  cmd->add_option("--max-prefill-chunk-tokens", o->max_prefill_chunk_tokens,
                  "prompt tokens one request computes per step (0 = no cap)");
  cmd->add_option("--max-model-len", o->max_model_len, "longest sequence (0 = model's)");
  cmd->add_flag("--no-prefix-caching", o->no_prefix_caching, "disable prefix caching");
  cmd->add_option("--scheduling-policy", o->scheduling_policy, "fcfs or priority");
  cmd->add_option("--capacity-policy", o->capacity_policy,
                  "max_utilization or guaranteed_no_evict");
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
