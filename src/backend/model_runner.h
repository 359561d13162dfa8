// ModelRunner: what the engine calls to execute one step (DESIGN.md §3, §4). A backend owns the
// weights and the KV cache pool; the engine owns everything about requests and blocks.
//
//   KILN_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, CreateCpuRunner(ckpt, {}));
//   KILN_RETURN_IF_ERROR(runner->AllocateKvCache(num_blocks, /*block_size=*/16));
//   StepResult result = runner->Execute(inputs);
//
// Thread safety: a runner is driven by one thread (the engine's step loop).
#pragma once

#include <cstdint>
#include <string>

#include "backend/step.h"
#include "core/status.h"
#include "model/config.h"

namespace kiln {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda:0", ...

  // Bytes one KV block of `block_size` tokens takes across all layers (K and V).
  virtual int64_t KvBlockBytes(int32_t block_size) const = 0;

  // (Re)allocates the KV pool: num_blocks blocks of block_size tokens for every layer. Contents
  // start undefined. Errors: kResourceExhausted when the memory cannot be had.
  virtual Status AllocateKvCache(int32_t num_blocks, int32_t block_size) = 0;

  // Runs the forward pass over inputs.token_ids, writes the new tokens' K/V into their slots,
  // and samples/scores as each StepSequence asks.
  // REQUIRES: AllocateKvCache was called; inputs are consistent (the engine builds them):
  // every slot and block id is inside the pool, positions match num_computed_tokens, token ids
  // are < vocab_size. A violated precondition is a bug and aborts through CHECK.
  virtual StepResult Execute(const StepInputs& inputs) = 0;
};

}  // namespace kiln
