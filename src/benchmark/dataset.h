// Benchmark datasets: the prompts a benchmark sends, each with its input length (exact for
// token-id prompts) and the number of tokens to ask for.
//
//   DatasetOptions opts;              // random: 1,000 prompts of 1,024 tokens, 128 out
//   opts.num_requests = 1000;
//   KILN_ASSIGN_OR_RETURN(std::vector<BenchRequest> reqs, MakeDataset(opts, tokenizer));
//
// Kinds (DatasetOptions::kind):
//   random         token ids drawn uniformly from the vocabulary (special tokens excluded), of
//                  fixed lengths, or normal-distributed ones when a stddev is given (rounded,
//                  clamped to [1, 2·mean]). Sent as token ids, so the server sees exact lengths.
//   jsonl          a file with one JSON object per line: {"prompt": "..."} and optionally
//                  "output_len" (an integer; else options.output_len). Blank lines are skipped.
//   sharegpt       ShareGPT-format JSON: a list of {"conversations": [{"from": "human",
//                  "value": ...}, {"from": "gpt", "value": ...}, ...]}. The first turn is the
//                  prompt and the second's token count the output length (options.output_len
//                  when options.fixed_output_len), as vLLM's benchmark does; entries with a
//                  prompt or reply under 4 tokens, a prompt over 1,024 or a sum over 2,048
//                  tokens are skipped; the rest are shuffled with the seed.
//   shared-prefix  num_prefixes system prompts of prefix_len random tokens, each followed by
//                  questions of question_len random tokens (request i uses prefix
//                  i % num_prefixes), the prefix-caching workload.
//
// Thread safety: MakeDataset is a pure function of its arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace kiln::benchmark {

// One prompt to send. Token-id datasets (random, shared-prefix) fill prompt_ids and, when a
// tokenizer is known, prompt_text (their decoded text, for the chat endpoint); text datasets
// (jsonl, sharegpt) fill prompt_text, and prompt_ids when a tokenizer is known.
struct BenchRequest {
  std::vector<int32_t> prompt_ids;
  std::string prompt_text;
  // shared-prefix: how many leading prompt_ids (and the leading bytes of prompt_text that
  // decode them) are the shared system prompt; 0 otherwise. The chat endpoint sends that part as
  // a system message.
  int32_t prefix_len = 0;
  int32_t prefix_text_len = 0;
  int32_t input_len = -1;  // prompt tokens; -1 when unknown (a text prompt, no tokenizer)
  int32_t output_len = 0;  // max_tokens to ask for (>= 1)
};

struct DatasetOptions {
  std::string kind = "random";  // random | jsonl | sharegpt | shared-prefix
  std::string path;             // the file of jsonl and sharegpt
  // How many requests to make. Text datasets with fewer entries are cycled (jsonl) or fail
  // (sharegpt, after filtering) with kInvalidArgument naming both counts.
  int32_t num_requests = 1000;
  uint64_t seed = 0;  // the same seed gives the same prompts
  // random: lengths; the stddevs, when > 0, make them normal-distributed around the mean.
  int32_t input_len = 1024;
  int32_t output_len = 128;  // also jsonl's default and sharegpt's when fixed_output_len
  double input_len_stddev = 0;
  double output_len_stddev = 0;
  bool fixed_output_len = false;  // sharegpt: ask for output_len, not the reply's length
  // shared-prefix.
  int32_t num_prefixes = 4;
  int32_t prefix_len = 512;
  int32_t question_len = 128;
  // Token ids are drawn from [0, vocab_size) when no tokenizer is given (random and
  // shared-prefix); with a tokenizer its vocabulary minus special tokens is used.
  int32_t vocab_size = 0;
};

// The requests `options` describes. `tokenizer` may be null for random and shared-prefix (then
// options.vocab_size must be > 0) and for jsonl (then input_len is -1); sharegpt needs it.
// Errors: kInvalidArgument for an unknown kind, a non-positive length or count, a missing
// tokenizer or vocab_size; kNotFound for a missing file; kInvalidArgument naming file and line
// (jsonl) or entry index (sharegpt) for malformed content.
Result<std::vector<BenchRequest>> MakeDataset(const DatasetOptions& options,
                                              const Tokenizer* tokenizer);

// A warm-up request like `r` whose prompt shares no KV block with it (token ids rotated by one
// place, text prefixed with "warm-up: "), so the prefix cache carries no work from the warm-up
// into the measured run.
BenchRequest WarmupVariant(const BenchRequest& r);

// Send times, in seconds after the start, of `n` requests arriving at `rate` requests per
// second: gaps drawn from a gamma distribution with shape `burstiness` and mean 1 / rate (shape
// 1 is a Poisson process; below 1 burstier, above 1 steadier), as vLLM's benchmark does. rate =
// +infinity sends all at time 0. REQUIRES: rate > 0, burstiness > 0.
std::vector<double> ArrivalTimes(int32_t n, double rate, double burstiness, uint64_t seed);

}  // namespace kiln::benchmark
