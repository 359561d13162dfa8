// Model-based randomized test of KvCacheManager (LevelDB db_test's Randomized vs ModelDB).
//
// A scheduler-like driver admits requests (most from a small pool of prompts with shared
// prefixes, so hits are frequent), grows them, "computes" their K/V, caches full blocks, frees
// them and resets the cache, under fixed seeds. A trivially correct model keeps each live
// request's tokens and table, its own ref counts, and a shadow of what every block holds: the key
// and the token prefix that the request writing the block had computed. After every operation:
//   - every hit block holds exactly the request's key and token prefix up to that block (so a hash
//     collision or a stale index entry cannot go unnoticed), and a hit is no shorter than what a
//     live request provably has cached;
//   - a block is written only while exactly one table holds it;
//   - ref counts equal the number of live tables holding each block, NumFreeBlocks() equals
//     num_blocks minus the distinct referenced blocks, and nullopt comes exactly when the free
//     blocks (minus the hit's own free blocks) do not suffice;
//   - CheckInvariants() passes.
// At the end everything is freed and the whole pool must be free again. 13 configurations of
// 25,000 operations each (block sizes 1/4/16, 64 and 3 hash bits, prefix caching off) take
// about 1.5 s in Release.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/hash.h"
#include "engine/kv_cache_manager.h"

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;

struct Config {
  uint64_t seed;
  int32_t block_size;
  int32_t num_blocks;
  int32_t hash_bits;
  bool enable_prefix_caching = true;
  int32_t num_ops = 25000;
};

std::string ConfigName(const testing::TestParamInfo<Config>& info) {
  const Config& c = info.param;
  return "bs" + std::to_string(c.block_size) + "_blocks" + std::to_string(c.num_blocks) + "_bits" +
         std::to_string(c.hash_bits) + (c.enable_prefix_caching ? "" : "_nocache") + "_seed" +
         std::to_string(c.seed);
}

constexpr int32_t kVocab = 4;       // few token values: identical blocks arise by accident too
constexpr int32_t kMaxTokens = 64;  // a request finishes here
constexpr int32_t kMaxPrompt = 40;
constexpr int32_t kMaxLive = 10;

const PrefixCacheKey kKeys[] = {{0, ""}, {0, "tenant-b"}, {3, ""}};

class Driver {
 public:
  explicit Driver(const Config& c)
      : c_(c),
        rng_(c.seed),
        m_(KvCacheOptions{c.num_blocks, c.block_size, c.enable_prefix_caching, c.hash_bits}),
        ref_(c.num_blocks, 0),
        shadow_(c.num_blocks) {
    // Three roots, each extended by a few suffixes: a pool of prompts sharing prefixes.
    for (int root = 0; root < 3; ++root) {
      const Ids r = RandomTokens(20 + Uniform(17));
      for (int s = 0; s < 3; ++s) {
        Ids p = r;
        const Ids suffix = RandomTokens(Uniform(13));
        p.insert(p.end(), suffix.begin(), suffix.end());
        prompts_.push_back(p);
      }
    }
  }

  void Run() {
    for (op_ = 0; op_ < c_.num_ops; ++op_) {
      const uint32_t r = Uniform(100);
      if (r < 25) {
        if (static_cast<int32_t>(live_.size()) < kMaxLive) NewRequest();
      } else if (r < 70) {
        if (!live_.empty()) Step(RandomLive());
      } else if (r < 85) {
        if (!live_.empty()) FreeRequest(RandomLive());
      } else if (r < 95) {
        LookupOnly();
      } else if (r < 96) {
        Reset();
      } else {
        m_.Free(next_id_ + 1000);  // unknown: a no-op
      }
      if (testing::Test::HasFatalFailure()) return;
      CheckAll();
      if (testing::Test::HasFatalFailure()) return;
    }
    while (!live_.empty()) FreeRequest(live_.begin()->first);
    CheckAll();
    ASSERT_EQ(m_.NumFreeBlocks(), c_.num_blocks) << "blocks leaked";
    ASSERT_EQ(static_cast<int32_t>(m_.FreeQueue().size()), c_.num_blocks);
  }

