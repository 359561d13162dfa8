#include "eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

namespace kiln::eval {

Result<std::vector<Window>> PlanWindows(int32_t num_tokens, int32_t window, int32_t stride) {
  if (num_tokens < 2) {
    return InvalidArgument("perplexity needs at least 2 tokens of text, got " +
                           std::to_string(num_tokens));
  }
  if (window < 2)
    return InvalidArgument("window: must be at least 2, got " + std::to_string(window));
  if (stride < 1 || stride > window) {
    return InvalidArgument("stride: must be in [1, window = " + std::to_string(window) + "], got " +
                           std::to_string(stride));
  }
  std::vector<Window> windows;
  int32_t prev_end = 0;
  for (int64_t begin = 0; begin < num_tokens; begin += stride) {
    Window w;
    w.begin = static_cast<int32_t>(begin);
    w.end = static_cast<int32_t>(std::min<int64_t>(begin + window, num_tokens));
    w.score_begin = std::max(prev_end, w.begin + 1);
    if (w.num_scored() > 0) windows.push_back(w);
    prev_end = w.end;
    if (w.end == num_tokens) break;
  }
  return windows;
}

Result<PerplexityResult> EvaluatePerplexity(LLM& llm, std::string_view text,
                                            const PerplexityOptions& options) {
  if (options.max_tokens < 0) {
    return InvalidArgument("max_tokens: must be >= 0 (0 = the whole text), got " +
                           std::to_string(options.max_tokens));
  }
  const Tokenizer& tokenizer = *llm.tokenizer().tokenizer;
  // NOTE: parse_special off: the file is data, so "<|im_end|>" written in it is text, not a
  // control token; add_special on, so the first window starts as any prompt of this model does.
  std::vector<int32_t> ids = tokenizer.Encode(text, /*add_special=*/true, /*parse_special=*/false);
  if (options.max_tokens > 0 && static_cast<int64_t>(ids.size()) > options.max_tokens) {
    ids.resize(options.max_tokens);
  }
  const int64_t num_bytes =
      static_cast<int64_t>(tokenizer.Decode(ids, /*skip_special=*/true).size());
  return EvaluatePerplexityOfTokens(llm, ids, options, num_bytes);
}

Result<PerplexityResult> EvaluatePerplexityOfTokens(LLM& llm, std::span<const int32_t> token_ids,
                                                    const PerplexityOptions& options,
                                                    int64_t num_bytes) {
  if (token_ids.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument("the text has more than 2^31 tokens; use --max-tokens");
  }
  const int32_t num_tokens = static_cast<int32_t>(token_ids.size());
  if (options.window < 0) {
    return InvalidArgument("window: must be >= 2 (0 = automatic), got " +
                           std::to_string(options.window));
  }
  if (options.stride < 0) {
    return InvalidArgument("stride: must be >= 1 (0 = window / 2), got " +
                           std::to_string(options.stride));
  }
  const int32_t max_prompt = llm.engine().max_model_len() - 1;
  const int32_t window = options.window > 0 ? options.window : std::min(1024, max_prompt);
  if (window > max_prompt) {
    return InvalidArgument(
        "window: " + std::to_string(window) + " tokens do not fit the engine's max_model_len " +
        std::to_string(max_prompt + 1) +
        " (a prompt leaves room for one generated token, so at most " + std::to_string(max_prompt) +
        "); lower the window or raise max_model_len");
  }
  const int32_t stride = options.stride > 0 ? options.stride : std::max(1, window / 2);
  KILN_ASSIGN_OR_RETURN(const std::vector<Window> windows, PlanWindows(num_tokens, window, stride));

  PerplexityResult r;
  r.window = window;
  r.stride = stride;
  r.has_bos = token_ids[0] == llm.tokenizer().tokenizer->bos_id() &&
              llm.tokenizer().tokenizer->bos_id() >= 0;
  r.num_tokens = num_tokens;
  r.num_bytes = num_bytes;
  r.num_windows = static_cast<int32_t>(windows.size());

  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 1;  // the engine must generate something; the one token is ignored
  params.ignore_eos = true;
  params.seed = 0;
  params.prompt_logprobs = 0;  // the logprob of each actual next token, no alternatives

  const int32_t per_call = std::max(1, options.windows_per_call);
  const auto start = std::chrono::steady_clock::now();
  for (size_t first = 0; first < windows.size(); first += per_call) {
    const size_t last = std::min(windows.size(), first + per_call);
    std::vector<Prompt> prompts;
    for (size_t i = first; i < last; ++i) {
      const Window& w = windows[i];
      prompts.push_back(Prompt::Tokens(
          std::vector<int32_t>(token_ids.begin() + w.begin, token_ids.begin() + w.end)));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<GenerateResult> results, llm.Generate(prompts, params));
    for (size_t i = first; i < last; ++i) {
      const Window& w = windows[i];
      const std::vector<ScoredToken>& scored = results[i - first].prompt_logprobs;
      // prompt_logprobs[k] scores prompt token k + 1, i.e. text token begin + k + 1.
      if (static_cast<int32_t>(scored.size()) != w.num_tokens() - 1) {
        return Internal("window " + std::to_string(i) + ": the engine returned " +
                        std::to_string(scored.size()) + " prompt logprobs for " +
                        std::to_string(w.num_tokens()) + " tokens");
      }
      for (int32_t t = w.score_begin; t < w.end; ++t) {
        const ScoredToken& s = scored[t - w.begin - 1];
        if (s.token_id != token_ids[t] || std::isnan(s.logprob)) {
          return Internal("window " + std::to_string(i) + ", token " + std::to_string(t) +
                          ": the engine scored token " + std::to_string(s.token_id) +
                          " with logprob " + std::to_string(s.logprob) + ", expected token " +
                          std::to_string(token_ids[t]));
        }
        r.total_nll -= static_cast<double>(s.logprob);
      }
      r.num_scored += w.num_scored();
      r.num_computed += w.num_tokens();
    }
    if (options.progress) {
      options.progress(static_cast<int32_t>(last), static_cast<int32_t>(windows.size()));
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.mean_nll = r.total_nll / static_cast<double>(r.num_scored);
  r.perplexity = std::exp(r.mean_nll);
  r.bits_per_byte =
      num_bytes > 0 ? r.total_nll / std::log(2.0) / static_cast<double>(num_bytes) : 0;
  if (r.seconds > 0) {
    r.scored_tokens_per_second = static_cast<double>(r.num_scored) / r.seconds;
    r.computed_tokens_per_second = static_cast<double>(r.num_computed) / r.seconds;
  }
  return r;
}

}  // namespace kiln::eval
