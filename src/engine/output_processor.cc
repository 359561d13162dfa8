#include "engine/output_processor.h"

namespace kiln {

RequestTextStream::RequestTextStream(const Tokenizer* tokenizer, const SamplingParams& params)
    : tokenizer_(tokenizer),
      include_stop_str_(params.include_stop_str_in_output),
      has_logprobs_(params.logprobs.has_value()),
      detok_(tokenizer, params.skip_special_tokens),
      stops_(params.stop, params.include_stop_str_in_output) {}

TextDelta RequestTextStream::Process(const RequestOutput& output) {
  TextDelta delta;
  if (finished_) {
    delta.finished = true;
    return delta;
  }
  delta.prompt_logprobs = output.new_prompt_logprobs;
  std::string decoded;
  for (size_t i = 0; i < output.new_token_ids.size(); ++i) {
    const int32_t id = output.new_token_ids[i];
    delta.token_ids.push_back(id);
    if (has_logprobs_ && i < output.new_logprobs.size()) {
      delta.logprobs.push_back(output.new_logprobs[i]);
    }
    // NOTE: the token that stopped the request is not text (as vLLM), unless asked for.
    const bool is_stop_token =
        output.finished && output.stop_token_id == id && i + 1 == output.new_token_ids.size();
    if (is_stop_token && !include_stop_str_) continue;
    decoded += detok_.Add(id);
    StopStringMatcher::Update update = stops_.Push(decoded);
    decoded.clear();
    delta.text += update.text;
    if (update.stop_index.has_value()) {
      delta.finished = true;
      delta.finish_reason = FinishReason::kStop;
      delta.stop_string = stops_.stop(*update.stop_index);
      delta.needs_abort = !output.finished;
      finished_ = true;
      return delta;
    }
  }
  if (output.finished) {
    delta.text += stops_.Push(detok_.Finish()).text;
    delta.text += stops_.Flush();
    delta.finished = true;
    delta.finish_reason = output.finish_reason;
    delta.stop_token_id = output.stop_token_id;
    finished_ = true;
  }
  return delta;
}

}  // namespace kiln
