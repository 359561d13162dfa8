// ModelRunner: what the engine calls to execute one step (DESIGN.md §3, §4). A backend owns the
// weights and the KV cache pool; the engine owns everything about requests and blocks.
//
//   KILN_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, CreateCpuRunner(ckpt, {}));
//   KILN_RETURN_IF_ERROR(runner->AllocateKvCache(num_blocks, /*block_size=*/16));
//   StepResult result = runner->Execute(inputs);
//
//   runner->Launch(inputs);            // or asynchronously: returns at once
//   runner->Launch(next);              // next may use PreviousStepToken(j) for inputs' tokens
//   StepResult first = runner->Wait();
//
// Thread safety: a runner is driven by one thread (the engine's step loop).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

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

  // (Re)allocates the host swap space: num_blocks blocks of the KV pool's block size (0 frees
  // it), where StepInputs::swap_out/swap_in move preempted requests' KV (swap-to-host
  // preemption). Call after AllocateKvCache. Errors: kResourceExhausted when the (pinned) host
  // memory cannot be had.
  virtual Status AllocateSwapSpace(int32_t num_blocks) = 0;

  // Runs the swap copies of inputs, then the forward pass over inputs.token_ids, writes the new
  // tokens' K/V into their slots, and samples/scores as each StepSequence asks.
  // REQUIRES: AllocateKvCache was called; inputs are consistent (the engine builds them):
  // every slot and block id is inside the pool, positions match num_computed_tokens, token ids
  // are < vocab_size. A violated precondition is a bug and aborts through CHECK.
  virtual StepResult Execute(const StepInputs& inputs) = 0;

  // The same step, asynchronously (CPU/GPU overlap, DESIGN.md §3): Launch queues it and returns
  // at once; Wait blocks for the oldest launched step and returns its result. The engine keeps
  // at most two steps launched and prepares the next while the device runs the current one.
  // inputs.token_ids may hold PreviousStepToken(j): the token the step launched just before
  // samples for its sequence j (that step must have sampled sequence j). The spans in `inputs`
  // stay valid until Wait returns this step's result.
  // The defaults run Execute inside Wait (a host backend gains nothing from overlap); a device
  // backend overrides both and takes the previous step's tokens from device memory.
  virtual void Launch(const StepInputs& inputs);
  virtual StepResult Wait();
  // Whether Launch returns before the step is computed, so that the host's work for the next
  // step overlaps it (the engine then schedules ahead by default).
  virtual bool OverlapsHost() const { return false; }

 private:
  std::deque<StepInputs> queued_;         // launched, not yet executed (default Launch/Wait)
  std::vector<int32_t> previous_tokens_;  // per sequence of the last executed step, -1 = none
};

}  // namespace kiln
