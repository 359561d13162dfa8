#include "builder/synth_tokenizer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

namespace kiln {
namespace {

using nlohmann::json;

constexpr int kLlama3FirstSpecial = 128000;
constexpr int kLlama3NumSpecial = 256;

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// GPT-2's bytes_to_unicode, in its order: the printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ')
// stand for themselves, the other 68 bytes map to U+0100.. in byte order.
std::vector<std::string> ByteSymbols() {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  };
  std::vector<std::string> symbols;
  symbols.reserve(256);
  for (int b = 0; b < 256; ++b) {
    if (printable(b)) symbols.push_back(Utf8(static_cast<uint32_t>(b)));
  }
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    if (!printable(b)) symbols.push_back(Utf8(next++));
  }
  return symbols;
}

std::map<int, std::string> Llama3Specials() {
  std::map<int, std::string> s;
  const char* named[] = {"<|begin_of_text|>",
                         "<|end_of_text|>",
                         "<|reserved_special_token_0|>",
                         "<|reserved_special_token_1|>",
                         "<|finetune_right_pad_id|>",
                         "<|reserved_special_token_2|>",
                         "<|start_header_id|>",
                         "<|end_header_id|>",
                         "<|eom_id|>",
                         "<|eot_id|>",
                         "<|python_tag|>"};
  int id = kLlama3FirstSpecial;
  for (const char* n : named) s[id++] = n;
  for (int k = 3; id < kLlama3FirstSpecial + kLlama3NumSpecial; ++k) {
    s[id++] = "<|reserved_special_token_" + std::to_string(k) + "|>";
  }
  return s;
}

// ChatML-style specials for any other vocabulary (see the header).
std::map<int, std::string> ChatMlSpecials(const ModelConfig& c) {
  std::map<int, std::string> s;
  const std::vector<int>& eos = c.eos_token_ids;
  if (c.bos_token_id) {
    const bool shared = std::find(eos.begin(), eos.end(), *c.bos_token_id) != eos.end();
    s[*c.bos_token_id] = (shared || c.family == ModelFamily::kQwen2) ? "<|endoftext|>" : "<s>";
  }
  for (size_t k = 0; k < eos.size(); ++k) {
    if (s.count(eos[k])) continue;
    s[eos[k]] = k == 0 ? "<|im_end|>" : "<|eos_" + std::to_string(k) + "|>";
  }
  // The chat tokens still missing go to the lowest free ids above bos, then below it.
  const int start = c.bos_token_id ? *c.bos_token_id + 1 : 0;
  for (const char* chat : {"<|im_start|>", "<|im_end|>"}) {
    bool present = false;
    for (const auto& [id, content] : s) present = present || content == chat;
    if (present) continue;
    for (int i = 0; i < c.vocab_size; ++i) {
      const int id = (start + i) % c.vocab_size;
      if (!s.count(id)) {
        s[id] = chat;
        break;
      }
    }
  }
  return s;
}

// Appends `s` as a JSON string literal.
void AppendJsonString(std::string* out, const std::string& s) { *out += json(s).dump(); }

