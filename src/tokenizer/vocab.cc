#include "tokenizer/vocab.h"

#include <string>
#include <unordered_map>
#include <utility>

namespace kiln {
namespace {

// The GPT-2 regex: contractions, letters, numbers, other symbols, trailing whitespace.
constexpr char kGpt2Regex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
// Llama 3 / Qwen2 style: case-insensitive contractions, a leading non-letter glued to letters,
// numbers in groups of `{1,3}` (Llama 3) or single digits (Qwen2), newlines kept together.
constexpr char kLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM's cased-letter class (from its tokenizer.json), as code point ranges.
constexpr char kDeepseekLlmLetters[] =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D})"
    R"(\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
    R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
constexpr char kCjk[] = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

}  // namespace

Result<PreTokenizer> PreTokenizerForGgufPre(std::string_view pre) {
  PreTokenizer p;
  p.name = std::string(pre);
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3" ||
      pre == "dbrx" || pre == "smaug-bpe" || pre == "chatglm-bpe" || pre == "pixtral") {
    p.regexes = {kLlama3Regex};
    p.ignore_merges = pre != "chatglm-bpe";
  } else if (pre == "qwen2" || pre == "stablelm2" || pre == "deepseek-r1-qwen" || pre == "megrez" ||
             pre == "hunyuan") {
    p.regexes = {kQwen2Regex};
  } else if (pre == "deepseek-llm") {
    p.regexes = {
        R"([\r\n])",
        kDeepseekLlmLetters,
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        R"(\s+$)",
        kCjk,
        R"(\p{N}+)"};
  } else if (pre == "deepseek-coder") {
    p.regexes = {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjk, R"(\p{N})"};
  } else if (pre == "falcon") {
    p.regexes = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Regex, R"([0-9][0-9][0-9])"};
  } else if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" ||
             pre == "codeshell" || pre == "exaone" || pre == "minerva-7b") {
    p.regexes = {R"(\p{N})", kGpt2Regex};
  } else if (pre == "gpt-2" || pre == "mpt" || pre == "olmo" || pre == "jais" || pre == "phi-2" ||
             pre == "jina-es" || pre == "jina-de" || pre == "gpt-neox" || pre == "trillion") {
    p.regexes = {kGpt2Regex};
  } else if (pre.empty() || pre == "default") {
    p.regexes = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Regex, R"(\p{N}+)", R"([0-9][0-9][0-9])"};
  } else {
    return Unsupported(
        "tokenizer.ggml.pre \"" + std::string(pre) +
        "\" is not a known pre-tokenizer (known: gpt-2, llama-bpe, qwen2, "
        "smollm, deepseek-llm, deepseek-coder, starcoder, refact, falcon, mpt, ...)");
  }
  return p;
}

Result<TokenizerVocab> VocabFromGgufMetadata(const GgufTokenizerFields& f) {
  TokenizerVocab v;
  const size_t n = f.tokens.size();
  if (n == 0) return Corrupt("tokenizer.ggml.tokens is missing or empty");
  bool default_add_bos = false;
  if (f.model == "gpt2") {
    v.model = TokenizerModel::kByteLevelBpe;
    KILN_ASSIGN_OR_RETURN(v.pre, PreTokenizerForGgufPre(f.pre));
  } else if (f.model == "llama") {
    v.model = TokenizerModel::kSentencePieceBpe;
    v.add_space_prefix = true;
    default_add_bos = true;
  } else {
    return Unsupported("tokenizer.ggml.model \"" + f.model +
                       "\" is not supported (supported: gpt2, llama)");
  }
  v.tokens = f.tokens;
  if (!f.scores.empty()) {
    if (f.scores.size() != n) return Corrupt("tokenizer.ggml.scores size differs from tokens");
    v.scores.assign(f.scores.begin(), f.scores.end());
  }
  v.types.assign(n, TokenType::kNormal);
  if (!f.token_type.empty()) {
    if (f.token_type.size() != n)
      return Corrupt("tokenizer.ggml.token_type size differs from tokens");
    for (size_t i = 0; i < n; ++i) {
      int64_t t = f.token_type[i];
      if (t < 0 || t > 6) {
        return Corrupt("tokenizer.ggml.token_type[" + std::to_string(i) +
                       "] = " + std::to_string(t) + " is not a token type (0..6)");
      }
      v.types[i] = static_cast<TokenType>(t);
    }
  }
  if (v.model == TokenizerModel::kByteLevelBpe) {
    if (f.merges.empty()) return Corrupt("tokenizer.ggml.merges is missing for a gpt2 tokenizer");
    std::unordered_map<std::string_view, int32_t> ids;
    for (size_t i = 0; i < n; ++i) ids.emplace(v.tokens[i], static_cast<int32_t>(i));
    v.merges.reserve(f.merges.size());
    for (size_t r = 0; r < f.merges.size(); ++r) {
      const std::string& m = f.merges[r];
      size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) {
        return Corrupt("tokenizer.ggml.merges[" + std::to_string(r) + "] = \"" + m +
                       "\" is not \"left right\"");
      }
      v.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  }
  auto check_id = [&](int64_t id, const char* key, int32_t* out) -> Status {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return Corrupt(std::string(key) + " = " + std::to_string(id) + " is outside the vocab of " +
                     std::to_string(n) + " tokens");
    }
    *out = static_cast<int32_t>(id);
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(check_id(f.bos_id, "tokenizer.ggml.bos_token_id", &v.bos_id));
  KILN_RETURN_IF_ERROR(check_id(f.eos_id, "tokenizer.ggml.eos_token_id", &v.eos_id));
  KILN_RETURN_IF_ERROR(check_id(f.unk_id, "tokenizer.ggml.unknown_token_id", &v.unk_id));
  KILN_RETURN_IF_ERROR(check_id(f.pad_id, "tokenizer.ggml.padding_token_id", &v.pad_id));
  v.add_bos = f.add_bos < 0 ? default_add_bos : f.add_bos == 1;
  v.add_eos = f.add_eos == 1;
  if (f.add_space_prefix >= 0) v.add_space_prefix = f.add_space_prefix == 1;
  if (v.add_bos && v.bos_id < 0) return Corrupt("add_bos_token is set but there is no bos token");
  if (v.add_eos && v.eos_id < 0) return Corrupt("add_eos_token is set but there is no eos token");
  return v;
}

}  // namespace kiln
