// Test support (not part of kiln_tokenizer): fills GgufTokenizerFields from a GGUF file with
// kiln_model's reader. The tokenizer library may not link kiln_model; tests may.
#pragma once

#include <string>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace kiln {

// Reads the tokenizer.ggml.* keys of the GGUF file at `path`; absent optional keys keep their
// defaults. Errors: those of GgufFile::Open and of a key of the wrong type.
Result<GgufTokenizerFields> ReadGgufTokenizerFields(const std::string& path);

}  // namespace kiln
