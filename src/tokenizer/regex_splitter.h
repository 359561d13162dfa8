// RegexSplitter: the regex stage of a byte-level BPE pre-tokenizer, on PCRE2 (UTF + UCP mode, so
// \p{L}, \p{N}, \s use the real Unicode tables; JIT compiled).
//
// Each regex is applied in turn to every piece the previous ones left; a piece is cut into its
// matches and the non-empty gaps between them, all kept, in order (HF `Split`, behavior
// "Isolated"). A regex sees one piece as its whole subject: `$` and lookaheads stop at the
// piece's end. Invalid UTF-8 never matches and stays in the gaps.
//
// Thread safety: Split is const and may run on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln {

class RegexSplitter {
 public:
  // Errors: kInvalidArgument naming the regex and PCRE2's message when one does not compile.
  static Result<std::unique_ptr<RegexSplitter>> Create(const std::vector<std::string>& regexes);
  ~RegexSplitter();

  // Appends the pieces of `text` (views into it, together covering it exactly) to *pieces.
  void Split(std::string_view text, std::vector<std::string_view>* pieces) const;

 private:
  struct Compiled;
  RegexSplitter() = default;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace kiln