  void PrintSummary() const {
    std::printf(
        "  %d ops: %lld admitted, %lld nullopt, %lld lookups, %lld hit tokens of %lld, "
        "%lld evictions, %lld resets\n",
        c_.num_ops, static_cast<long long>(num_admitted_), static_cast<long long>(num_nullopt_),
        static_cast<long long>(m_.stats().num_lookups),
        static_cast<long long>(m_.stats().num_hit_tokens),
        static_cast<long long>(m_.stats().num_lookup_tokens),
        static_cast<long long>(m_.stats().num_evictions), static_cast<long long>(num_resets_));
  }

  int64_t num_admitted() const { return num_admitted_; }
  int64_t num_nullopt() const { return num_nullopt_; }
  int64_t num_resets() const { return num_resets_; }
  const KvCacheStats& stats() const { return m_.stats(); }
  // A digest of every hit and table the manager returned, in order.
  uint64_t trace() const { return trace_; }

 private:
  struct Request {
    Ids tokens;
    int key = 0;
    int32_t num_allocated = 0;  // tokens the table was asked to cover
    int32_t num_computed = 0;   // tokens whose K/V are written
    Ids table;
  };
  // What a block holds: written by a request with `key`, whose tokens up to the block's last
  // written position were `prefix`.
  struct Written {
    int key = -1;
    Ids prefix;
  };

