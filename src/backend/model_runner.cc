#include "backend/model_runner.h"

#include <utility>

#include "core/check.h"

namespace kiln {

void ModelRunner::Launch(const StepInputs& inputs) {
  CHECK_LT(queued_.size(), size_t{2}) << "more than two steps launched without a Wait";
  queued_.push_back(inputs);
}

StepResult ModelRunner::Wait() {
  CHECK(!queued_.empty()) << "Wait without a launched step";
  StepInputs inputs = std::move(queued_.front());
  queued_.pop_front();
  for (int32_t& token : inputs.token_ids) {
    if (!IsPreviousStepToken(token)) continue;
    const int32_t seq = PreviousStepSeq(token);
    CHECK(seq < static_cast<int32_t>(previous_tokens_.size()) && previous_tokens_[seq] >= 0)
        << "PreviousStepToken(" << seq << ") names a sequence the previous step did not sample";
    token = previous_tokens_[seq];
  }
  StepResult result = Execute(inputs);
  previous_tokens_.assign(inputs.seqs.size(), -1);
  for (size_t s = 0; s < inputs.seqs.size(); ++s) {
    if (inputs.seqs[s].do_sample) previous_tokens_[s] = result.seqs[s].sampled.token_id;
  }
  return result;
}

}  // namespace kiln
