// FakeRunner: a ModelRunner for engine tests whose "model" is a pure function of the token
// sequence, read back through the paged KV cache. It stores each written token (and its
// position) in its slot and, for a logits row, gathers positions [0, pos] through the block
// table — so any wrong slot mapping, block table or prefix-cache hit changes the next token,
// and a position mismatch aborts at once. FakeLogits() on the true sequence is the reference.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/model_runner.h"

namespace kiln::testing {

// Deterministic pseudo-logits for the sequence `tokens` (order-sensitive): [vocab_size].
std::vector<float> FakeLogits(std::span<const int32_t> tokens, int32_t vocab_size);
// The same into `out` ([vocab_size]), without allocating.
void FakeLogitsInto(std::span<const int32_t> tokens, std::span<float> out);

class FakeRunner final : public ModelRunner {
 public:
  // vocab_size tokens; eos_token_id is put in the config's eos list.
  FakeRunner(int32_t vocab_size, int32_t eos_token_id, int32_t max_position_embeddings = 4096);

  const ModelConfig& config() const override { return config_; }
  std::string name() const override { return "fake"; }
  int64_t KvBlockBytes(int32_t block_size) const override { return int64_t{block_size} * 8; }
  Status AllocateKvCache(int32_t num_blocks, int32_t block_size) override;
  Status AllocateSwapSpace(int32_t num_blocks) override;
  // Swap copies copy a block's slots; a swap-in then poisons the host block (-1), so that a
  // host block read twice or never written changes the tokens. (A swapped-out device block is
  // left as it is: prefix caching may share it.)
  StepResult Execute(const StepInputs& inputs) override;

  // Sleeps this long in every Execute (to make a long request outlast a test's next action).
  void set_step_delay_us(int64_t us) { step_delay_us_ = us; }
  int64_t num_steps() const { return num_steps_; }
  int64_t num_tokens_computed() const { return num_tokens_computed_; }
  int64_t num_blocks_swapped_out() const { return num_blocks_swapped_out_; }
  int64_t num_blocks_swapped_in() const { return num_blocks_swapped_in_; }

 private:
  ModelConfig config_;
  int32_t block_size_ = 0;
  std::vector<int32_t> slot_token_;     // [num_blocks * block_size]
  std::vector<int32_t> slot_position_;  // [num_blocks * block_size]
  std::vector<int32_t> host_token_;     // [num_host_blocks * block_size], the swap space
  std::vector<int32_t> host_position_;
  std::vector<float> logits_;  // reused across steps, as a real runner's workspace
  int64_t step_delay_us_ = 0;
  int64_t num_steps_ = 0;
  int64_t num_tokens_computed_ = 0;
  int64_t num_blocks_swapped_out_ = 0;
  int64_t num_blocks_swapped_in_ = 0;
};

}  // namespace kiln::testing
