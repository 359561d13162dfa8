// Pre-quantized FP8 checkpoints (model/fp8_checkpoint.h): the three producers' layouts open with
// their scales attached, and every malformed variant fails naming the file and the tensor.
#include "model/fp8_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/test_util.h"
#include "model/weights.h"

namespace kiln {
namespace {

using nlohmann::json;
using testing::MakeTempDir;
using testing::MakeTensor;
using testing::SafetensorsBytes;
using testing::TestTensor;
using testing::TinyLlamaConfig;
using testing::WriteFile;

namespace fs = std::filesystem;

// Every checkpoint directory a test wrote, removed at its end.
class Fp8Checkpoint : public ::testing::Test {
 protected:
  void TearDown() override {
    std::error_code ec;
    for (const std::string& dir : Dirs()) fs::remove_all(dir, ec);
    Dirs().clear();
  }

 public:
  static std::vector<std::string>& Dirs() {
    static std::vector<std::string> dirs;
    return dirs;
  }
};

bool IsLayerLinear(const std::string& name) {
  return name.starts_with("model.layers.") && name.ends_with("_proj.weight");
}

TestTensor F32Tensor(const std::string& name, std::vector<int64_t> shape,
                     const std::vector<float>& values) {
  TestTensor t{name, "F32", std::move(shape), std::string(values.size() * 4, '\0')};
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// A tiny checkpoint whose layer linear weights are e4m3 (small finite codes) with scales:
// per channel ([rows, 1], scale of row r = 0.01 * (r + 1)) or per tensor ([], 0.05). `edit`
// changes the tensor list before it is written.
struct Fp8Options {
  json quantization_config = json::parse(testing::CompressedTensorsFp8Config());
  bool per_channel = true;
  bool input_scales = false;
  std::string kv_scale_style;  // "", "compressed-tensors", "modelopt"
  std::function<void(std::vector<TestTensor>*)> edit;
};

std::string WriteFp8Checkpoint(const Fp8Options& o) {
  const std::string dir = MakeTempDir("fp8_ckpt");
  Fp8Checkpoint::Dirs().push_back(dir);
  const ModelConfig c = TinyLlamaConfig();
  json config = json::parse(ToHfConfigJson(c));
  if (!o.quantization_config.is_null()) config["quantization_config"] = o.quantization_config;
  WriteFile(dir + "/config.json", config.dump(2));
  std::vector<TestTensor> tensors;
  uint32_t seed = 1;
  for (const WeightSpec& spec : ExpectedWeights(c)) {
    if (!IsLayerLinear(spec.name)) {
      tensors.push_back(MakeTensor(spec.name, DType::kBF16, spec.shape, seed++));
      continue;
    }
    // Codes below 0x3f: small positive normals, no NaN.
    tensors.push_back(MakeTensor(spec.name, DType::kF8E4M3, spec.shape, seed++));
    const std::string prefix = spec.name.substr(0, spec.name.size() - 7);
    const int64_t rows = spec.shape[0];
    if (o.per_channel) {
      std::vector<float> s(rows);
      for (int64_t r = 0; r < rows; ++r) s[r] = 0.01f * static_cast<float>(r + 1);
      tensors.push_back(F32Tensor(prefix + ".weight_scale", {rows, 1}, s));
    } else {
      tensors.push_back(F32Tensor(prefix + ".weight_scale", {}, {0.05f}));
    }
    if (o.input_scales) tensors.push_back(F32Tensor(prefix + ".input_scale", {}, {0.02f}));
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    const float k = 0.5f + l, v = 0.25f + l;
    if (o.kv_scale_style == "compressed-tensors") {
      tensors.push_back(F32Tensor(p + "k_scale", {}, {k}));
      tensors.push_back(F32Tensor(p + "v_scale", {}, {v}));
    } else if (o.kv_scale_style == "modelopt") {
      tensors.push_back(F32Tensor(p + "k_proj.k_scale", {}, {k}));
      tensors.push_back(F32Tensor(p + "v_proj.v_scale", {}, {v}));
    }
  }
  if (o.edit) o.edit(&tensors);
  WriteFile(dir + "/model.safetensors", SafetensorsBytes(tensors));
  return dir;
}

void Remove(std::vector<TestTensor>* tensors, const std::string& name) {
  std::erase_if(*tensors, [&](const TestTensor& t) { return t.name == name; });
}

TestTensor* FindTensor(std::vector<TestTensor>* tensors, const std::string& name) {
  for (TestTensor& t : *tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST_F(Fp8Checkpoint, CompressedTensorsPerChannelWithKvScales) {
  Fp8Options o;
  o.kv_scale_style = "compressed-tensors";
  auto ckpt = Checkpoint::Open(WriteFp8Checkpoint(o));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const CheckpointQuantization& q = ckpt->quantization();
  EXPECT_EQ(q.method, QuantMethod::kFp8);
  EXPECT_EQ(q.format, "compressed-tensors");
  EXPECT_TRUE(q.config_file.ends_with("config.json"));
  EXPECT_TRUE(q.per_channel);
  EXPECT_FALSE(q.static_activations);
  int fp8 = 0;
  for (const Weight& w : ckpt->weights()) {
    if (!IsLayerLinear(w.name)) {
      EXPECT_TRUE(w.row_scales.empty()) << w.name;
      continue;
    }
    ++fp8;
    EXPECT_EQ(w.dtype, DType::kF8E4M3);
    ASSERT_EQ(w.row_scales.size(), static_cast<size_t>(w.shape[0])) << w.name;
    for (int64_t r = 0; r < w.shape[0]; ++r) {
      EXPECT_EQ(w.row_scales[r], 0.01f * static_cast<float>(r + 1));
    }
  }
  EXPECT_EQ(fp8, 2 * 7);
  ASSERT_EQ(ckpt->kv_cache_scales().size(), 2u);
  EXPECT_EQ(ckpt->kv_cache_scales()[1].k_scale, 1.5f);
  EXPECT_EQ(ckpt->kv_cache_scales()[1].v_scale, 1.25f);
}

TEST_F(Fp8Checkpoint, ModelOptPerTensorWithInputScalesFromHfQuantConfig) {
  Fp8Options o;
  o.quantization_config = nullptr;
  o.per_channel = false;
  o.input_scales = true;
  o.kv_scale_style = "modelopt";
  const std::string dir = WriteFp8Checkpoint(o);
  WriteFile(dir + "/hf_quant_config.json",
            R"({"producer": {"name": "modelopt", "version": "0.19.0"},
                "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                                 "exclude_modules": ["lm_head"]}})");
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->quantization().format, "modelopt");
  EXPECT_TRUE(ckpt->quantization().config_file.ends_with("hf_quant_config.json"));
  EXPECT_FALSE(ckpt->quantization().per_channel);
  EXPECT_TRUE(ckpt->quantization().static_activations);
  const Weight* down = ckpt->Find("model.layers.1.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->row_scales, std::vector<float>(64, 0.05f));  // broadcast to every row
  EXPECT_EQ(down->input_scale, 0.02f);                         // the static activation scale, used
  EXPECT_EQ(ckpt->Find("model.layers.0.self_attn.k_proj.weight")->input_scale, 0.02f);
  EXPECT_EQ(ckpt->Find("model.embed_tokens.weight")->input_scale, 0.0f);
  ASSERT_EQ(ckpt->kv_cache_scales().size(), 2u);
  EXPECT_EQ(ckpt->kv_cache_scales()[0].k_scale, 0.5f);
}

TEST_F(Fp8Checkpoint, Fp8MethodWithBf16ScalesAndModelOptInConfigJson) {
  Fp8Options o;
  o.quantization_config = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
  o.per_channel = false;
  o.edit = [](std::vector<TestTensor>* tensors) {  // one scale stored as bf16 [1]
    TestTensor* s = FindTensor(tensors, "model.layers.0.self_attn.o_proj.weight_scale");
    *s = MakeTensor(s->name, DType::kBF16, Shape{1}, 0);
    const uint16_t quarter = F32ToBF16(0.25f);
    s->data.assign(reinterpret_cast<const char*>(&quarter), 2);
  };
  auto ckpt = Checkpoint::Open(WriteFp8Checkpoint(o));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ(ckpt->quantization().format, "fp8");
  EXPECT_EQ(ckpt->Find("model.layers.0.self_attn.o_proj.weight")->row_scales[63], 0.25f);
  EXPECT_TRUE(ckpt->kv_cache_scales().empty());

  o.quantization_config = {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}};
  auto modelopt = Checkpoint::Open(WriteFp8Checkpoint(o));
  ASSERT_TRUE(modelopt.ok()) << modelopt.status().ToString();
  EXPECT_EQ(modelopt->quantization().format, "modelopt");
}

// Opening fails with `code` and a message holding every needle.
void ExpectOpenFails(const Fp8Options& o, StatusCode code, std::vector<std::string> needles) {
  auto ckpt = Checkpoint::Open(WriteFp8Checkpoint(o));
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), code) << ckpt.status().ToString();
  for (const std::string& n : needles) {
    EXPECT_NE(ckpt.status().message().find(n), std::string::npos)
        << "'" << n << "' not in: " << ckpt.status().message();
  }
}

TEST_F(Fp8Checkpoint, MalformedScalesNameTheFileAndTensor) {
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  Fp8Options o;
  o.edit = [&](std::vector<TestTensor>* t) {
    Remove(t, "model.layers.1.self_attn.q_proj.weight_scale");
  };
  ExpectOpenFails(o, StatusCode::kNotFound, {"model.safetensors", q, "weight_scale' is missing"});

  o.edit = [](std::vector<TestTensor>* t) {
    *FindTensor(t, "model.layers.0.mlp.up_proj.weight_scale") =
        F32Tensor("model.layers.0.mlp.up_proj.weight_scale", {97, 1}, std::vector<float>(97, 1));
  };
  ExpectOpenFails(o, StatusCode::kCorrupt,
                  {"model.safetensors", "up_proj.weight_scale", "[97, 1]", "[96, 1]"});

  o.edit = [](std::vector<TestTensor>* t) {
    FindTensor(t, "model.layers.0.mlp.gate_proj.weight_scale")->dtype = "I32";
  };
  ExpectOpenFails(o, StatusCode::kCorrupt, {"gate_proj.weight_scale", "i32", "f32, bf16 or f16"});

  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    o.edit = [bad](std::vector<TestTensor>* t) {
      TestTensor* s = FindTensor(t, "model.layers.1.mlp.down_proj.weight_scale");
      std::memcpy(s->data.data() + 4 * 5, &bad, 4);
    };
    ExpectOpenFails(o, StatusCode::kCorrupt,
                    {"down_proj.weight_scale", "element 5", "finite and positive"});
  }

