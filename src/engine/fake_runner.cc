#include "engine/fake_runner.h"

#include <chrono>
#include <thread>

#include "backend/cpu/sampler.h"
#include "core/check.h"
#include "core/hash.h"

namespace kiln::testing {

std::vector<float> FakeLogits(std::span<const int32_t> tokens, int32_t vocab_size) {
  std::vector<float> logits(vocab_size);
  FakeLogitsInto(tokens, logits);
  return logits;
}

void FakeLogitsInto(std::span<const int32_t> tokens, std::span<float> logits) {
  const int32_t vocab_size = static_cast<int32_t>(logits.size());
  uint64_t h = 0x243f6a8885a308d3ULL;
  for (int32_t t : tokens) {
    h ^= static_cast<uint64_t>(t) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
  }
  for (int32_t i = 0; i < vocab_size; ++i) {
    const uint64_t z = Mix64(h + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(i + 1));
    logits[i] = static_cast<float>(z % 4096) / 512.0f - 4.0f;  // in [-4, 4), 1/512 steps
  }
}

FakeRunner::FakeRunner(int32_t vocab_size, int32_t eos_token_id, int32_t max_position_embeddings) {
  config_.architecture = "FakeForTests";
  config_.num_layers = 1;
  config_.hidden_size = 8;
  config_.intermediate_size = 8;
  config_.num_heads = 1;
  config_.num_kv_heads = 1;
  config_.head_dim = 8;
  config_.vocab_size = vocab_size;
  config_.max_position_embeddings = max_position_embeddings;
  config_.eos_token_ids = {eos_token_id};
  logits_.resize(vocab_size);
  if (eos_token_id != 1) config_.bos_token_id = 1;
}

Status FakeRunner::AllocateKvCache(int32_t num_blocks, int32_t block_size) {
  block_size_ = block_size;
  slot_token_.assign(static_cast<size_t>(num_blocks) * block_size, -1);
  slot_position_.assign(slot_token_.size(), -1);
  return Status::Ok();
}

Status FakeRunner::AllocateSwapSpace(int32_t num_blocks) {
  CHECK_GT(block_size_, 0) << "AllocateSwapSpace before AllocateKvCache";
  host_token_.assign(static_cast<size_t>(num_blocks) * block_size_, -1);
  host_position_.assign(host_token_.size(), -1);
  return Status::Ok();
}

StepResult FakeRunner::Execute(const StepInputs& in) {
  ++num_steps_;
  // Copies block `from` of (tokens, positions) to block `to` of the other pair; `poison` sets
  // the source to -1 afterwards.
  auto copy_block = [this](std::vector<int32_t>& from_tokens, std::vector<int32_t>& from_pos,
                           int32_t from, std::vector<int32_t>& to_tokens,
                           std::vector<int32_t>& to_pos, int32_t to, bool poison) {
    const size_t src = static_cast<size_t>(from) * block_size_;
    const size_t dst = static_cast<size_t>(to) * block_size_;
    CHECK(src + block_size_ <= from_tokens.size() && dst + block_size_ <= to_tokens.size());
    for (int32_t i = 0; i < block_size_; ++i) {
      to_tokens[dst + i] = from_tokens[src + i];
      to_pos[dst + i] = from_pos[src + i];
      if (poison) from_tokens[src + i] = from_pos[src + i] = -1;
    }
  };
  for (const BlockCopy& c : in.swap_out) {
    copy_block(slot_token_, slot_position_, c.device_block, host_token_, host_position_,
               c.host_block, /*poison=*/false);
  }
  for (const BlockCopy& c : in.swap_in) {
    copy_block(host_token_, host_position_, c.host_block, slot_token_, slot_position_,
               c.device_block, /*poison=*/true);
  }
  num_blocks_swapped_out_ += static_cast<int64_t>(in.swap_out.size());
  num_blocks_swapped_in_ += static_cast<int64_t>(in.swap_in.size());
  if (step_delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(step_delay_us_));
  num_tokens_computed_ += in.num_tokens();
  for (int32_t t = 0; t < in.num_tokens(); ++t) {
    const int64_t slot = in.slot_mapping[t];
    CHECK(slot >= 0 && slot < static_cast<int64_t>(slot_token_.size()));
    slot_token_[slot] = in.token_ids[t];
    slot_position_[slot] = in.positions[t];
  }
  // The sequence as the cache holds it: positions [0, len) through the block table.
  auto gather = [&](int32_t s, int32_t len) {
    std::vector<int32_t> tokens(len);
    const int32_t* table = in.block_tables.data() + int64_t{s} * in.max_blocks_per_seq;
    for (int32_t p = 0; p < len; ++p) {
      const int32_t block = table[p / block_size_];
      CHECK(block >= 0) << "position " << p << " of sequence " << s << " has no block";
      const int64_t slot = int64_t{block} * block_size_ + p % block_size_;
      CHECK_EQ(slot_position_[slot], p) << "sequence " << s << ": slot " << slot << " holds "
                                        << "position " << slot_position_[slot];
      tokens[p] = slot_token_[slot];
    }
    return tokens;
  };
  StepResult result;
  result.seqs.resize(in.seqs.size());
  for (int32_t s = 0; s < in.num_seqs(); ++s) {
    const StepSequence& seq = in.seqs[s];
    CHECK_EQ(seq.num_computed_tokens + seq.num_new_tokens, in.seq_lens[s]);
    CHECK_EQ(in.cu_seqlens[s + 1] - in.cu_seqlens[s], seq.num_new_tokens);
    const std::vector<int32_t> tokens = gather(s, in.seq_lens[s]);
    for (size_t i = 0; i < seq.prompt_logprob_targets.size(); ++i) {
      const int32_t pos = seq.num_computed_tokens + static_cast<int32_t>(i);
      FakeLogitsInto(std::span<const int32_t>(tokens).first(pos + 1), logits_);
      result.seqs[s].prompt_logprobs.push_back(
          cpu::Score(logits_, seq.prompt_logprob_targets[i], seq.num_prompt_top_logprobs));
    }
    if (seq.do_sample) {
      FakeLogitsInto(tokens, logits_);
      result.seqs[s].sampled = cpu::Sample(logits_, seq.sampling);
    }
  }
  return result;
}

}  // namespace kiln::testing
