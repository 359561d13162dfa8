// AutoAWQ / GPTQ checkpoints written by a straightforward encoder here (the layouts of
// w4_checkpoint.h, packed word by word), opened, and every linear weight's W4A16 decoding
// checked against the values the encoder meant.
#include "model/w4_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "model/checkpoint.h"
#include "model/test_util.h"
#include "model/weights.h"

namespace kiln {
namespace {

using testing::TestTensor;

enum class Kind { kAwq, kGptqV1, kGptqV2, kGptqDescAct };

struct Linear {
  int64_t n = 0, k = 0;
  std::vector<int> q;         // [k, n] unsigned codes (input-major, as the files)
  std::vector<int> z;         // [groups, n]
  std::vector<float> s;       // [groups, n] (fp16-exact)
  std::vector<int32_t> gidx;  // [k]
};

TestTensor I32Tensor(const std::string& name, const std::vector<uint32_t>& v,
                     std::vector<int64_t> shape) {
  TestTensor t{name, "I32", std::move(shape), std::string(v.size() * 4, '\0')};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

class W4CheckpointTest : public ::testing::TestWithParam<Kind> {
 protected:
  static constexpr int kGroup = 32;

  Linear MakeLinear(int64_t n, int64_t k, std::mt19937& rng) {
    Linear l;
    l.n = n;
    l.k = k;
    const int64_t groups = k / kGroup;
    std::uniform_int_distribution<int> code(0, 15), zero(1, 15);
    std::uniform_real_distribution<float> scale(0.001f, 0.1f);
    for (int64_t i = 0; i < k * n; ++i) l.q.push_back(code(rng));
    for (int64_t i = 0; i < groups * n; ++i) {
      l.z.push_back(zero(rng));
      l.s.push_back(F16ToF32(F32ToF16(scale(rng))));
    }
    std::vector<int32_t> order(k);
    std::iota(order.begin(), order.end(), 0);
    if (GetParam() == Kind::kGptqDescAct) std::shuffle(order.begin(), order.end(), rng);
    l.gidx.resize(k);
    for (int64_t j = 0; j < k; ++j) l.gidx[order[j]] = static_cast<int32_t>(j / kGroup);
    return l;
  }

  void Encode(const std::string& prefix, const Linear& l, std::vector<TestTensor>* out) {
    const int64_t n = l.n, k = l.k, groups = k / kGroup;
    const bool awq = GetParam() == Kind::kAwq;
    const int offset = GetParam() == Kind::kGptqV2 ? 0 : (awq ? 0 : 1);
    static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    if (awq) {
      std::vector<uint32_t> qw(k * n / 8, 0), qz(groups * n / 8, 0);
      for (int64_t i = 0; i < k; ++i) {
        for (int64_t c = 0; c < n / 8; ++c) {
          for (int pos = 0; pos < 8; ++pos) {
            qw[i * (n / 8) + c] |= uint32_t(l.q[i * n + 8 * c + kOrder[pos]]) << (4 * pos);
          }
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t c = 0; c < n / 8; ++c) {
          for (int pos = 0; pos < 8; ++pos) {
            qz[g * (n / 8) + c] |= uint32_t(l.z[g * n + 8 * c + kOrder[pos]]) << (4 * pos);
          }
        }
      }
      out->push_back(I32Tensor(prefix + "qweight", qw, {k, n / 8}));
      out->push_back(I32Tensor(prefix + "qzeros", qz, {groups, n / 8}));
    } else {
      std::vector<uint32_t> qw(k / 8 * n, 0), qz(groups * n / 8, 0);
      for (int64_t i = 0; i < k; ++i) {
        for (int64_t o = 0; o < n; ++o)
          qw[(i / 8) * n + o] |= uint32_t(l.q[i * n + o]) << (4 * (i % 8));
      }
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t o = 0; o < n; ++o) {
          qz[g * (n / 8) + o / 8] |= uint32_t(l.z[g * n + o] - offset) << (4 * (o % 8));
        }
      }
      out->push_back(I32Tensor(prefix + "qweight", qw, {k / 8, n}));
      out->push_back(I32Tensor(prefix + "qzeros", qz, {groups, n / 8}));
      std::vector<uint32_t> g(l.gidx.begin(), l.gidx.end());
      out->push_back(I32Tensor(prefix + "g_idx", g, {k}));
    }
    TestTensor scales{prefix + "scales", "F16", {groups, n}, std::string(groups * n * 2, '\0')};
    for (int64_t i = 0; i < groups * n; ++i) {
      const uint16_t h = F32ToF16(l.s[i]);
      std::memcpy(scales.data.data() + 2 * i, &h, 2);
    }
    out->push_back(std::move(scales));
  }

  nlohmann::json QuantConfig() const {
    switch (GetParam()) {
      case Kind::kAwq:
        return {{"quant_method", "awq"},
                {"bits", 4},
                {"group_size", kGroup},
                {"version", "gemm"},
                {"zero_point", true}};
      case Kind::kGptqV2:
        return {{"quant_method", "gptq"},
                {"bits", 4},
                {"group_size", kGroup},
                {"checkpoint_format", "gptq_v2"}};
      case Kind::kGptqV1:
      case Kind::kGptqDescAct:
        return {{"quant_method", "gptq"},
                {"bits", 4},
                {"group_size", kGroup},
                {"desc_act", GetParam() == Kind::kGptqDescAct}};
    }
    return {};
  }

