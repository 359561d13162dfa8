#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include <utf8proc.h>

#include <cstdlib>

#include "tokenizer/regex_splitter.h"

namespace kiln {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes one UTF-8 character at s[*i], advancing *i; an invalid byte decodes as itself with
// *valid = false.
uint32_t NextCodepoint(std::string_view s, size_t* i, bool* valid) {
  auto b = static_cast<unsigned char>(s[*i]);
  size_t n = b < 0x80 ? 1 : b < 0xC0 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 0;
  if (n == 0 || *i + n > s.size()) {
    *valid = false;
    ++*i;
    return b;
  }
  uint32_t cp = n == 1 ? b : b & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    auto c = static_cast<unsigned char>(s[*i + k]);
    if ((c & 0xC0) != 0x80) {
      *valid = false;
      ++*i;
      return b;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  *valid = true;
  *i += n;
  return cp;
}

size_t Utf8CharLen(std::string_view s, size_t i) {
  size_t j = i;
  bool valid;
  NextCodepoint(s, &j, &valid);
  return j - i;
}

// GPT-2's reversible map from bytes to printable code points: printable Latin-1 bytes map to
// themselves, the other 68 to U+0100 upwards in byte order.
std::vector<uint32_t> ByteToCodepoint() {
  std::vector<uint32_t> map(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? b : next++;
  }
  return map;
}

// A byte trie over the added-token texts, for leftmost-longest matching.
struct Trie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index
    int32_t token = -1;
    bool always = false;  // user-defined: matched even without parse_special
  };
  std::vector<Node> nodes{Node{}};

  void Insert(std::string_view text, int32_t token, bool always) {
    int32_t n = 0;
    for (char ch : text) {
      auto b = static_cast<uint8_t>(ch);
      int32_t child = Find(n, b);
      if (child < 0) {
        child = static_cast<int32_t>(nodes.size());
        nodes[n].children.emplace_back(b, child);
        nodes.emplace_back();
      }
      n = child;
    }
    nodes[n].token = token;
    nodes[n].always = always;
  }
  int32_t Find(int32_t n, uint8_t b) const {
    for (const auto& [cb, child] : nodes[n].children) {
      if (cb == b) return child;
    }
    return -1;
  }
  // The longest matchable token starting at text[pos]: {token, length} or {-1, 0}.
  std::pair<int32_t, size_t> Match(std::string_view text, size_t pos, bool parse_special) const {
    std::pair<int32_t, size_t> best{-1, 0};
    int32_t n = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      n = Find(n, static_cast<uint8_t>(text[i]));
      if (n < 0) break;
      const Node& node = nodes[n];
      if (node.token >= 0 && (parse_special || node.always)) best = {node.token, i + 1 - pos};
    }
    return best;
  }
};

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<RegexSplitter> splitter;
  TokenMap token_to_id;
  std::vector<std::string> pieces;  // id -> decoded bytes
  Trie added;
  bool has_added = false;
  // Byte-level BPE.
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left, right) -> rank, id
  int32_t byte_symbol_id[256];  // id of the GPT-2 alphabet character for each byte, or -1
  // SentencePiece.
  int32_t byte_token_id[256];  // id of "<0xNN>", or -1
  // Cache of encoded byte-level words.
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
};

