// VocabFromTokenizerJson: a HF tokenizer.json -> TokenizerVocab.
#include <nlohmann/json.hpp>

#include <string>
#include <unordered_map>
#include <utility>

#include "tokenizer/vocab.h"

namespace kiln {
namespace {

using Json = nlohmann::json;

constexpr char kByteLevelRegex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr char kSpace[] = "\xE2\x96\x81";  // "▁"

std::string QuoteRegex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

struct JsonReader {
  std::string source;
  TokenizerVocab* v;
  bool byte_level = false;
  bool metaspace = false;
  bool prepend_space = false;
  bool normalize_nfc = false;

  Status Fail(const std::string& what) const {
    return Unsupported(source + ": " + what + " is not supported");
  }

  Status PreTokenizer(const Json& p) {
    if (p.is_null()) return Status::Ok();
    std::string type = p.value("type", "");
    if (type == "Sequence") {
      for (const Json& q : p.at("pretokenizers")) KILN_RETURN_IF_ERROR(PreTokenizer(q));
    } else if (type == "ByteLevel") {
      byte_level = true;
      if (p.value("add_prefix_space", false)) return Fail("ByteLevel add_prefix_space=true");
      if (p.value("use_regex", true)) v->pre.regexes.push_back(kByteLevelRegex);
    } else if (type == "Split") {
      if (p.value("invert", false)) return Fail("Split with invert=true");
      std::string behavior = p.value("behavior", "");
      if (behavior != "Isolated") return Fail("Split behavior \"" + behavior + "\"");
      const Json& pat = p.at("pattern");
      if (pat.contains("Regex")) {
        v->pre.regexes.push_back(pat.at("Regex").get<std::string>());
      } else {
        v->pre.regexes.push_back(QuoteRegex(pat.at("String").get<std::string>()));
      }
    } else if (type == "Digits") {
      v->pre.regexes.push_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    } else if (type == "Punctuation") {
      std::string behavior = p.value("behavior", "Isolated");
      const char* cls = R"([\p{P}!-/:-@\[-`{-~])";
      if (behavior == "Isolated") {
        v->pre.regexes.push_back(cls);
      } else if (behavior == "Contiguous") {
        v->pre.regexes.push_back(std::string(cls) + "+");
      } else {
        return Fail("Punctuation behavior \"" + behavior + "\"");
      }
    } else if (type == "Metaspace") {
      metaspace = true;
      prepend_space =
          p.value("prepend_scheme", "always") != "never" && p.value("add_prefix_space", true);
      if (p.value("split", false)) return Fail("Metaspace split=true");
    } else {
      return Fail("pre_tokenizer \"" + type + "\"");
    }
    return Status::Ok();
  }

  Status Normalizer(const Json& n) {
    if (n.is_null()) return Status::Ok();
    std::string type = n.value("type", "");
    if (type == "Sequence") {
      for (const Json& q : n.at("normalizers")) KILN_RETURN_IF_ERROR(Normalizer(q));
    } else if (type == "Prepend" && n.value("prepend", "") == kSpace) {
      prepend_space = true;
    } else if (type == "Replace" && n.at("pattern").value("String", "") == " " &&
               n.value("content", "") == kSpace) {
      metaspace = true;
    } else if (type == "NFC") {
      normalize_nfc = true;
    } else {
      return Fail("normalizer \"" + type + "\"");
    }
    return Status::Ok();
  }

