#include "engine/llm.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <unordered_map>

#include "backend/cpu/cpu_runner.h"
#include "core/check.h"
#include "core/hash.h"
#include "engine/output_processor.h"

namespace kiln {

Prompt Prompt::Text(std::string text) {
  Prompt p;
  p.text = std::move(text);
  p.kind = Kind::kText;
  return p;
}

Prompt Prompt::Chat(nlohmann::ordered_json messages) {
  Prompt p;
  p.messages = std::move(messages);
  p.kind = Kind::kChat;
  return p;
}

Prompt Prompt::Tokens(std::vector<int32_t> ids) {
  Prompt p;
  p.token_ids = std::move(ids);
  p.kind = Kind::kTokens;
  return p;
}

uint64_t CompletionSeed(uint64_t seed, int32_t index) {
  if (index == 0) return seed;
  // splitmix64 of (seed, index): distinct, well-mixed streams for the siblings.
  return Mix64(seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(index + 1));
}

Result<std::unique_ptr<ModelRunner>> CreateRunner(const Checkpoint& checkpoint,
                                                  const std::string& device, int32_t num_threads) {
  if (device == "cpu" || device == "auto") {
    CpuRunnerOptions options;
    options.num_threads = num_threads;
    return CreateCpuRunner(checkpoint, options);
  }
  if (device == "cuda" || device.starts_with("cuda:")) {
    return Unsupported("device: the CUDA backend is not built yet; use --device cpu");
  }
  return InvalidArgument("device: expected cpu, cuda or auto, got '" + device + "'");
}

Result<std::unique_ptr<LLM>> LLM::Create(const std::string& model, const LlmOptions& options) {
  std::unique_ptr<LLM> llm(new LLM());
  KILN_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(model));
  llm->checkpoint_ = std::make_unique<Checkpoint>(std::move(checkpoint));
  llm->model_name_ = llm->checkpoint_->name();
  KILN_ASSIGN_OR_RETURN(llm->tokenizer_, LoadTokenizer(model, options.tokenizer));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner,
                        CreateRunner(*llm->checkpoint_, options.device, options.num_threads));
  EngineOptions engine_options = options.engine;
  // generation_config.json may list more end tokens than config.json (Llama 3.1: eot, eom).
  const auto& generation = llm->checkpoint_->generation_config();
  if (engine_options.eos_token_ids.empty()) {
    engine_options.eos_token_ids = llm->checkpoint_->config().eos_token_ids;
    if (generation.has_value()) {
      for (int id : generation->eos_token_ids) {
        if (std::find(engine_options.eos_token_ids.begin(), engine_options.eos_token_ids.end(),
                      id) == engine_options.eos_token_ids.end()) {
          engine_options.eos_token_ids.push_back(id);
        }
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(llm->engine_, Engine::Create(std::move(runner), engine_options));
  return llm;
}

LLM::~LLM() = default;

std::unique_ptr<Engine> LLM::TakeEngine() {
  CHECK(engine_ != nullptr) << "TakeEngine twice";
  return std::move(engine_);
}

Result<std::vector<int32_t>> LLM::Tokenize(const Prompt& prompt) const {
  std::vector<int32_t> ids;
  switch (prompt.kind) {
    case Prompt::Kind::kText:
      ids = tokenizer_.tokenizer->Encode(prompt.text, /*add_special=*/true,
                                         /*parse_special=*/true);
      break;
    case Prompt::Kind::kChat: {
      KILN_ASSIGN_OR_RETURN(std::string text,
                            ApplyChatTemplate(tokenizer_, prompt.messages, nullptr,
                                              /*add_generation_prompt=*/true));
      // The template writes bos itself (as HF's apply_chat_template).
      ids = tokenizer_.tokenizer->Encode(text, /*add_special=*/false, /*parse_special=*/true);
      break;
    }
    case Prompt::Kind::kTokens:
      ids = prompt.token_ids;
      break;
  }
  if (ids.empty()) return InvalidArgument("prompt: is empty");
  return ids;
}

Result<std::vector<GenerateResult>> LLM::Generate(const std::vector<Prompt>& prompts,
                                                  const SamplingParams& params) {
  KILN_RETURN_IF_ERROR(params.Validate(model_config().vocab_size));
  std::random_device random;
  struct Pending {
    size_t prompt_index;
    int32_t completion_index;
    RequestTextStream stream;
  };
  std::vector<GenerateResult> results(prompts.size());
  std::vector<EngineRequest> requests;
  std::unordered_map<RequestId, Pending> pending;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto ids = Tokenize(prompts[i]);
    if (!ids.ok()) {
      return Status(ids.status().code(),
                    "prompts[" + std::to_string(i) + "]: " + ids.status().message());
    }
    results[i].prompt_token_ids = *ids;
    results[i].completions.resize(params.n);
    const uint64_t seed =
        params.seed.has_value() ? *params.seed : (uint64_t{random()} << 32 | uint64_t{random()});
    for (int32_t j = 0; j < params.n; ++j) {
      EngineRequest r;
      r.id = next_id_++;
      r.prompt_token_ids = *ids;
      r.params = params;
      r.seed = CompletionSeed(seed, j);
      r.cache_key.cache_salt = params.cache_salt;
      Status valid = engine_->ValidateRequest(r);
      if (!valid.ok()) {
        return Status(valid.code(), "prompts[" + std::to_string(i) + "]: " + valid.message());
      }
      results[i].completions[j].index = j;
      pending.emplace(r.id, Pending{i, j, RequestTextStream(tokenizer_.tokenizer.get(), params)});
      requests.push_back(std::move(r));
    }
  }
  for (EngineRequest& r : requests) KILN_RETURN_IF_ERROR(engine_->AddRequest(std::move(r)));

  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  while (engine_->HasWork()) {
    for (const RequestOutput& out : engine_->Step()) {
      auto it = pending.find(out.id);
      if (it == pending.end()) continue;  // finished here already (stop string)
      Pending& p = it->second;
      GenerateResult& result = results[p.prompt_index];
      CompletionOutput& c = result.completions[p.completion_index];
      TextDelta delta = p.stream.Process(out);
      if (c.token_ids.empty() && !delta.token_ids.empty()) c.first_token_ms = elapsed_ms();
      c.text += delta.text;
      c.token_ids.insert(c.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
      c.logprobs.insert(c.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
      if (p.completion_index == 0) {
        result.num_cached_tokens = out.num_cached_tokens;
        result.prompt_logprobs.insert(result.prompt_logprobs.end(), delta.prompt_logprobs.begin(),
                                      delta.prompt_logprobs.end());
      }
      if (delta.finished) {
        c.finish_reason = delta.finish_reason.value_or(FinishReason::kStop);
        c.stop_string = delta.stop_string;
        c.stop_token_id = delta.stop_token_id;
        c.finish_ms = elapsed_ms();
        if (delta.needs_abort) engine_->Abort(out.id);
        pending.erase(it);
      }
    }
  }
  CHECK(pending.empty()) << pending.size() << " requests never finished";
  return results;
}

}  // namespace kiln