Tokenizer::Tokenizer(TokenizerVocab vocab) : vocab_(std::move(vocab)), impl_(new Impl) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerVocab vocab) {
  const size_t n = vocab.tokens.size();
  if (vocab.types.empty()) vocab.types.assign(n, TokenType::kNormal);
  if (vocab.types.size() != n || (!vocab.scores.empty() && vocab.scores.size() != n)) {
    return InvalidArgument("tokenizer vocab: tokens, types and scores differ in size");
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(vocab)));
  const TokenizerVocab& v = t->vocab_;
  Impl& m = *t->impl_;
  m.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) m.token_to_id[v.tokens[i]] = static_cast<int32_t>(i);
  std::fill(std::begin(m.byte_symbol_id), std::end(m.byte_symbol_id), -1);
  std::fill(std::begin(m.byte_token_id), std::end(m.byte_token_id), -1);

  const std::vector<uint32_t> byte_to_cp = ByteToCodepoint();
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);

  if (v.model == TokenizerModel::kByteLevelBpe) {
    KILN_ASSIGN_OR_RETURN(m.splitter, RegexSplitter::Create(v.pre.regexes));
    for (int b = 0; b < 256; ++b) {
      std::string s;
      AppendUtf8(byte_to_cp[b], &s);
      m.byte_symbol_id[b] = t->TokenToId(s);
    }
  } else {
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      m.byte_token_id[b] = t->TokenToId(name);
    }
  }

  // Merge ranks (byte-level BPE; SentencePiece vocabs from tokenizer.json, which rank merges
  // instead of scoring tokens).
  m.merges.reserve(v.merges.size());
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const auto& [a, b] = v.merges[r];
    int32_t ia = t->TokenToId(a), ib = t->TokenToId(b), im = t->TokenToId(a + b);
    if (ia < 0 || ib < 0 || im < 0) continue;  // NOTE: unusable merges never fire in HF either
    uint64_t key = (static_cast<uint64_t>(ia) << 32) | static_cast<uint32_t>(ib);
    m.merges.emplace(key, std::make_pair(static_cast<int32_t>(r), im));  // first rank wins
  }

  // Decoded pieces and the added-token trie.
  m.pieces.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = v.tokens[i];
    TokenType type = v.types[i];
    std::string& piece = m.pieces[i];
    if (type == TokenType::kControl || type == TokenType::kUnknown ||
        type == TokenType::kUserDefined) {
      piece = text;
      if (!text.empty()) {
        m.added.Insert(text, static_cast<int32_t>(i), type == TokenType::kUserDefined);
        m.has_added = true;
      }
      continue;
    }
    if (v.model == TokenizerModel::kByteLevelBpe) {
      for (size_t k = 0; k < text.size();) {
        size_t start = k;
        bool valid;
        uint32_t cp = NextCodepoint(text, &k, &valid);
        auto it = valid ? cp_to_byte.find(cp) : cp_to_byte.end();
        if (it != cp_to_byte.end()) {
          piece.push_back(static_cast<char>(it->second));
        } else {
          piece.append(text, start, k - start);
        }
      }
    } else if (type == TokenType::kByte) {
      unsigned int b = 0;
      if (std::sscanf(text.c_str(), "<0x%02X>", &b) == 1) piece.push_back(static_cast<char>(b));
    } else {
      for (size_t k = 0; k < text.size();) {
        if (text.compare(k, 3, "\xE2\x96\x81") == 0) {
          piece.push_back(' ');
          k += 3;
        } else {
          piece.push_back(text[k++]);
        }
      }
    }
  }
  return t;
}

const std::string& Tokenizer::IdToToken(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && id < vocab_.size() ? vocab_.tokens[id] : kEmpty;
}

int32_t Tokenizer::TokenToId(std::string_view token) const {
  auto it = impl_->token_to_id.find(token);
  return it == impl_->token_to_id.end() ? -1 : it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= vocab_.size()) return false;
  TokenType t = vocab_.types[id];
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  bool after_special = true;  // at the start, or right after an added token
  size_t run_start = 0;
  if (impl_->has_added) {
    for (size_t i = 0; i < text.size();) {
      auto [token, len] = impl_->added.Match(text, i, parse_special);
      if (token < 0) {
        ++i;
        continue;
      }
      if (i > run_start) {
        EncodeText(text.substr(run_start, i - run_start), after_special, &out);
      }
      out.push_back(token);
      after_special = true;
      i += len;
      run_start = i;
    }
  }
  if (run_start < text.size()) EncodeText(text.substr(run_start), after_special, &out);
  if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