  uint32_t Uniform(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
  bool OneIn(uint32_t n) { return Uniform(n) == 0; }

  Ids RandomTokens(int32_t n) {
    Ids t(n);
    for (int32_t& x : t) x = static_cast<int32_t>(Uniform(kVocab));
    return t;
  }

  RequestId RandomLive() {
    auto it = live_.begin();
    std::advance(it, Uniform(static_cast<uint32_t>(live_.size())));
    return it->first;
  }

  int32_t NumFreeInModel() const {
    return static_cast<int32_t>(std::count(ref_.begin(), ref_.end(), 0));
  }

  std::string Where() const {
    return "seed " + std::to_string(c_.seed) + " op " + std::to_string(op_);
  }

  // A hit must be sound: every block holds exactly this key and prefix.
  void VerifyHit(const Ids& tokens, int key, const PrefixHit& hit) {
    const int32_t bs = c_.block_size;
    ASSERT_EQ(hit.num_tokens, static_cast<int32_t>(hit.block_ids.size()) * bs) << Where();
    if (!c_.enable_prefix_caching) {
      ASSERT_TRUE(hit.block_ids.empty()) << Where();
    }
    ASSERT_LE(hit.num_tokens, std::max<int32_t>(0, static_cast<int32_t>(tokens.size()) - 1))
        << Where();
    for (size_t i = 0; i < hit.block_ids.size(); ++i) {
      const int32_t b = hit.block_ids[i];
      ASSERT_TRUE(b >= 0 && b < c_.num_blocks) << Where();
      ASSERT_TRUE(m_.IsCached(b)) << Where();
      const Written& w = shadow_[b];
      const Ids want(tokens.begin(), tokens.begin() + static_cast<int64_t>(i + 1) * bs);
      ASSERT_EQ(w.key, key) << Where() << ": hit block " << b << " at " << i << " has another key";
      ASSERT_EQ(w.prefix, want) << Where() << ": hit block " << b << " at " << i
                                << " holds another prefix";
    }
    // Completeness: a live request's leading cached blocks cannot be evicted, so a lookup of a
    // prompt sharing them (same key) finds at least that many blocks.
    const int32_t cap_blocks = tokens.empty() ? 0 : (static_cast<int32_t>(tokens.size()) - 1) / bs;
    int32_t lower = 0;
    for (const auto& [id, r] : live_) {
      if (r.key != key) continue;
      int32_t k = 0;
      while (k < cap_blocks && k < static_cast<int32_t>(r.table.size()) &&
             (k + 1) * bs <= r.num_computed && m_.IsCached(r.table[k]) &&
             std::equal(tokens.begin() + static_cast<int64_t>(k) * bs,
                        tokens.begin() + static_cast<int64_t>(k + 1) * bs,
                        r.tokens.begin() + static_cast<int64_t>(k) * bs)) {
        ++k;
      }
      lower = std::max(lower, k);
    }
    ASSERT_GE(static_cast<int32_t>(hit.block_ids.size()), lower) << Where() << ": missed a hit";
  }

  PrefixHit Lookup(const Ids& tokens, int key) {
    PrefixHit hit = m_.FindCachedPrefix(tokens, kKeys[key]);
    trace_ = HashInt32s(hit.block_ids, trace_);
    if (c_.enable_prefix_caching) {
      ++num_lookups_;
      num_hit_tokens_ += hit.num_tokens;
    }
    VerifyHit(tokens, key, hit);
    return hit;
  }

  int PickKey() { return OneIn(5) ? 1 + static_cast<int>(Uniform(2)) : 0; }

  Ids PickPrompt() {
    const uint32_t r = Uniform(10);
    if (r < 7) return prompts_[Uniform(static_cast<uint32_t>(prompts_.size()))];
    if (r < 9) {  // a pool prompt cut anywhere (exact block multiples included)
      const Ids& p = prompts_[Uniform(static_cast<uint32_t>(prompts_.size()))];
      return Ids(p.begin(), p.begin() + 1 + Uniform(static_cast<uint32_t>(p.size())));
    }
    return RandomTokens(1 + Uniform(kMaxPrompt));
  }

  void LookupOnly() {
    Ids tokens;
    if (!live_.empty() && OneIn(2)) {
      const Request& r = live_[RandomLive()];
      tokens.assign(r.tokens.begin(), r.tokens.begin() + Uniform(r.tokens.size() + 1));
    } else {
      tokens = PickPrompt();
    }
    Lookup(tokens, PickKey());
  }

  // Checks an Allocate answer against the model and takes the new table into it.
  void TakeTable(RequestId id, Request& r, int32_t num_tokens, const PrefixHit* hit,
                 const std::optional<std::span<const int32_t>>& got) {
    const int32_t num_hit_blocks = hit ? static_cast<int32_t>(hit->block_ids.size()) : 0;
    int32_t num_hit_free = 0;
    if (hit) {
      for (int32_t b : hit->block_ids) num_hit_free += ref_[b] == 0;
    }
    const int32_t want_size = std::max(m_.NumBlocksFor(num_tokens),
                                       static_cast<int32_t>(r.table.size()) + num_hit_blocks);
    const int32_t num_new = want_size - static_cast<int32_t>(r.table.size()) - num_hit_blocks;
    const bool fits = num_new <= NumFreeInModel() - num_hit_free;
    ASSERT_EQ(got.has_value(), fits) << Where() << ": need " << num_new << ", free "
                                     << NumFreeInModel() << ", hit free " << num_hit_free;
    if (!got) {
      ++num_nullopt_;
      ASSERT_EQ(m_.BlockTable(id).size(), r.table.size()) << Where();
      return;
    }
    const Ids table(got->begin(), got->end());
    trace_ = HashInt32s(table, trace_);
    ASSERT_EQ(static_cast<int32_t>(table.size()), want_size) << Where();
    ASSERT_TRUE(std::equal(r.table.begin(), r.table.end(), table.begin())) << Where();
    if (hit) {
      ASSERT_TRUE(std::equal(hit->block_ids.begin(), hit->block_ids.end(),
                             table.begin() + static_cast<int64_t>(r.table.size())))
          << Where();
    }
    for (size_t i = r.table.size(); i < table.size(); ++i) {
      const int32_t b = table[i];
      const bool from_hit = i < r.table.size() + num_hit_blocks;
      if (!from_hit) {
        ASSERT_EQ(ref_[b], 0) << Where() << ": block " << b << " handed out while in use";
        ASSERT_FALSE(m_.IsCached(b)) << Where() << ": reused block " << b << " kept its hash";
      }
      ++ref_[b];
    }
    r.table = table;
  }

  void NewRequest() {
    const RequestId id = next_id_++;
    Request r;
    r.tokens = PickPrompt();
    r.key = PickKey();
    PrefixHit hit;
    const bool use_hit = !OneIn(10);
    if (use_hit) {
      hit = Lookup(r.tokens, r.key);
      if (testing::Test::HasFatalFailure()) return;
    }
    const int32_t n = static_cast<int32_t>(r.tokens.size());
    // Chunked prefill: a first chunk past the hit, or the whole prompt.
    const int32_t num_tokens =
        OneIn(2) ? n : hit.num_tokens + 1 + static_cast<int32_t>(Uniform(n - hit.num_tokens));
    auto got = m_.Allocate(id, num_tokens, use_hit ? &hit : nullptr);
    TakeTable(id, r, num_tokens, use_hit ? &hit : nullptr, got);
    if (testing::Test::HasFatalFailure()) return;
    if (!got) {
      if (OneIn(2) && !live_.empty()) FreeRequest(RandomLive());  // preempt someone
      return;
    }
    ++num_admitted_;
    r.num_allocated = num_tokens;
    r.num_computed = hit.num_tokens;
    live_[id] = std::move(r);
    ComputeAndCache(id);
  }

  void Step(RequestId id) {
    Request& r = live_[id];
    if (r.num_computed < r.num_allocated && OneIn(3)) {  // finish the slots already allocated
      ComputeAndCache(id);
      return;
    }
    const int32_t target = std::min(
        kMaxTokens, r.num_allocated + 1 + static_cast<int32_t>(Uniform(2 * c_.block_size)));
    while (static_cast<int32_t>(r.tokens.size()) < target) {
      // Decode: mostly a function of the prefix, so equal prompts generate equal blocks.
      const size_t n = r.tokens.size();
      const int32_t next =
          OneIn(5) ? static_cast<int32_t>(Uniform(kVocab))
                   : (r.tokens[n - 1] * 3 + (n >= 2 ? r.tokens[n - 2] : 0) + static_cast<int>(n)) %
                         kVocab;
      r.tokens.push_back(next);
    }
    auto got = m_.Allocate(id, target);
    TakeTable(id, r, target, nullptr, got);
    if (testing::Test::HasFatalFailure()) return;
    if (!got) {
      if (OneIn(2)) FreeRequest(RandomLive());  // preempt someone, maybe this one
      return;
    }
    r.num_allocated = std::max(r.num_allocated, target);
    ComputeAndCache(id);
    if (testing::Test::HasFatalFailure()) return;
    if (live_.count(id) && live_[id].num_computed >= kMaxTokens) FreeRequest(id);  // finished
  }

  // Writes K/V for a random number of the allocated but uncomputed positions, then (usually)
  // registers full blocks, sometimes lagging behind.
  void ComputeAndCache(RequestId id) {
    Request& r = live_[id];
    const int32_t bs = c_.block_size;
    const int32_t room = r.num_allocated - r.num_computed;
    const int32_t to = r.num_computed + (OneIn(4) ? static_cast<int32_t>(Uniform(room + 1)) : room);
    for (int32_t p = r.num_computed; p < to; ++p) {
      const int32_t b = r.table[p / bs];
      ASSERT_EQ(ref_[b], 1) << Where() << ": writing block " << b << " shared by " << ref_[b]
                            << " tables";
      ASSERT_FALSE(m_.IsCached(b)) << Where() << ": writing cached block " << b;
      Written& w = shadow_[b];
      w.key = r.key;
      w.prefix.assign(r.tokens.begin(), r.tokens.begin() + p + 1);
    }
    r.num_computed = to;
    if (!OneIn(5)) {
      const int32_t upto = OneIn(4) ? static_cast<int32_t>(Uniform(to + 1)) : to;
      m_.CacheFullBlocks(id, r.tokens, upto, kKeys[r.key]);
    }
  }

  void FreeRequest(RequestId id) {
    auto it = live_.find(id);
    ASSERT_TRUE(it != live_.end());
    for (int32_t b : it->second.table) --ref_[b];
    live_.erase(it);
    m_.Free(id);
  }

  void Reset() {
    const bool all_free = NumFreeInModel() == c_.num_blocks;
    ASSERT_EQ(m_.ResetPrefixCache(), all_free) << Where();
    if (all_free) {
      ++num_resets_;
      for (int32_t b = 0; b < c_.num_blocks; ++b) ASSERT_FALSE(m_.IsCached(b)) << Where();
    }
  }

  void CheckAll() {
    m_.CheckInvariants();
    int32_t num_referenced = 0;
    for (int32_t b = 0; b < c_.num_blocks; ++b) {
      ASSERT_EQ(m_.RefCount(b), ref_[b]) << Where() << ": block " << b;
      num_referenced += ref_[b] > 0;
    }
    ASSERT_EQ(m_.NumFreeBlocks(), c_.num_blocks - num_referenced) << Where();
    for (const auto& [id, r] : live_) {
      const std::span<const int32_t> t = m_.BlockTable(id);
      ASSERT_TRUE(std::equal(t.begin(), t.end(), r.table.begin(), r.table.end()))
          << Where() << ": table of request " << id;
    }
    ASSERT_EQ(m_.stats().num_lookups, num_lookups_) << Where();
    ASSERT_EQ(m_.stats().num_hit_tokens, num_hit_tokens_) << Where();
  }

  const Config c_;
  std::mt19937_64 rng_;
  KvCacheManager m_;
  std::vector<Ids> prompts_;
  std::map<RequestId, Request> live_;
  std::vector<int32_t> ref_;
  std::vector<Written> shadow_;
  RequestId next_id_ = 1;
  int32_t op_ = 0;
  int64_t num_lookups_ = 0;
  int64_t num_hit_tokens_ = 0;
  int64_t num_admitted_ = 0;
  int64_t num_nullopt_ = 0;
  int64_t num_resets_ = 0;
  uint64_t trace_ = 0;
};

class KvCacheManagerRandomized : public testing::TestWithParam<Config> {};

TEST_P(KvCacheManagerRandomized, MatchesModel) {
  const auto start = std::chrono::steady_clock::now();
  Driver d(GetParam());
  d.Run();
  if (HasFatalFailure()) return;
  d.PrintSummary();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  %.3f s\n", s);
  // The run must have exercised what it is meant to test.
  EXPECT_GT(d.num_admitted(), 100);
  EXPECT_GT(d.num_nullopt(), 10);
  if (GetParam().enable_prefix_caching) {
    EXPECT_GT(d.stats().num_hit_tokens, 1000);
    EXPECT_GT(d.stats().num_evictions, 100);
  }
}

// Hash bits change only the index's bucket chains: with verified matches and several blocks
// per hash, collisions do not even cost a miss, so every answer is the same.
TEST(KvCacheManagerRandomizedCollisions, HashBitsChangeNoAnswer) {
  for (int32_t block_size : {1, 4}) {
    Driver full({7, block_size, 64, 64});
    full.Run();
    Driver one_bit({7, block_size, 64, 1});
    one_bit.Run();
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(full.trace(), one_bit.trace()) << block_size;
    EXPECT_EQ(full.stats().num_hit_tokens, one_bit.stats().num_hit_tokens);
    EXPECT_EQ(full.stats().num_evictions, one_bit.stats().num_evictions);
    EXPECT_GT(full.stats().num_hit_tokens, 1000);
  }
}

std::vector<Config> Configs() {
  std::vector<Config> configs;
  for (uint64_t seed : {1, 2}) {
    for (int32_t hash_bits : {64, 3}) {
      configs.push_back({seed, 1, 160, hash_bits});
      configs.push_back({seed, 4, 48, hash_bits});
      configs.push_back({seed, 16, 14, hash_bits});
    }
  }
  configs.push_back({3, 4, 48, 64, /*enable_prefix_caching=*/false});
  return configs;
}

INSTANTIATE_TEST_SUITE_P(Seeds, KvCacheManagerRandomized, testing::ValuesIn(Configs()), ConfigName);

}  // namespace
}  // namespace kiln
