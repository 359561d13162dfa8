// The synthetic model the calibration and quantization tests run on.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "builder/synth.h"
#include "model/test_util.h"

namespace kiln::testing {

// A tiny bf16 Llama (TinyLlamaConfig with vocab 320, bos 300, eos 301, weights of stddev 0.08
// from `seed`) with its synthetic tokenizer, in a fresh temp directory.
inline std::string WriteTinySynthModel(const std::string& stem, uint64_t seed,
                                       bool mlp_bias = false) {
  const std::string dir = MakeTempDir(stem);
  ModelConfig c = TinyLlamaConfig();
  c.vocab_size = 320;
  c.bos_token_id = 300;
  c.eos_token_ids = {301};
  c.rope_theta = 10000.0;
  c.mlp_bias = mlp_bias;
  SynthOptions o;
  o.output_dir = dir;
  o.overwrite = OverwritePolicy::kReplaceCheckpoint;
  o.seed = seed;
  o.stddev = 0.08f;
  o.num_threads = 1;
  const Status s = WriteSyntheticCheckpoint(c, o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

}  // namespace kiln::testing
