#include "tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

namespace kiln {

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::~RegexSplitter() = default;

Result<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(
    const std::vector<std::string>& regexes) {
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  for (const std::string& re : regexes) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // NOTE: DOLLAR_ENDONLY makes `$` mean end of piece, as in the Rust/Oniguruma regexes HF uses.
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                      &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(error, msg, sizeof(msg));
      return InvalidArgument("pre-tokenizer regex \"" + re + "\" does not compile at offset " +
                             std::to_string(offset) + ": " + reinterpret_cast<const char*>(msg));
    }
    auto c = std::make_unique<Compiled>();
    c->code = code;
    c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    s->regexes_.push_back(std::move(c));
  }
  return s;
}

namespace {

// Length of the UTF-8 sequence starting with lead byte `b` (1 for invalid bytes).
size_t Utf8Len(unsigned char b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF8) return 4;
  return 1;
}

}  // namespace

void RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  pcre2_match_data* md = nullptr;
  for (const auto& re : regexes_) {
    if (md == nullptr) md = pcre2_match_data_create(1, nullptr);
    next.clear();
    for (std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0;      // where the next search starts
      size_t emitted = 0;  // end of what has been cut off already
      while (pos < piece.size()) {
        int rc = re->jit ? pcre2_jit_match(re->code, subject, piece.size(), pos, 0, md, nullptr)
                         : pcre2_match(re->code, subject, piece.size(), pos, 0, md, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (end == start) {  // empty match: cut nothing, step one character on
          pos = start + Utf8Len(static_cast<unsigned char>(piece[start]));
          continue;
        }
        if (start > emitted) next.push_back(piece.substr(emitted, start - emitted));
        next.push_back(piece.substr(start, end - start));
        emitted = pos = end;
      }
      if (emitted < piece.size()) next.push_back(piece.substr(emitted));
    }
    std::swap(current, next);
  }
  if (md != nullptr) pcre2_match_data_free(md);
  pieces->insert(pieces->end(), current.begin(), current.end());
}

}  // namespace kiln
