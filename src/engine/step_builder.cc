#include "engine/step_builder.h"

#include <algorithm>

#include "core/check.h"

namespace kiln {
namespace {

SamplingSpec MakeSamplingSpec(const Request& r) {
  SamplingSpec spec = r.sampling;
  if (r.num_output_tokens() >= r.min_tokens) spec.banned_token_ids = {};
  spec.prompt_token_ids = r.prompt();
  spec.output_token_ids = r.output();
  return spec;
}

}  // namespace

StepInputs BuildStepInputs(const ScheduledBatch& batch, const KvCacheManager& kv) {
  StepInputs in;
  in.swap_out = batch.swap_out;
  in.swap_in = batch.swap_in;
  const int32_t block_size = kv.block_size();
  in.token_ids.reserve(batch.num_batched_tokens);
  in.positions.reserve(batch.num_batched_tokens);
  in.slot_mapping.reserve(batch.num_batched_tokens);
  in.cu_seqlens.reserve(batch.seqs.size() + 1);
  in.seq_lens.reserve(batch.seqs.size());
  in.seqs.reserve(batch.seqs.size());
  in.cu_seqlens.push_back(0);
  for (const ScheduledSeq& s : batch.seqs) {
    in.max_blocks_per_seq =
        std::max(in.max_blocks_per_seq, kv.NumBlocksFor(s.num_computed_tokens + s.num_new_tokens));
  }
  in.block_tables.assign(batch.seqs.size() * in.max_blocks_per_seq, -1);

  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const ScheduledSeq& s = batch.seqs[i];
    const Request& r = *s.request;
    const int32_t seq_len = s.num_computed_tokens + s.num_new_tokens;
    const std::span<const int32_t> table = s.block_table;
    const int32_t num_blocks = kv.NumBlocksFor(seq_len);
    CHECK(static_cast<int32_t>(table.size()) >= num_blocks) << "request " << r.id;
    std::copy_n(table.begin(), num_blocks, in.block_tables.begin() + i * in.max_blocks_per_seq);
    for (int32_t pos = s.num_computed_tokens; pos < seq_len; ++pos) {
      in.token_ids.push_back(r.token_ids[pos]);
      in.positions.push_back(pos);
      in.slot_mapping.push_back(int64_t{table[pos / block_size]} * block_size + pos % block_size);
    }
    in.cu_seqlens.push_back(static_cast<int32_t>(in.token_ids.size()));
    in.seq_lens.push_back(seq_len);

    StepSequence seq;
    seq.num_computed_tokens = s.num_computed_tokens;
    seq.num_new_tokens = s.num_new_tokens;
    seq.do_sample = s.samples;
    if (seq.do_sample) seq.sampling = MakeSamplingSpec(r);
    // Prompt logprobs: the token at position p is scored by the logits of position p - 1.
    const int32_t last_target = r.num_prompt_tokens - 1;
    if (r.wants_prompt_logprobs && s.num_computed_tokens < last_target) {
      // Fewer while the previous chunk's step is still in flight (async scheduling).
      CHECK_LE(static_cast<int32_t>(r.prompt_logprobs.size()), s.num_computed_tokens);
      const int32_t count = std::min(seq_len, last_target) - s.num_computed_tokens;
      seq.prompt_logprob_targets = {r.token_ids.data() + s.num_computed_tokens + 1,
                                    static_cast<size_t>(count)};
      seq.num_prompt_top_logprobs = *r.params.prompt_logprobs;
    }
    in.seqs.push_back(seq);
  }
  return in;
}

}  // namespace kiln
