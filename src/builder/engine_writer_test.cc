// kiln build's engine directories (builder/engine_writer.h, model/engine_dir.h): what is
// written (layout, digests), that an engine runs exactly like its source, signing and
// tampering, and the errors of bad directories and manifests. The default-model case (a GGUF
// source: q/k rows un-permuted, tokenizer.gguf.json) needs KILN_DEFAULT_MODEL.
#include "builder/engine_writer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_runner.h"
#include "builder/synth.h"
#include "builder/test_util.h"
#include "core/crypto_test_util.h"
#include "engine/tokenizer_loader.h"
#include "model/dequant.h"
#include "model/engine_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::ScopedTempDir;

ModelConfig SmallLlama() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 400;
  c.max_position_embeddings = 256;
  c.bos_token_id = 300;
  c.eos_token_ids = {302};
  return c;
}

Checkpoint Open(const std::string& path) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  return std::move(ckpt).value();
}

Checkpoint Synth(const std::string& dir) {
  SynthOptions o;
  o.output_dir = dir;
  o.seed = 5;
  o.stddev = 0.08f;
  o.num_threads = 1;
  const Status s = WriteSyntheticCheckpoint(SmallLlama(), o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return Open(dir);
}

// The logprob of each next token of `tokens` in one prefill (and the top-5 after the last).
std::vector<float> PromptLogprobs(const Checkpoint& ckpt, const CpuRunnerOptions& options,
                                  const std::vector<int32_t>& tokens) {
  auto runner = CreateCpuRunner(ckpt, options);
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  const int32_t n = static_cast<int32_t>(tokens.size());
  const int32_t blocks = (n + 15) / 16;
  EXPECT_TRUE((*runner)->AllocateKvCache(blocks, 16).ok());
  StepInputs in = SingleSequenceStep(tokens, 0, n, 16);
  StepSequence& seq = in.seqs[0];
  seq.do_sample = true;
  seq.sampling.num_top_logprobs = 5;
  const std::vector<int32_t> targets(tokens.begin() + 1, tokens.end());
  seq.prompt_logprob_targets = targets;
  const StepResult r = (*runner)->Execute(in);
  std::vector<float> out;
  for (const ScoredToken& t : r.seqs[0].prompt_logprobs) out.push_back(t.logprob);
  for (const TokenLogprob& t : r.seqs[0].sampled.top_logprobs) out.push_back(t.logprob);
  return out;
}

std::vector<int32_t> Tokens(int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 7919 + 13) % vocab);
  return t;
}

void ExpectBitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << "logprob " << i << ": " << a[i] << " vs " << b[i];
  }
}

std::pair<std::string, std::string> MakeKeyPair(const ScopedTempDir& dir, const std::string& stem) {
  return testing::WriteEd25519KeyPair(dir.file(stem));
}

