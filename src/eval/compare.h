// Output equivalence of two models or engines (A, the reference, and B) on the same prompts, in
// the spirit of TensorRT-LLM's equivalence suites: do they generate the same greedy tokens, where
// do they part, and how far apart are their next-token distributions? docs/eval.md defines every
// figure.
//
//   A: tokenize the prompts; generate greedily; score prompt + A's output ("teacher forcing")
//   B: generate greedily from A's prompt ids; score the same sequences prompt + A's output
//   metrics: exact match of the token sequences, first divergence, KL(A || B) over A's top-k
//
// Both sides score the very same token sequences, so their distributions are over the same
// prefixes whatever B generated; A is released before B is loaded (two 8B models need not fit
// one GPU together).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/llm.h"

namespace kiln::eval {

// Alternatives each side returns per position (the engine's most).
inline constexpr int32_t kCompareTopLogprobs = SamplingParams::kMaxLogprobs;

struct CompareOptions {
  // Greedy tokens generated per prompt and side. More tokens find later divergences and cost
  // proportionally more decode steps.
  int32_t max_tokens = 64;
  // Keep generating past eos, so that every output has max_tokens tokens.
  bool ignore_eos = false;
  // The KL support: A's kl_top_k most likely tokens plus "the rest" (TopKKl). In
  // [1, kCompareTopLogprobs]; B's list is always kCompareTopLogprobs long, so a smaller k makes it
  // likelier that B's list holds all of A's tokens (an exact term).
  int32_t kl_top_k = 10;
  // Pass when exact_match_rate >= min_exact_match ...
  double min_exact_match = 0.9;
  // ... and, when set, mean KL <= max_mean_kl (nats).
  std::optional<double> max_mean_kl;
};

// kInvalidArgument naming the field for max_tokens < 1, kl_top_k outside [1, 20],
// min_exact_match outside [0, 1], a negative or NaN max_mean_kl.
Status ValidateCompareOptions(const CompareOptions& options);

// One prompt's output from one side.
struct SideOutput {
  std::vector<int32_t> token_ids;  // greedy, including the eos token that ended it
  std::string text;
  FinishReason finish_reason = FinishReason::kLength;
  // [length of A's output] this side's top-kCompareTopLogprobs logprobs (most likely first) at
  // each position of A's sequence: dists[t] is its distribution of the token that follows the
  // prompt and A's tokens [0, t).
  std::vector<std::vector<TokenLogprob>> dists;
};

struct SideRun {
  std::vector<SideOutput> outputs;  // one per prompt
  int32_t vocab_size = 0;
  int64_t num_generated_tokens = 0;
  double generate_seconds = 0;  // wall time of the greedy generation
  double score_seconds = 0;     // wall time of scoring the reference sequences
};

// The prompts as token ids, with `llm`'s tokenizer and chat template. Errors: "prompts[i]: ..."
// from LLM::Tokenize.
Result<std::vector<std::vector<int32_t>>> TokenizePrompts(const LLM& llm,
                                                          const std::vector<Prompt>& prompts);

// Generates greedily for every prompt, then scores each sequence prompt_ids[i] + reference[i]
// (this side's own outputs when `reference` is null) and fills SideOutput::dists.
// REQUIRES: reference, when given, has one output per prompt. Errors: those of
// LLM::Generate (a prompt too long for max_model_len, a token outside the vocabulary), and
// kInternal for an empty reference output or logprobs that do not score the tokens asked for.
Result<SideRun> RunSide(LLM& llm, const std::vector<std::vector<int32_t>>& prompt_ids,
                        const std::vector<std::vector<int32_t>>* reference,
                        const CompareOptions& options);

// KL(A || B) at one position, over A's top k tokens S plus the bucket "every other token":
//
//   p(x) = exp(a_x) for x in S,        p(rest) = 1 - sum_S p(x)
//   q(x) = exp(b_x) when x is in B's list; otherwise (x is less likely for B than all of B's
//          list) min(q_last, q_unlisted / m): an equal share of the mass B's list leaves over,
//          capped at B's least listed probability (m = tokens of S missing from B's list)
//   q(rest) = 1 - sum_S q(x)
//   KL = sum_{x in S + rest} p(x) ln(p(x) / q(x)), q floored at 1e-10, clamped at >= 0
//
// `exact` is true when every token of S is in B's list: KL is then exactly the KL divergence of
// the two distributions coarse-grained onto S + rest, a lower bound of the full-vocabulary
// KL(A || B) (data-processing inequality). Identical lists give exactly 0.
// `a` and `b`: top logprobs, most likely first; only the first k of `a` are used.
struct KlTerm {
  double kl = 0;
  bool exact = true;
};
KlTerm TopKKl(std::span<const TokenLogprob> a, std::span<const TokenLogprob> b, int32_t k);

// Summary of a sample; percentiles interpolate linearly between the two nearest ranks (numpy's
// default). All zero for an empty sample.
struct Distribution {
  int64_t count = 0;
  double mean = 0, min = 0, p10 = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
Distribution Distribute(std::vector<double> values);

// Prompts whose first divergence falls in [lo, hi).
struct HistogramBucket {
  int32_t lo = 0;
  int32_t hi = 0;
  int64_t count = 0;
};

struct PromptComparison {
  bool exact_match = false;       // B generated exactly A's token ids
  int32_t first_divergence = -1;  // first index where they differ or one ended; -1 if exact
  int32_t num_positions = 0;      // A's output length: the positions scored for KL
  double mean_kl = 0;
  double max_kl = 0;
  int32_t num_top1_agree = 0;  // positions where B's most likely token is A's token
};

struct CompareReport {
  int32_t num_prompts = 0;
  int32_t num_exact_match = 0;
  double exact_match_rate = 0;
  Distribution first_divergence;  // over the prompts that diverge
  // [0,1), [1,2), [2,4), [4,8), ... up to max_tokens.
  std::vector<HistogramBucket> divergence_histogram;
  int64_t num_positions = 0;       // KL positions: all of A's output tokens
  Distribution kl;                 // per-position KL(A || B), nats
  double kl_exact_fraction = 0;    // positions whose KlTerm was exact
  double top1_agreement = 0;       // B's argmax on A's prefixes equals A's token
  double top1_self_agreement = 0;  // A's own scored argmax equals its greedy token
  bool exact_match_passed = false;
  bool kl_passed = true;  // true when no max_mean_kl is set
  bool passed = false;
  std::vector<PromptComparison> prompts;
};

// The metrics of two runs over the same prompts. REQUIRES: a.outputs.size() == b.outputs.size()
// and each side's dists cover A's outputs (as RunSide makes them).
CompareReport Compare(const SideRun& a, const SideRun& b, const CompareOptions& options);

// Makes one side's LLM; called once per side, A first.
using LlmFactory = std::function<Result<std::unique_ptr<LLM>>()>;

struct ComparisonRun {
  SideRun a;
  SideRun b;
  CompareReport report;
};

// The whole comparison: make A, tokenize, RunSide, release A; make B, check its vocabulary
// matches A's, RunSide against A's outputs; Compare. `log`, when set, receives one line per
// phase. Errors: those of the options, the factories and RunSide (prefixed "A: " or "B: "),
// kInvalidArgument for no prompts or vocabularies that differ.
Result<ComparisonRun> RunComparison(const LlmFactory& make_a, const LlmFactory& make_b,
                                    const std::vector<Prompt>& prompts,
                                    const CompareOptions& options,
                                    const std::function<void(const std::string&)>& log = {});

}  // namespace kiln::eval
