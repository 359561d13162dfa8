#include "tokenizer/gguf_fields_for_test.h"

#include "model/gguf.h"

namespace kiln {

Result<GgufTokenizerFields> ReadGgufTokenizerFields(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Open(path));
  GgufTokenizerFields f;
  KILN_ASSIGN_OR_RETURN(f.model, gguf.GetString("tokenizer.ggml.model"));
  if (gguf.Has("tokenizer.ggml.pre")) {
    KILN_ASSIGN_OR_RETURN(f.pre, gguf.GetString("tokenizer.ggml.pre"));
  }
  KILN_ASSIGN_OR_RETURN(f.tokens, gguf.GetStringArray("tokenizer.ggml.tokens"));
  if (gguf.Has("tokenizer.ggml.scores")) {
    KILN_ASSIGN_OR_RETURN(f.scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (gguf.Has("tokenizer.ggml.token_type")) {
    KILN_ASSIGN_OR_RETURN(f.token_type, gguf.GetIntArray("tokenizer.ggml.token_type"));
  }
  if (gguf.Has("tokenizer.ggml.merges")) {
    KILN_ASSIGN_OR_RETURN(f.merges, gguf.GetStringArray("tokenizer.ggml.merges"));
  }
  auto get_id = [&](const char* key, int64_t* out) -> Status {
    if (!gguf.Has(key)) return Status::Ok();
    KILN_ASSIGN_OR_RETURN(*out, gguf.GetInt(key));
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(get_id("tokenizer.ggml.bos_token_id", &f.bos_id));
  KILN_RETURN_IF_ERROR(get_id("tokenizer.ggml.eos_token_id", &f.eos_id));
  KILN_RETURN_IF_ERROR(get_id("tokenizer.ggml.unknown_token_id", &f.unk_id));
  KILN_RETURN_IF_ERROR(get_id("tokenizer.ggml.padding_token_id", &f.pad_id));
  auto get_flag = [&](const char* key, int* out) -> Status {
    if (!gguf.Has(key)) return Status::Ok();
    KILN_ASSIGN_OR_RETURN(bool b, gguf.GetBool(key));
    *out = b ? 1 : 0;
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(get_flag("tokenizer.ggml.add_bos_token", &f.add_bos));
  KILN_RETURN_IF_ERROR(get_flag("tokenizer.ggml.add_eos_token", &f.add_eos));
  KILN_RETURN_IF_ERROR(get_flag("tokenizer.ggml.add_space_prefix", &f.add_space_prefix));
  return f;
}

}  // namespace kiln