  Status PostProcessor(const Json& p, const std::unordered_map<std::string, int32_t>& ids) {
    if (p.is_null()) return Status::Ok();
    std::string type = p.value("type", "");
    if (type == "Sequence") {
      for (const Json& q : p.at("processors")) KILN_RETURN_IF_ERROR(PostProcessor(q, ids));
    } else if (type == "TemplateProcessing") {
      bool seen_a = false;
      for (const Json& item : p.at("single")) {
        if (item.contains("Sequence")) {
          seen_a = true;
          continue;
        }
        std::string name = item.at("SpecialToken").at("id").get<std::string>();
        auto it = ids.find(name);
        if (it == ids.end()) return Corrupt(source + ": post_processor names unknown " + name);
        if (seen_a) {
          v->add_eos = true;
          v->eos_id = it->second;
        } else {
          v->add_bos = true;
          v->bos_id = it->second;
        }
      }
    } else if (type != "ByteLevel") {
      return Fail("post_processor \"" + type + "\"");
    }
    return Status::Ok();
  }
};

}  // namespace

Result<TokenizerVocab> VocabFromTokenizerJson(std::string_view text, std::string_view source) {
  const std::string src(source);
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(src + ": not a JSON object");
  TokenizerVocab v;
  JsonReader r{src, &v};
  try {
    const Json& model = j.at("model");
    if (model.value("type", "BPE") != "BPE") {
      return r.Fail("model type \"" + model.value("type", "") + "\"");
    }
    std::unordered_map<std::string, int32_t> ids;
    for (const auto& [tok, id] : model.at("vocab").items()) {
      int64_t i = id.get<int64_t>();
      if (i < 0 || i > (1 << 24)) return Corrupt(src + ": vocab id " + std::to_string(i));
      if (static_cast<size_t>(i) >= v.tokens.size()) v.tokens.resize(i + 1);
      v.tokens[i] = tok;
      ids[tok] = static_cast<int32_t>(i);
    }
    v.types.assign(v.tokens.size(), TokenType::kNormal);
    for (const Json& m : model.value("merges", Json::array())) {
      if (m.is_string()) {
        std::string s = m.get<std::string>();
        size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return Corrupt(src + ": merge \"" + s + "\"");
        v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        v.merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
      }
    }
    v.byte_fallback = model.value("byte_fallback", false);
    v.pre.ignore_merges = model.value("ignore_merges", false);
    if (model.contains("unk_token") && model.at("unk_token").is_string()) {
      auto it = ids.find(model.at("unk_token").get<std::string>());
      if (it != ids.end()) v.unk_id = it->second;
    }
    for (const Json& a : j.value("added_tokens", Json::array())) {
      int64_t i = a.at("id").get<int64_t>();
      if (i < 0 || i > (1 << 24)) return Corrupt(src + ": added token id " + std::to_string(i));
      if (static_cast<size_t>(i) >= v.tokens.size()) {
        v.tokens.resize(i + 1);
        v.types.resize(i + 1, TokenType::kUnused);
      }
      std::string content = a.at("content").get<std::string>();
      v.tokens[i] = content;
      v.types[i] = a.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
      ids[content] = static_cast<int32_t>(i);
    }
    KILN_RETURN_IF_ERROR(r.Normalizer(j.value("normalizer", Json())));
    KILN_RETURN_IF_ERROR(r.PreTokenizer(j.value("pre_tokenizer", Json())));
    KILN_RETURN_IF_ERROR(r.PostProcessor(j.value("post_processor", Json()), ids));
    if (j.value("decoder", Json()).is_object() &&
        j.at("decoder").value("type", "") == "ByteLevel") {
      r.byte_level = true;
    }
  } catch (const Json::exception& e) {
    return Corrupt(src + ": unexpected tokenizer.json structure: " + e.what());
  }
  v.normalize_nfc = r.normalize_nfc;
  if (r.byte_level) {
    v.model = TokenizerModel::kByteLevelBpe;
    v.pre.name = "tokenizer.json";
  } else if (r.metaspace) {
    v.model = TokenizerModel::kSentencePieceBpe;
    v.add_space_prefix = r.prepend_space;
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const std::string& t = v.tokens[i];
      if (v.types[i] == TokenType::kNormal && t.size() == 6 && t.rfind("<0x", 0) == 0 &&
          t.back() == '>') {
        v.types[i] = TokenType::kByte;
      }
    }
  } else {
    return r.Fail("a BPE tokenizer that is neither byte-level nor SentencePiece-style");
  }
  if (v.unk_id >= 0 && v.types[v.unk_id] == TokenType::kNormal)
    v.types[v.unk_id] = TokenType::kUnknown;
  return v;
}

}  // namespace kiln