void Tokenizer::EncodeText(std::string_view text, bool after_special,
                           std::vector<int32_t>* out) const {
  if (vocab_.normalize_nfc) {
    // NOTE: ASCII is already NFC, so the common case skips the copy. Invalid UTF-8 (which HF
    // cannot receive) is left as it is.
    bool is_ascii = std::all_of(text.begin(), text.end(),
                                [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    if (!is_ascii) {
      utf8proc_uint8_t* nfc = nullptr;
      utf8proc_ssize_t len =
          utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                       static_cast<utf8proc_ssize_t>(text.size()), &nfc,
                       static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      if (len >= 0) {
        std::string normalized(reinterpret_cast<const char*>(nfc), static_cast<size_t>(len));
        std::free(nfc);
        EncodeNormalized(normalized, after_special, out);
        return;
      }
    }
  }
  EncodeNormalized(text, after_special, out);
}

void Tokenizer::EncodeNormalized(std::string_view text, bool after_special,
                                 std::vector<int32_t>* out) const {
  if (vocab_.model == TokenizerModel::kByteLevelBpe) {
    std::vector<std::string_view> words;
    impl_->splitter->Split(text, &words);
    for (std::string_view w : words) EncodeBpeWord(w, out);
    return;
  }
  // NOTE: like llama.cpp, the space prefix goes before every text run that follows an added
  // token, not only before the first.
  std::string s;
  s.reserve(text.size() + 8);
  if (vocab_.add_space_prefix && after_special) s += "\xE2\x96\x81";
  for (char c : text) {
    if (c == ' ') {
      s += "\xE2\x96\x81";
    } else {
      s.push_back(c);
    }
  }
  EncodeSpm(s, out);
}

void Tokenizer::EncodeBpeWord(std::string_view word, std::vector<int32_t>* out) const {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.cache_mu);
    auto it = m.cache.find(word);
    if (it != m.cache.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (vocab_.pre.ignore_merges) {
    std::string mapped;
    for (char c : word) {
      int32_t id = m.byte_symbol_id[static_cast<uint8_t>(c)];
      mapped += id >= 0 ? vocab_.tokens[id] : std::string();
    }
    if (int32_t id = TokenToId(mapped); id >= 0) ids.push_back(id);
  }
  if (ids.empty()) {
    // Symbols form a linked list over the word's bytes; a min-heap holds candidate merges
    // (rank, left position) and stale entries are skipped when popped.
    struct Sym {
      int32_t id;
      int32_t prev, next;
    };
    const int32_t n = static_cast<int32_t>(word.size());
    std::vector<Sym> syms(n);
    for (int32_t i = 0; i < n; ++i) {
      syms[i] = {m.byte_symbol_id[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
    }
    struct Cand {
      int32_t rank, left, left_id, right, right_id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
      uint64_t key = (static_cast<uint64_t>(syms[l].id) << 32) | static_cast<uint32_t>(syms[r].id);
      auto it = m.merges.find(key);
      if (it != m.merges.end()) heap.push({it->second.first, l, syms[l].id, r, syms[r].id});
    };
    for (int32_t i = 0; i + 1 < n; ++i) try_add(i, i + 1);
    while (!heap.empty()) {
      Cand c = heap.top();
      heap.pop();
      Sym& l = syms[c.left];
      if (l.id != c.left_id || l.next != c.right || syms[c.right].id != c.right_id) continue;
      uint64_t key = (static_cast<uint64_t>(c.left_id) << 32) | static_cast<uint32_t>(c.right_id);
      l.id = m.merges.find(key)->second.second;
      Sym& r = syms[c.right];
      r.id = -2;  // dead
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = c.left;
      try_add(l.prev, c.left);
      try_add(c.left, l.next);
    }
    for (int32_t i = 0; i >= 0 && i < n; i = syms[i].next) {
      if (syms[i].id >= 0) {
        ids.push_back(syms[i].id);
      } else if (vocab_.unk_id >= 0) {
        ids.push_back(vocab_.unk_id);  // a byte with no symbol in the vocab
      }
    }
  }
  out->insert(out->end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(m.cache_mu);
  if (m.cache.size() >= 200000) m.cache.clear();  // NOTE: bounds memory on adversarial input
  m.cache.emplace(std::string(word), std::move(ids));
}

void Tokenizer::EncodeSpm(std::string_view text, std::vector<int32_t>* out) const {
  const Impl& m = *impl_;
  struct Sym {
    size_t start, len;
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < text.size();) {
    size_t len = Utf8CharLen(text, i);
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({i, len, idx - 1, -1});
    if (idx > 0) syms[idx - 1].next = idx;
    i += len;
  }
  struct Bigram {
    float score;
    int32_t left, right;
    size_t size;
    bool operator<(const Bigram& o) const {  // max-heap: best score, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Bigram> heap;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    std::string_view s = text.substr(syms[l].start, syms[l].len + syms[r].len);
    float score;
    if (!m.merges.empty()) {  // ranked merges: the lowest rank is the best score
      int32_t il = TokenToId(text.substr(syms[l].start, syms[l].len));
      int32_t ir = TokenToId(text.substr(syms[r].start, syms[r].len));
      if (il < 0 || ir < 0) return;
      auto it = m.merges.find((static_cast<uint64_t>(il) << 32) | static_cast<uint32_t>(ir));
      if (it == m.merges.end()) return;
      score = -static_cast<float>(it->second.first);
    } else {
      int32_t id = TokenToId(s);
      if (id < 0) return;
      score = vocab_.scores.empty() ? 0.0f : vocab_.scores[id];
    }
    heap.push({score, l, r, s.size()});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) try_add(i, i + 1);
  while (!heap.empty()) {
    Bigram b = heap.top();
    heap.pop();
    Sym& l = syms[b.left];
    Sym& r = syms[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    std::string_view s = text.substr(syms[i].start, syms[i].len);
    int32_t id = TokenToId(s);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : s) {  // byte fallback
      int32_t bid = m.byte_token_id[static_cast<uint8_t>(c)];
      if (bid >= 0) {
        out->push_back(bid);
      } else if (vocab_.unk_id >= 0) {
        out->push_back(vocab_.unk_id);
        break;
      }
    }
  }
}

void Tokenizer::AppendPiece(int32_t id, bool skip_special, bool* at_start, std::string* out) const {
  if (id < 0 || id >= vocab_.size()) return;
  TokenType type = vocab_.types[id];
  if (type == TokenType::kUnused) return;
  if (skip_special && (type == TokenType::kControl || type == TokenType::kUnknown)) return;
  std::string_view piece = impl_->pieces[id];
  if (piece.empty()) return;
  // NOTE: HF strips one space from the start of the whole decoded text (Strip decoder after
  // Fuse), so the strip applies to the first non-empty piece, whatever its type.
  if (*at_start && vocab_.model == TokenizerModel::kSentencePieceBpe && vocab_.add_space_prefix &&
      piece.front() == ' ') {
    piece.remove_prefix(1);
  }
  *at_start = false;
  out->append(piece);
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) AppendPiece(id, skip_special, &at_start, &out);
  return out;
}

}  // namespace kiln
