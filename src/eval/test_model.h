// A tiny synthetic checkpoint for the eval tests (2 layers, hidden 64, vocab 320, random weights
// from `seed`), written once per seed into the test temp dir, an LLM on the CPU backend, and the
// prompt logprobs of one prompt run alone.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "builder/synth.h"
#include "engine/llm.h"
#include "model/test_util.h"

namespace kiln::eval::testing {

// Returns the directory of the checkpoint for `seed` (written on first use, removed when the
// test process exits). `vocab_size` changes the vocabulary (>= 320 for the synthetic
// tokenizer's bytes and specials).
inline std::string TinyCheckpoint(uint64_t seed, int32_t vocab_size = 320) {
  struct Written {
    std::vector<std::string> dirs;
    ~Written() {
      std::error_code ec;
      for (const std::string& dir : dirs) std::filesystem::remove_all(dir, ec);
    }
  };
  static Written written;
  const std::string dir = ::testing::TempDir() + "/kiln_eval_tiny_" + std::to_string(::getpid()) +
                          "_" + std::to_string(seed) + "_" + std::to_string(vocab_size);
  if (std::filesystem::exists(dir + "/config.json")) return dir;
  written.dirs.push_back(dir);
  ModelConfig c = kiln::testing::TinyLlamaConfig();
  c.vocab_size = vocab_size;
  c.bos_token_id = 300;
  c.eos_token_ids = {301};
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  SynthOptions o;
  o.output_dir = dir;
  o.dtype = DType::kBF16;
  o.seed = seed;
  o.stddev = 0.08f;  // peaked distributions, so that greedy outputs are far from ties
  o.num_threads = 1;
  o.overwrite = OverwritePolicy::kReplaceCheckpoint;
  const Status s = WriteSyntheticCheckpoint(c, o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

inline LlmOptions TinyLlmOptions() {
  LlmOptions o;
  o.device = "cpu";
  o.num_threads = 1;
  o.engine.num_kv_blocks = 128;
  o.engine.block_size = 16;
  o.engine.max_model_len = 256;
  o.engine.check_invariants = true;
  return o;
}

inline std::unique_ptr<LLM> MakeTinyLlm(uint64_t seed, LlmOptions options = TinyLlmOptions()) {
  auto llm = LLM::Create(TinyCheckpoint(seed), options);
  EXPECT_TRUE(llm.ok()) << llm.status().ToString();
  return llm.ok() ? std::move(*llm) : nullptr;
}

// The engine's prompt logprobs of `ids` run alone as one prompt: entry k scores ids[k + 1].
inline std::vector<ScoredToken> PromptLogprobs(LLM& llm, const std::vector<int32_t>& ids) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 1;
  p.prompt_logprobs = 0;
  auto r = llm.Generate({Prompt::Tokens(ids)}, p);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? (*r)[0].prompt_logprobs : std::vector<ScoredToken>();
}

}  // namespace kiln::eval::testing