  // Writes the checkpoint; `edit` may change the tensors first.
  std::string Write(const std::string& stem,
                    const std::function<void(std::vector<TestTensor>*)>& edit = nullptr) {
    const std::string dir = testing::MakeTempDir(stem);
    ModelConfig config = testing::TinyLlamaConfig();
    config.tie_word_embeddings = tied_;
    std::vector<WeightSpec> specs = ExpectedWeights(config);
    if (tied_ && quantized_lm_head_) {  // GPTQModel's lm_head of a tied model
      specs.push_back({"lm_head.weight", Shape{config.vocab_size, config.hidden_size}, false});
    }
    std::mt19937 rng(17);
    std::vector<TestTensor> tensors;
    uint32_t seed = 1;
    for (const WeightSpec& spec : specs) {
      const bool linear = spec.name.find("_proj.weight") != std::string::npos ||
                          (quantized_lm_head_ && spec.name == "lm_head.weight");
      if (!linear) {
        tensors.push_back(testing::MakeTensor(spec.name, DType::kF16, spec.shape, seed++));
        continue;
      }
      Linear l = MakeLinear(spec.shape[0], spec.shape[1], rng);
      Encode(spec.name.substr(0, spec.name.size() - 6), l, &tensors);
      linears_[spec.name] = std::move(l);
    }
    if (edit) edit(&tensors);
    nlohmann::json cfg = nlohmann::json::parse(ToHfConfigJson(config));
    cfg["quantization_config"] = QuantConfig();
    testing::WriteFile(dir + "/config.json", cfg.dump());
    testing::WriteFile(dir + "/model.safetensors", testing::SafetensorsBytes(tensors));
    return dir;
  }

  // Every value of the opened checkpoint's `name` is the one the encoder meant.
  void ExpectEncodedValues(const Checkpoint& ckpt, const std::string& name, const Linear& l) {
    const Weight* w = ckpt.Find(name);
    ASSERT_NE(w, nullptr) << name;
    ASSERT_EQ(w->dtype, DType::kI4);
    ASSERT_TRUE(w->w4.has_value());
    const Weight::W4Params& p = *w->w4;
    EXPECT_EQ(p.group_size, kGroup);
    EXPECT_EQ(p.perm.empty(), GetParam() != Kind::kGptqDescAct) << name;
    const int64_t groups = l.k / kGroup;
    for (int64_t o = 0; o < l.n; ++o) {
      for (int64_t j = 0; j < l.k; ++j) {
        const int64_t e = o * l.k + j;
        const uint8_t byte = w->data[e / 2];
        const int code = e % 2 == 0 ? UnpackI4Low(byte) : UnpackI4High(byte);
        const int64_t g = o * groups + j / kGroup;
        const float got = static_cast<float>(code - p.zeros[g]) * F16ToF32(p.scales[g]);
        const int64_t i = p.perm.empty() ? j : p.perm[j];  // the input channel
        const int64_t gi = l.gidx[i];
        const float want =
            static_cast<float>(l.q[i * l.n + o] - l.z[gi * l.n + o]) * l.s[gi * l.n + o];
        ASSERT_EQ(got, want) << name << " out " << o << " in " << i;
      }
    }
  }

  std::map<std::string, Linear> linears_;
  bool tied_ = false;               // config.json's tie_word_embeddings
  bool quantized_lm_head_ = false;  // lm_head.qweight ... instead of lm_head.weight
};

TEST_P(W4CheckpointTest, OpensAsW4A16WithTheEncodedValues) {
  const std::string dir = Write("w4_checkpoint");
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->quantization().method, QuantMethod::kW4A16);
  ASSERT_EQ(linears_.size(), 14u);
  for (const auto& [name, l] : linears_) ExpectEncodedValues(*ckpt, name, l);
  EXPECT_EQ(ckpt->Find("lm_head.weight")->dtype, DType::kF16);
}

// A quantized lm_head (GPTQModel's lm_head.qweight ...) loads as a W4A16 tensor of its own; a
// tied model's config is untied for it, its embedding staying as stored.
TEST_P(W4CheckpointTest, QuantizedLmHeadLoadsAsItsOwnW4Tensor) {
  quantized_lm_head_ = true;
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    tied_ = tied;
    linears_.clear();
    auto ckpt = Checkpoint::Open(Write(tied ? "w4_head_tied" : "w4_head"));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_FALSE(ckpt->config().tie_word_embeddings);
    ASSERT_EQ(linears_.size(), 15u);
    ExpectEncodedValues(*ckpt, "lm_head.weight", linears_.at("lm_head.weight"));
    EXPECT_EQ(ckpt->Find("model.embed_tokens.weight")->dtype, DType::kF16);
  }
}

TEST_P(W4CheckpointTest, MissingPartsAndBadZerosSayWhich) {
  const std::string missing = Write("w4_missing", [](std::vector<TestTensor>* t) {
    std::erase_if(
        *t, [](const TestTensor& x) { return x.name == "model.layers.1.mlp.down_proj.qzeros"; });
  });
  auto opened = Checkpoint::Open(missing);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound);
  EXPECT_NE(opened.status().message().find("model.layers.1.mlp.down_proj.qzeros"),
            std::string::npos)
      << opened.status().ToString();
  if (GetParam() == Kind::kGptqV1) {
    // Stored zero 15 means z = 16 in GPTQ v1: outside W4A16's zero range.
    const std::string bad = Write("w4_bad_zero", [](std::vector<TestTensor>* t) {
      for (TestTensor& x : *t) {
        if (x.name == "model.layers.0.self_attn.o_proj.qzeros") x.data[0] = '\x0f';
      }
    });
    auto bad_open = Checkpoint::Open(bad);
    ASSERT_FALSE(bad_open.ok());
    EXPECT_NE(bad_open.status().message().find("o_proj.qzeros"), std::string::npos)
        << bad_open.status().ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, W4CheckpointTest,
                         ::testing::Values(Kind::kAwq, Kind::kGptqV1, Kind::kGptqV2,
                                           Kind::kGptqDescAct));

}  // namespace
}  // namespace kiln
