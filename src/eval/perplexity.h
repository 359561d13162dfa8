// Perplexity of a model on a text, by HF's sliding-window method ("Perplexity of fixed-length
// models"), computed from the engine's prompt logprobs (docs/eval.md gives every definition).
//
// The text is tokenized once, as the model's tokenizer does for a plain prompt (bos at the very
// start when the model adds one; special-token strings in the text are plain text). Windows of
// `window` tokens start every `stride` tokens; each is one prompt, and only the tokens the
// previous window did not score count, so with stride < window every token but the first is
// scored exactly once, each with at least window - stride tokens of context (after the first
// window):
//
//   token      0 1 2 3 4 5 6 7 8 9          N = 10, window 4, stride 2
//   window 0  [b s s s)                     scores 1..3 (token 0 has no context)
//   window 1      [b . s s)                 scores 4..5
//   window 2          [b . s s)             scores 6..7
//   window 3              [b . s s)         scores 8..9: reaches the end, the last window
//
// With stride == window the windows are disjoint chunks and the first token of each has no
// context, so it is not scored (N - num_windows tokens are).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/llm.h"

namespace kiln::eval {

// One window: the model reads tokens [begin, end) as one prompt; the negative logprobs of tokens
// [score_begin, end) count. Invariant: begin < score_begin <= end.
struct Window {
  int32_t begin = 0;
  int32_t end = 0;
  int32_t score_begin = 0;

  int32_t num_tokens() const { return end - begin; }
  int32_t num_scored() const { return end - score_begin; }
};

// The windows for num_tokens tokens: begin_j = j * stride, end_j = min(begin_j + window, N),
// score_begin_j = max(end_{j-1}, begin_j + 1) (end_{-1} = 0); stops after the first window that
// reaches N. A window that would score nothing (a 1-token tail when stride == window) is left out.
// Errors: kInvalidArgument for num_tokens < 2 ("needs at least 2 tokens"), window < 2, or stride
// outside [1, window], naming the value.
Result<std::vector<Window>> PlanWindows(int32_t num_tokens, int32_t window, int32_t stride);

struct PerplexityOptions {
  // Tokens per window; 0 = min(1024, the engine's max_model_len - 1). At most max_model_len - 1:
  // the engine must have room to generate one token after a prompt. Longer windows give each
  // token more context (lower perplexity) and cost quadratically more attention.
  int32_t window = 0;
  // Tokens between window starts; 0 = window / 2 (at least 1). Smaller strides give every scored
  // token more context and cost more windows (about N / stride).
  int32_t stride = 0;
  // Evaluate only the first max_tokens tokens of the text; 0 = all of it.
  int32_t max_tokens = 0;
  // Windows handed to the engine in one LLM::Generate call (it batches them). Only progress
  // granularity depends on it, never the figures.
  int32_t windows_per_call = 64;
  // Called after each Generate call with the windows done so far and in all.
  std::function<void(int32_t done, int32_t total)> progress;
};

struct PerplexityResult {
  int32_t window = 0;  // the resolved window and stride
  int32_t stride = 0;
  bool has_bos = false;      // the tokenization starts with the model's bos token
  int64_t num_tokens = 0;    // tokens of the evaluated text (after max_tokens)
  int64_t num_bytes = 0;     // UTF-8 bytes of the evaluated text (its tokens decoded)
  int32_t num_windows = 0;   // prompts run
  int64_t num_computed = 0;  // tokens the model read: the sum of the window lengths
  int64_t num_scored = 0;    // tokens whose NLL counts
  double total_nll = 0;      // sum of -ln p(token | its window's tokens before it), nats
  double mean_nll = 0;       // total_nll / num_scored
  double perplexity = 0;     // exp(mean_nll)
  double bits_per_byte = 0;  // total_nll / ln(2) / num_bytes
  double seconds = 0;        // wall time of the engine calls
  double scored_tokens_per_second = 0;
  double computed_tokens_per_second = 0;
};

// Tokenizes `text` (see above), keeps its first options.max_tokens tokens, and evaluates them.
// Errors: those of PlanWindows (a text of fewer than 2 tokens), kInvalidArgument for a window
// longer than max_model_len - 1 (naming both), those of LLM::Generate, and kInternal when the
// engine's prompt logprobs do not score the tokens asked for or are NaN.
Result<PerplexityResult> EvaluatePerplexity(LLM& llm, std::string_view text,
                                            const PerplexityOptions& options);

// The same for token ids already made (num_bytes is then 0 and bits_per_byte 0 unless
// `num_bytes` is given).
Result<PerplexityResult> EvaluatePerplexityOfTokens(LLM& llm, std::span<const int32_t> token_ids,
                                                    const PerplexityOptions& options,
                                                    int64_t num_bytes = 0);

}  // namespace kiln::eval