  o.edit = [](std::vector<TestTensor>* t) {
    t->push_back(F32Tensor("model.norm.weight_scale", {}, {1.0f}));
  };
  ExpectOpenFails(o, StatusCode::kCorrupt, {"model.norm.weight_scale", "not F8_E4M3"});

  o.edit = [](std::vector<TestTensor>* t) {
    t->push_back(F32Tensor("model.layers.1.mlp.up_proj.input_scale", {2}, {1.0f, 1.0f}));
  };
  ExpectOpenFails(o, StatusCode::kCorrupt, {"up_proj.input_scale", "[2]"});

  o.kv_scale_style = "compressed-tensors";
  o.edit = [](std::vector<TestTensor>* t) { Remove(t, "model.layers.1.self_attn.v_scale"); };
  ExpectOpenFails(o, StatusCode::kCorrupt, {"model.layers.1.self_attn.k_scale", "no V"});
  o.edit = [](std::vector<TestTensor>* t) {
    Remove(t, "model.layers.1.self_attn.k_scale");
    Remove(t, "model.layers.1.self_attn.v_scale");
  };
  ExpectOpenFails(o, StatusCode::kCorrupt, {"1 of 2 layers"});
}

TEST_F(Fp8Checkpoint, UnsupportedDeclarationsSayWhat) {
  Fp8Options o;
  o.quantization_config = nullptr;
  ExpectOpenFails(o, StatusCode::kUnsupported,
                  {"q_proj.weight", "F8_E4M3", "declares no FP8 quantization_config"});

  o.quantization_config = {{"quant_method", "bitsandbytes"}, {"bits", 4}};
  ExpectOpenFails(o, StatusCode::kUnsupported, {"config.json", "'bitsandbytes'", "kiln build"});

  o.quantization_config = {{"quant_method", "awq"}, {"bits", 3}, {"group_size", 128}};
  ExpectOpenFails(o, StatusCode::kUnsupported, {"config.json", "3 bits"});

  o.quantization_config = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  ExpectOpenFails(o, StatusCode::kUnsupported, {"weight_block_size"});

  o.quantization_config = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}};
  ExpectOpenFails(o, StatusCode::kUnsupported, {"'NVFP4'"});

  Fp8Options group;
  group.quantization_config["config_groups"]["group_0"]["weights"]["strategy"] = "group";
  ExpectOpenFails(group, StatusCode::kUnsupported,
                  {"config_groups.group_0.weights", "strategy 'group'"});
  Fp8Options int8;
  int8.quantization_config["config_groups"]["group_0"]["weights"]["type"] = "int";
  ExpectOpenFails(int8, StatusCode::kUnsupported, {"type 'int'", "FP8"});
  Fp8Options packed;
  packed.quantization_config["format"] = "pack-quantized";
  ExpectOpenFails(packed, StatusCode::kUnsupported, {"'pack-quantized'"});
}

}  // namespace
}  // namespace kiln