TEST(EngineWriterTest, WritesAlignedFusedTensorsThatRunBitwiseLikeTheSource) {
  ScopedTempDir src_dir("engine_src"), out_dir("engine_out");
  const Checkpoint src = Synth(src_dir.path());
  EngineBuildOptions o;
  o.out_dir = out_dir.path();
  o.dtype = DType::kF32;
  o.threads = 2;
  o.kiln_version = "test";
  int64_t last_done = -1, total = 0;
  o.progress = [&](std::string_view stage, int64_t done, int64_t t) {
    if (stage == "weights") {
      EXPECT_GE(done, last_done);
      last_done = done;
      total = t;
    }
  };
  ASSERT_TRUE(WriteEngine(src, nullptr, o).ok());
  EXPECT_EQ(last_done, total);
  EXPECT_EQ(total, src.WeightBytes());

  const Checkpoint engine = Open(out_dir.path());
  EXPECT_EQ(engine.format(), CheckpointFormat::kEngine);
  ASSERT_TRUE(engine.engine().has_value());
  EXPECT_EQ(engine.engine()->quant_recipe, "none");
  EXPECT_EQ(engine.config().hidden_size, 64);
  EXPECT_EQ(engine.config().num_kv_heads, 2);
  ASSERT_EQ(engine.weights().size(), src.weights().size());
  for (const Weight& w : engine.weights()) {
    SCOPED_TRACE(w.name);
    EXPECT_EQ(w.dtype, DType::kF32);
    const Weight* s = src.Find(w.name);
    ASSERT_NE(s, nullptr);
    std::vector<float> expected(s->shape.numel());
    ASSERT_TRUE(
        DequantizeToF32(s->dtype, s->data, s->nbytes, s->shape.numel(), expected.data()).ok());
    EXPECT_EQ(std::memcmp(w.data, expected.data(), w.nbytes), 0);
  }
  // q|k|v and gate|up back to back, each group (and every other tensor) 4096-aligned in the file.
  const uint8_t* base = engine.weights()[0].data;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    const Weight* q = engine.Find(p + "self_attn.q_proj.weight");
    const Weight* k = engine.Find(p + "self_attn.k_proj.weight");
    const Weight* v = engine.Find(p + "self_attn.v_proj.weight");
    const Weight* g = engine.Find(p + "mlp.gate_proj.weight");
    const Weight* u = engine.Find(p + "mlp.up_proj.weight");
    EXPECT_EQ(q->data + q->nbytes, k->data);
    EXPECT_EQ(k->data + k->nbytes, v->data);
    EXPECT_EQ(g->data + g->nbytes, u->data);
    EXPECT_EQ((q->data - base) % kEngineAlignment, 0);
    EXPECT_EQ((g->data - base) % kEngineAlignment, 0);
    EXPECT_EQ((engine.Find(p + "self_attn.o_proj.weight")->data - base) % kEngineAlignment, 0);
  }
  // The manifest lists every other file with its digest.
  auto manifest = ParseEngineManifest(ReadFile(out_dir.file("kiln-engine.json")), "m");
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->fused.size(), 4u);
  for (const char* f : {"weights.bin", "config.json", "tokenizer.json", "tokenizer_config.json"}) {
    ASSERT_TRUE(manifest->files.count(f)) << f;
    EXPECT_EQ(manifest->files.at(f).sha256, Sha256Hex(std::string_view(ReadFile(out_dir.file(f)))));
  }
  // The tokenizer loads from the engine as from the source.
  auto tok_src = LoadTokenizer(src_dir.path()), tok_engine = LoadTokenizer(out_dir.path());
  ASSERT_TRUE(tok_src.ok() && tok_engine.ok());
  EXPECT_EQ(tok_src->tokenizer->Encode("hello world", true, true),
            tok_engine->tokenizer->Encode("hello world", true, true));

  const std::vector<int32_t> tokens = Tokens(21, 400);
  ExpectBitwiseEqual(PromptLogprobs(src, {}, tokens), PromptLogprobs(engine, {}, tokens));
}

