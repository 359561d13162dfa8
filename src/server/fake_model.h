// A ServedModel on the FakeRunner (engine/fake_runner.h) with a synthetic tokenizer, for tests of
// the server and of its clients: no weights, deterministic tokens, an optional delay per step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/server.h"

namespace kiln::server::testing {

inline constexpr int32_t kFakeVocab = 512;
inline constexpr int32_t kFakeEos = 2;

struct FakeModelSetup {
  int64_t step_delay_us = 0;  // wall time each step takes
  int32_t max_num_seqs = 256;
  int32_t num_kv_blocks = 512;  // of 4 tokens each
  // The chat template's source; "" = none (the chat routes then answer 400).
  std::string chat_template;
};

// The model, named "fake", its executor started. CHECK-fails on a setup the engine rejects.
std::unique_ptr<ServedModel> MakeFakeServedModel(const FakeModelSetup& setup = {});

}  // namespace kiln::server::testing
