// RequestTextStream: the text side of one request's output, above the engine (which deals in
// token ids only). It detokenizes incrementally and watches for stop strings; when one matches
// it finishes the stream and says so, and the caller aborts the engine request (the engine may
// already have computed a token beyond it; that token is dropped here).
//
// Runs on whichever thread consumes the request's outputs (the server's, or LLM's caller).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kiln {

// One step's worth of a request's output, as text.
struct TextDelta {
  std::string text;                   // new text safe to show (stop strings held back)
  std::vector<int32_t> token_ids;     // new token ids (all of them, incl. a stop token)
  std::vector<ScoredToken> logprobs;  // per new token, when asked for
  std::vector<ScoredToken> prompt_logprobs;
  bool finished = false;
  std::optional<FinishReason> finish_reason;
  // Why it stopped: the matched stop string, or the stop token id (eos / stop_token_ids).
  std::optional<std::string> stop_string;
  int32_t stop_token_id = -1;
  // A stop string matched in this delta: abort the engine request (it has not finished there).
  bool needs_abort = false;
};

class RequestTextStream {
 public:
  // `tokenizer` must outlive the stream; `params` are the request's validated params.
  RequestTextStream(const Tokenizer* tokenizer, const SamplingParams& params);

  // Turns an engine output of this request into text. After a finished delta, later outputs
  // (the engine's last token before it saw the abort) return an empty, finished delta.
  TextDelta Process(const RequestOutput& output);

  bool finished() const { return finished_; }

 private:
  const Tokenizer* tokenizer_;
  bool include_stop_str_;
  bool has_logprobs_;
  IncrementalDetokenizer detok_;
  StopStringMatcher stops_;
  bool finished_ = false;
};

}  // namespace kiln