TEST(EngineWriterTest, Fp8EngineRunsBitwiseLikeQuantizingAtLoad) {
  ScopedTempDir src_dir("engine_src"), out_dir("engine_out");
  const Checkpoint src = Synth(src_dir.path());
  EngineBuildOptions o;
  o.out_dir = out_dir.path();
  o.dtype = DType::kF32;
  o.quantization = QuantMethod::kFp8;
  o.quant_recipe = "fp8";
  o.kv_cache_dtype = KvCacheDType::kFp8E4M3;
  ASSERT_TRUE(WriteEngine(src, nullptr, o).ok());
  const Checkpoint engine = Open(out_dir.path());
  EXPECT_EQ(engine.quantization().method, QuantMethod::kFp8);
  EXPECT_EQ(engine.engine()->kv_cache_dtype, KvCacheDType::kFp8E4M3);
  const Weight* q = engine.Find("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q->dtype, DType::kF8E4M3);
  EXPECT_EQ(q->row_scales.size(), 64u);
  EXPECT_EQ(engine.Find("model.embed_tokens.weight")->dtype, DType::kF32);
  EXPECT_EQ(engine.Find("model.norm.weight")->dtype, DType::kF32);

  CpuRunnerOptions at_load;
  at_load.quantization = QuantMethod::kFp8;
  const std::vector<int32_t> tokens = Tokens(19, 400);
  // The engine runs FP8 whatever the options say (its weights are e4m3).
  ExpectBitwiseEqual(PromptLogprobs(src, at_load, tokens), PromptLogprobs(engine, {}, tokens));
}

TEST(EngineWriterTest, SignatureCoversEveryFile) {
  ScopedTempDir src_dir("engine_src"), out_dir("engine_out"), keys("engine_keys");
  fs::create_directories(keys.path());
  const Checkpoint src = Synth(src_dir.path());
  EngineBuildOptions o;
  o.out_dir = out_dir.path();
  ASSERT_TRUE(WriteEngine(src, nullptr, o).ok());
  const auto [priv, pub] = MakeKeyPair(keys, "a");
  const auto [other_priv, other_pub] = MakeKeyPair(keys, "b");
  const std::string dir = out_dir.path();
  {
    // The default dtype is the source's (bf16): its matrices are copied, not re-encoded (norms
    // and biases are stored in f32).
    const Checkpoint engine = Open(dir);
    for (const Weight& w : engine.weights()) {
      if (w.shape.ndim() != 2) continue;
      const Weight* source = src.Find(w.name);
      ASSERT_EQ(w.nbytes, source->nbytes) << w.name;
      EXPECT_EQ(std::memcmp(w.data, source->data, w.nbytes), 0) << w.name;
    }
  }
  EXPECT_EQ(VerifyEngine(dir, pub, 2).code(), StatusCode::kNotFound);  // unsigned
  // A GEMM table added after the build is listed with its digest (and covered by the signature).
  ASSERT_TRUE(WriteEngineGemmTable(dir, "{\"entries\": []}\n").ok());
  EXPECT_EQ(Open(dir).engine()->gemm_table_path, out_dir.file("gemm_table.json"));
  ASSERT_TRUE(SignEngine(dir, priv).ok());
  EXPECT_TRUE(VerifyEngine(dir, pub, 2).ok());
  EXPECT_EQ(VerifyEngine(dir, other_pub, 2).code(), StatusCode::kCorrupt);

  // One changed byte of the weights.
  {
    std::fstream f(out_dir.file("weights.bin"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x55');
  }
  const Status changed = VerifyEngine(dir, pub, 2);
  EXPECT_EQ(changed.code(), StatusCode::kCorrupt);
  EXPECT_NE(changed.message().find("weights.bin"), std::string::npos) << changed.message();

  // Rebuilt and re-signed: a file added afterwards, or a changed manifest, is refused.
  o.overwrite = true;
  ASSERT_TRUE(WriteEngine(src, nullptr, o).ok());
  EXPECT_FALSE(fs::exists(out_dir.file("kiln-engine.sig")));  // the old signature is dropped
  ASSERT_TRUE(SignEngine(dir, priv).ok());
  std::ofstream(out_dir.file("extra.txt")) << "x";
  EXPECT_EQ(VerifyEngine(dir, pub, 2).code(), StatusCode::kCorrupt);
  fs::remove(out_dir.file("extra.txt"));
  std::string manifest = ReadFile(out_dir.file("kiln-engine.json"));
  manifest.replace(manifest.find("\"kv_cache_dtype\": \"auto\""), 24,
                   "\"kv_cache_dtype\": \"fp8\" ");
  std::ofstream(out_dir.file("kiln-engine.json"), std::ios::trunc) << manifest;
  EXPECT_EQ(VerifyEngine(dir, pub, 2).code(), StatusCode::kCorrupt);
  // Not an engine at all.
  EXPECT_EQ(VerifyEngine(src_dir.path(), pub, 2).code(), StatusCode::kInvalidArgument);
}

TEST(EngineWriterTest, BadDirectoriesAndManifestsAreRefusedWithTheirName) {
  ScopedTempDir src_dir("engine_src"), out_dir("engine_out");
  const Checkpoint src = Synth(src_dir.path());
  EngineBuildOptions o;
  o.out_dir = src_dir.path();  // not empty, not an engine
  EXPECT_EQ(WriteEngine(src, nullptr, o).code(), StatusCode::kInvalidArgument);
  o.out_dir = out_dir.path();
  o.quantization = QuantMethod::kW4A16;  // needs a quantizer's tensors
  EXPECT_EQ(WriteEngine(src, nullptr, o).code(), StatusCode::kInvalidArgument);
  o.quantization = QuantMethod::kNone;
  ASSERT_TRUE(WriteEngine(src, nullptr, o).ok());
  EXPECT_EQ(WriteEngine(src, nullptr, o).code(), StatusCode::kInvalidArgument);  // no overwrite

  const std::string manifest_path = out_dir.file("kiln-engine.json");
  const std::string good = ReadFile(manifest_path);
  auto open_with = [&](const std::string& text) {
    std::ofstream(manifest_path, std::ios::trunc) << text;
    return Checkpoint::Open(out_dir.path()).status();
  };
  std::string newer = good;
  newer.replace(newer.find("\"format_version\": 1"), 19, "\"format_version\": 9");
  EXPECT_EQ(open_with(newer).code(), StatusCode::kUnsupported);
  EXPECT_EQ(open_with("{\"magic\": \"other\"}").code(), StatusCode::kUnsupported);
  EXPECT_EQ(open_with("not json").code(), StatusCode::kCorrupt);
  std::string missing = good;
  missing.replace(missing.find("model.norm.weight"), 17, "model.gone.weight");
  const Status gone = open_with(missing);
  EXPECT_EQ(gone.code(), StatusCode::kNotFound);
  EXPECT_NE(gone.message().find("model.norm.weight"), std::string::npos) << gone.message();
  ASSERT_TRUE(open_with(good).ok());  // the good config back, for the truncation below
  fs::resize_file(out_dir.file("weights.bin"), 5000);
  const Status truncated = Checkpoint::Open(out_dir.path()).status();
  EXPECT_EQ(truncated.code(), StatusCode::kCorrupt);
  EXPECT_NE(truncated.message().find("weights.bin"), std::string::npos) << truncated.message();
}

// A GGUF source (the default model, Q4_1): q/k rows are un-permuted into HF order, the
// tokenizer and chat template come from its metadata, and an f32 engine runs bitwise like it.
TEST(EngineWriterModelTest, DefaultGgufModelRunsBitwiseLikeItsEngine) {
  const char* model = std::getenv("KILN_DEFAULT_MODEL");
  if (model == nullptr) GTEST_SKIP() << "KILN_DEFAULT_MODEL is not set (scripts/test sets it)";
  ScopedTempDir out_dir("engine_gguf");
  const Checkpoint src = Open(model);
  EngineBuildOptions o;
  o.out_dir = out_dir.path();
  o.dtype = DType::kF32;
  ASSERT_TRUE(WriteEngine(src, nullptr, o).ok());
  const Checkpoint engine = Open(out_dir.path());
  EXPECT_EQ(engine.qk_rope_layout(), QkRopeLayout::kHalfSplit);
  EXPECT_EQ(src.qk_rope_layout(), QkRopeLayout::kInterleaved);
  auto tok_src = LoadTokenizer(model), tok_engine = LoadTokenizer(out_dir.path());
  ASSERT_TRUE(tok_src.ok() && tok_engine.ok()) << tok_engine.status().ToString();
  const std::string text = "The printing press spread across Europe within fifty years.";
  const std::vector<int32_t> ids = tok_src->tokenizer->Encode(text, true, true);
  EXPECT_EQ(ids, tok_engine->tokenizer->Encode(text, true, true));
  ASSERT_TRUE(tok_engine->chat_template.has_value());
  ExpectBitwiseEqual(PromptLogprobs(src, {}, ids), PromptLogprobs(engine, {}, ids));
}

}  // namespace
}  // namespace kiln