json AddedTokenJson(const std::string& content) {
  return {{"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},    {"normalized", false},  {"special", true}};
}

constexpr char kChatMlTemplate[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

constexpr char kLlama3Template[] =
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}";

}  // namespace

Result<SyntheticTokenizer> BuildSyntheticTokenizer(const ModelConfig& c) {
  const bool is_llama3 = c.bos_token_id == kLlama3FirstSpecial &&
                         c.vocab_size >= kLlama3FirstSpecial + kLlama3NumSpecial;
  std::map<int, std::string> specials = is_llama3 ? Llama3Specials() : ChatMlSpecials(c);
  // An eos id that the scheme above left as a regular id (a Llama 3 vocabulary with custom eos
  // ids) still becomes a special token.
  for (size_t k = 0; k < c.eos_token_ids.size(); ++k) {
    specials.try_emplace(c.eos_token_ids[k], "<|eos_" + std::to_string(k) + "|>");
  }
  const int64_t num_regular = int64_t{c.vocab_size} - static_cast<int64_t>(specials.size());
  if (num_regular < 256) {
    return InvalidArgument("vocab_size " + std::to_string(c.vocab_size) +
                           " is too small for a byte-level tokenizer: it needs 256 byte tokens "
                           "plus " +
                           std::to_string(specials.size()) + " special tokens");
  }

  SyntheticTokenizer t;
  t.tokens.resize(c.vocab_size);
  t.is_special.assign(c.vocab_size, false);
  for (const auto& [id, content] : specials) {
    t.tokens[id] = content;
    t.is_special[id] = true;
  }
  std::vector<int> regular_ids;  // the ids left for byte symbols and merges, ascending
  regular_ids.reserve(num_regular);
  for (int id = 0; id < c.vocab_size; ++id) {
    if (!t.is_special[id]) regular_ids.push_back(id);
  }

  const std::vector<std::string> bytes = ByteSymbols();
  for (int i = 0; i < 256; ++i) t.tokens[regular_ids[i]] = bytes[i];
  // The token id of a byte symbol.
  auto symbol_id = [&](std::string_view symbol) {
    const auto it = std::find(bytes.begin(), bytes.end(), symbol);
    CHECK(it != bytes.end()) << "no byte symbol " << symbol;
    return regular_ids[it - bytes.begin()];
  };
  std::vector<int> roots = {symbol_id("\xc4\xa0")};  // U+0120 'Ġ', the space byte
  std::vector<int> letters;
  for (char ch = 'a'; ch <= 'z'; ++ch) letters.push_back(symbol_id(std::string(1, ch)));
  for (int l : letters) roots.push_back(l);
  for (char ch = 'A'; ch <= 'Z'; ++ch) roots.push_back(symbol_id(std::string(1, ch)));

  const size_t num_merges = regular_ids.size() - 256;
  t.merges.reserve(num_merges);
  size_t next = 256;  // index into regular_ids of the next merge result
  auto add_merge = [&](int left, int right) {
    const int result = regular_ids[next++];
    t.tokens[result] = t.tokens[left] + t.tokens[right];
    t.merges.push_back({left, right, result});
  };
  for (size_t r = 0; r < roots.size() && next < regular_ids.size(); ++r) {
    for (size_t l = 0; l < letters.size() && next < regular_ids.size(); ++l) {
      add_merge(roots[r], letters[l]);
    }
  }
  // Breadth first: extend every merge result, in rank order, by each letter.
  for (size_t m = 0; next < regular_ids.size(); ++m) {
    const int base = t.merges[m].result;
    for (size_t l = 0; l < letters.size() && next < regular_ids.size(); ++l) {
      add_merge(base, letters[l]);
    }
  }

  t.bos_id = c.bos_token_id;
  t.eos_ids = c.eos_token_ids;
  if (t.bos_id) t.bos_token = t.tokens[*t.bos_id];
  const std::string end_of_turn = is_llama3 ? "<|eot_id|>" : "<|im_end|>";
  for (int id : t.eos_ids) {
    if (t.tokens[id] == end_of_turn) t.eos_token = end_of_turn;
  }
  if (t.eos_token.empty() && !t.eos_ids.empty()) t.eos_token = t.tokens[t.eos_ids[0]];
  t.add_bos_token = t.bos_id.has_value() && c.family != ModelFamily::kQwen2;
  t.chat_template = is_llama3 ? kLlama3Template : kChatMlTemplate;
  return t;
}

std::string TokenizerJson(const SyntheticTokenizer& t) {
  json added = json::array();
  for (size_t id = 0; id < t.tokens.size(); ++id) {
    if (!t.is_special[id]) continue;
    json a = AddedTokenJson(t.tokens[id]);
    a["id"] = id;
    added.push_back(std::move(a));
  }
  json post_processor = nullptr;
  if (t.add_bos_token) {
    const json bos = {{"SpecialToken", {{"id", t.bos_token}, {"type_id", 0}}}};
    const json bos1 = {{"SpecialToken", {{"id", t.bos_token}, {"type_id", 1}}}};
    post_processor = {
        {"type", "TemplateProcessing"},
        {"single", {bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {bos,
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          bos1,
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{t.bos_token, {{"id", t.bos_token}, {"ids", {*t.bos_id}}, {"tokens", {t.bos_token}}}}}}};
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};

  // The vocab and merges are written by hand: nlohmann's objects sort or linearly search their
  // keys, and these hold up to ~150k entries.
  std::string out;
  out.reserve(t.tokens.size() * 40);
  out += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  out += "  \"added_tokens\": " + added.dump() + ",\n";
  out += "  \"normalizer\": null,\n";
  out += "  \"pre_tokenizer\": " + byte_level.dump() + ",\n";
  out += "  \"post_processor\": " + post_processor.dump() + ",\n";
  out += "  \"decoder\": " + byte_level.dump() + ",\n";
  out +=
      "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n";
  out += "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  out += "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n";
  out += "    \"ignore_merges\": false,\n    \"vocab\": {";
  for (size_t id = 0; id < t.tokens.size(); ++id) {
    out += id == 0 ? "\n      " : ",\n      ";
    AppendJsonString(&out, t.tokens[id]);
    out += ": " + std::to_string(id);
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t m = 0; m < t.merges.size(); ++m) {
    out += m == 0 ? "\n      " : ",\n      ";
    // "left right": byte-level symbols never contain a space, so the split is unambiguous.
    AppendJsonString(&out, t.tokens[t.merges[m].left] + " " + t.tokens[t.merges[m].right]);
  }
  out += "\n    ]\n  }\n}\n";
  return out;
}

std::string TokenizerConfigJson(const SyntheticTokenizer& t, int64_t model_max_length) {
  json decoder = json::object();
  for (size_t id = 0; id < t.tokens.size(); ++id) {
    if (t.is_special[id]) decoder[std::to_string(id)] = AddedTokenJson(t.tokens[id]);
  }
  json j;
  j["add_bos_token"] = t.add_bos_token;
  j["add_eos_token"] = false;
  j["added_tokens_decoder"] = std::move(decoder);
  j["bos_token"] = t.bos_token.empty() ? json(nullptr) : json(t.bos_token);
  j["eos_token"] = t.eos_token.empty() ? json(nullptr) : json(t.eos_token);
  j["pad_token"] = nullptr;
  j["chat_template"] = t.chat_template;
  j["clean_up_tokenization_spaces"] = false;
  j["model_input_names"] = {"input_ids", "attention_mask"};
  j["model_max_length"] = model_max_length;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  return j.dump(2) + "\n";
}

std::string SpecialTokensMapJson(const SyntheticTokenizer& t) {
  auto token = [](const std::string& content) {
    return json{{"content", content},
                {"lstrip", false},
                {"normalized", false},
                {"rstrip", false},
                {"single_word", false}};
  };
  json j = json::object();
  if (!t.bos_token.empty()) j["bos_token"] = token(t.bos_token);
  if (!t.eos_token.empty()) j["eos_token"] = token(t.eos_token);
  return j.dump(2) + "\n";
}

}  // namespace kiln
