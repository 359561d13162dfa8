// Exact tests of KvCacheManager in the style of vLLM's tests/v1/core/test_prefix_caching.py:
// after each operation they assert block ids, ref counts, cached flags, the free queue (the
// eviction order) and the stats.
#include "engine/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;

Ids Range(int32_t begin, int32_t end) {
  Ids v;
  for (int32_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

Ids Concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Ids Vec(std::span<const int32_t> s) { return Ids(s.begin(), s.end()); }

KvCacheManager Make(int32_t num_blocks, int32_t block_size = 4, int32_t hash_bits = 64,
                    bool enable_prefix_caching = true) {
  KvCacheOptions o;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.hash_bits = hash_bits;
  o.enable_prefix_caching = enable_prefix_caching;
  return KvCacheManager(o);
}

// Allocates and returns the table; fails the test (and returns {}) on nullopt.
Ids Alloc(KvCacheManager& m, RequestId id, int32_t num_tokens, const PrefixHit* hit = nullptr) {
  auto table = m.Allocate(id, num_tokens, hit);
  m.CheckInvariants();
  EXPECT_TRUE(table.has_value()) << "request " << id << " num_tokens " << num_tokens;
  return table ? Vec(*table) : Ids{};
}

Ids Refs(const KvCacheManager& m, std::initializer_list<int32_t> blocks) {
  Ids refs;
  for (int32_t b : blocks) refs.push_back(m.RefCount(b));
  return refs;
}

// The blocks among [0, num_blocks) that are cached.
Ids Cached(const KvCacheManager& m) {
  Ids cached;
  for (int32_t b = 0; b < m.num_blocks(); ++b) {
    if (m.IsCached(b)) cached.push_back(b);
  }
  return cached;
}

void Cache(KvCacheManager& m, RequestId id, const Ids& tokens, int32_t num_computed,
           const PrefixCacheKey& key = {}) {
  m.CacheFullBlocks(id, tokens, num_computed, key);
  m.CheckInvariants();
}

void Free(KvCacheManager& m, RequestId id) {
  m.Free(id);
  m.CheckInvariants();
}

// Everything observable, to show that a failed Allocate changes nothing.
struct Snapshot {
  Ids free_queue, refs, cached, table;
  int64_t lookups, lookup_tokens, hit_tokens, evictions;
  bool operator==(const Snapshot&) const = default;
};

Snapshot Take(const KvCacheManager& m, RequestId id) {
  Snapshot s;
  s.free_queue = m.FreeQueue();
  for (int32_t b = 0; b < m.num_blocks(); ++b) s.refs.push_back(m.RefCount(b));
  s.cached = Cached(m);
  s.table = Vec(m.BlockTable(id));
  s.lookups = m.stats().num_lookups;
  s.lookup_tokens = m.stats().num_lookup_tokens;
  s.hit_tokens = m.stats().num_hit_tokens;
  s.evictions = m.stats().num_evictions;
  return s;
}

TEST(KvCacheManager, AllocateGrowAndFree) {
  KvCacheManager m = Make(10);
  EXPECT_EQ(m.block_size(), 4);
  EXPECT_EQ(m.num_blocks(), 10);
  EXPECT_EQ(m.NumBlocksFor(0), 0);
  EXPECT_EQ(m.NumBlocksFor(1), 1);
  EXPECT_EQ(m.NumBlocksFor(4), 1);
  EXPECT_EQ(m.NumBlocksFor(5), 2);
  EXPECT_EQ(m.FreeQueue(), Range(0, 10));
  m.CheckInvariants();

  EXPECT_EQ(Alloc(m, 1, 5), Ids({0, 1}));
  EXPECT_EQ(m.FreeQueue(), Range(2, 10));
  EXPECT_EQ(m.NumFreeBlocks(), 8);
  EXPECT_EQ(Alloc(m, 1, 8), Ids({0, 1}));  // already covered
  EXPECT_EQ(Alloc(m, 1, 9), Ids({0, 1, 2}));
  EXPECT_EQ(Alloc(m, 2, 4), Ids({3}));
  EXPECT_EQ(Alloc(m, 1, 3), Ids({0, 1, 2}));  // never shrinks
  EXPECT_EQ(Vec(m.BlockTable(1)), Ids({0, 1, 2}));
  EXPECT_EQ(Refs(m, {0, 1, 2, 3, 4}), Ids({1, 1, 1, 1, 0}));
  EXPECT_EQ(m.NumFreeBlocks(), 6);

  Free(m, 1);  // last block first
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5, 6, 7, 8, 9, 2, 1, 0}));
  EXPECT_EQ(Refs(m, {0, 1, 2, 3}), Ids({0, 0, 0, 1}));
  EXPECT_TRUE(m.BlockTable(1).empty());
  Free(m, 1);   // unknown now: no-op
  Free(m, 99);  // never known: no-op
  Free(m, 2);
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5, 6, 7, 8, 9, 2, 1, 0, 3}));
  EXPECT_EQ(m.NumFreeBlocks(), 10);
  EXPECT_EQ(Cached(m), Ids{});  // nothing was registered

  EXPECT_EQ(Alloc(m, 3, 0), Ids{});  // an empty table takes nothing
  EXPECT_EQ(m.NumFreeBlocks(), 10);
  EXPECT_EQ(Alloc(m, 3, 4), Ids({4}));
  EXPECT_EQ(m.stats().num_lookups, 0);
  EXPECT_EQ(m.stats().num_evictions, 0);
}

TEST(KvCacheManager, PrefixHitSharesFullBlocksAcrossRequests) {
  KvCacheManager m = Make(10);
  const Ids a = Range(0, 10);                          // 2 full blocks + 2 tokens
  const Ids b = Concat(Range(0, 8), {100, 101, 102});  // same 2 full blocks, another tail

  PrefixHit hit_a = m.FindCachedPrefix(a, {});
  EXPECT_EQ(hit_a.block_ids, Ids{});
  EXPECT_EQ(hit_a.num_tokens, 0);
  EXPECT_EQ(Alloc(m, 1, 10, &hit_a), Ids({0, 1, 2}));
  Cache(m, 1, a, 10);
  EXPECT_EQ(Cached(m), Ids({0, 1}));  // the partial block 2 stays private

  PrefixHit hit_b = m.FindCachedPrefix(b, {});
  EXPECT_EQ(hit_b.block_ids, Ids({0, 1}));
  EXPECT_EQ(hit_b.num_tokens, 8);
  EXPECT_EQ(m.FreeQueue(), Range(3, 10));  // a lookup references nothing
  EXPECT_EQ(Alloc(m, 2, 11, &hit_b), Ids({0, 1, 3}));
  EXPECT_EQ(Refs(m, {0, 1, 2, 3}), Ids({2, 2, 1, 1}));
  EXPECT_EQ(m.FreeQueue(), Range(4, 10));
  EXPECT_EQ(m.NumFreeBlocks(), 6);
  Cache(m, 2, b, 11);  // block 3 is partial: nothing new
  EXPECT_EQ(Cached(m), Ids({0, 1}));

  Free(m, 1);
  EXPECT_EQ(Refs(m, {0, 1, 2, 3}), Ids({1, 1, 0, 1}));
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5, 6, 7, 8, 9, 2}));
  Free(m, 2);
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5, 6, 7, 8, 9, 2, 3, 1, 0}));
  EXPECT_EQ(Cached(m), Ids({0, 1}));  // free blocks stay cached until reused

  EXPECT_EQ(m.stats().num_lookups, 2);
  EXPECT_EQ(m.stats().num_lookup_tokens, 21);
  EXPECT_EQ(m.stats().num_hit_tokens, 8);
  EXPECT_EQ(m.stats().num_evictions, 0);
}

TEST(KvCacheManager, HitRequestExtendsTheChainIncrementally) {
  KvCacheManager m = Make(10);
  EXPECT_EQ(Alloc(m, 1, 9), Ids({0, 1, 2}));
  // Chunked prefill: registration follows num_computed_tokens, full blocks only.
  Cache(m, 1, Range(0, 9), 3);
  EXPECT_EQ(Cached(m), Ids{});
  Cache(m, 1, Range(0, 9), 4);
  EXPECT_EQ(Cached(m), Ids({0}));
  Cache(m, 1, Range(0, 9), 7);
  EXPECT_EQ(Cached(m), Ids({0}));
  Cache(m, 1, Range(0, 9), 9);
  EXPECT_EQ(Cached(m), Ids({0, 1}));
  Cache(m, 1, Range(0, 9), 9);  // again: nothing changes
  Cache(m, 1, Range(0, 9), 5);  // behind: nothing changes
  EXPECT_EQ(Cached(m), Ids({0, 1}));

  PrefixHit hit = m.FindCachedPrefix(Range(0, 13), {});
  EXPECT_EQ(hit.block_ids, Ids({0, 1}));
  EXPECT_EQ(Alloc(m, 2, 13, &hit), Ids({0, 1, 3, 4}));
  Cache(m, 2, Range(0, 13), 13);  // continues from the hit: block 3 holds tokens 8..11
  EXPECT_EQ(Cached(m), Ids({0, 1, 3}));
  EXPECT_EQ(m.FindCachedPrefix(Range(0, 13), {}).block_ids, Ids({0, 1, 3}));

  // Decode: block 4 fills up at 16 tokens.
  EXPECT_EQ(Alloc(m, 2, 16), Ids({0, 1, 3, 4}));
  Cache(m, 2, Range(0, 16), 16);
  EXPECT_EQ(Cached(m), Ids({0, 1, 3, 4}));
  EXPECT_EQ(m.FindCachedPrefix(Range(0, 17), {}).block_ids, Ids({0, 1, 3, 4}));
  // Request 1 diverges after token 8: only its own blocks 0 and 1 match.
  EXPECT_EQ(m.FindCachedPrefix(Concat(Range(0, 9), Range(20, 30)), {}).block_ids, Ids({0, 1}));
}

TEST(KvCacheManager, HitIsCappedBeforeTheLastToken) {
  KvCacheManager m = Make(10);
  const Ids p = Range(0, 8);  // exactly 2 blocks
  PrefixHit miss = m.FindCachedPrefix(p, {});
  EXPECT_EQ(Alloc(m, 1, 8, &miss), Ids({0, 1}));
  Cache(m, 1, p, 8);
  EXPECT_EQ(Cached(m), Ids({0, 1}));

  // 8 tokens: at most 7 may hit, so only block 0 (the last token must produce logits).
  PrefixHit hit = m.FindCachedPrefix(p, {});
  EXPECT_EQ(hit.block_ids, Ids({0}));
  EXPECT_EQ(hit.num_tokens, 4);
  EXPECT_EQ(m.FindCachedPrefix(Range(0, 9), {}).block_ids, Ids({0, 1}));
  EXPECT_EQ(m.FindCachedPrefix(Ids{}, {}).block_ids, Ids{});
  EXPECT_EQ(m.FindCachedPrefix(Ids{0}, {}).block_ids, Ids{});
  EXPECT_EQ(m.FindCachedPrefix(Range(0, 4), {}).block_ids, Ids{});
  EXPECT_EQ(m.FindCachedPrefix(Range(0, 5), {}).block_ids, Ids({0}));
  EXPECT_EQ(m.stats().num_lookups, 7);
  EXPECT_EQ(m.stats().num_lookup_tokens, 8 + 8 + 9 + 0 + 1 + 4 + 5);
  EXPECT_EQ(m.stats().num_hit_tokens, 4 + 8 + 4);

  // Block size 1: the cap is still n - 1 tokens.
  KvCacheManager one = Make(10, /*block_size=*/1);
  EXPECT_EQ(Alloc(one, 1, 3), Ids({0, 1, 2}));
  Cache(one, 1, Range(0, 3), 3);
  EXPECT_EQ(one.FindCachedPrefix(Range(0, 3), {}).block_ids, Ids({0, 1}));
  EXPECT_EQ(one.FindCachedPrefix(Range(0, 4), {}).block_ids, Ids({0, 1, 2}));
}

TEST(KvCacheManager, CacheSaltAndAdapterIsolatePrefixes) {
  KvCacheManager m = Make(10);
  const Ids p = Range(0, 9);
  const PrefixCacheKey base;
  const PrefixCacheKey salted{0, "tenant-b"};
  const PrefixCacheKey adapter{7, ""};
  PrefixHit miss = m.FindCachedPrefix(p, base);
  EXPECT_EQ(Alloc(m, 1, 9, &miss), Ids({0, 1, 2}));
  Cache(m, 1, p, 9, base);
  EXPECT_EQ(m.FindCachedPrefix(p, base).block_ids, Ids({0, 1}));
  EXPECT_EQ(m.FindCachedPrefix(p, salted).block_ids, Ids{});
  EXPECT_EQ(m.FindCachedPrefix(p, adapter).block_ids, Ids{});

  // The same tokens under another salt are another prefix: cached separately, not duplicates.
  PrefixHit miss_salted = m.FindCachedPrefix(p, salted);
  EXPECT_EQ(Alloc(m, 2, 9, &miss_salted), Ids({3, 4, 5}));
  Cache(m, 2, p, 9, salted);
  PrefixHit miss_adapter = m.FindCachedPrefix(p, adapter);
  EXPECT_EQ(Alloc(m, 3, 9, &miss_adapter), Ids({6, 7, 8}));
  Cache(m, 3, p, 9, adapter);
  EXPECT_EQ(Cached(m), Ids({0, 1, 3, 4, 6, 7}));

  EXPECT_EQ(m.FindCachedPrefix(p, base).block_ids, Ids({0, 1}));
  EXPECT_EQ(m.FindCachedPrefix(p, salted).block_ids, Ids({3, 4}));
  EXPECT_EQ(m.FindCachedPrefix(p, adapter).block_ids, Ids({6, 7}));
  EXPECT_EQ(m.FindCachedPrefix(p, {7, "tenant-b"}).block_ids, Ids{});
  EXPECT_EQ(m.FindCachedPrefix(p, {0, "tenant-"}).block_ids, Ids{});
  EXPECT_EQ(m.FindCachedPrefix(p, {0, std::string("tenant-b\0", 9)}).block_ids, Ids{});
}

TEST(KvCacheManager, EvictionIsLruAndTailsGoFirst) {
  KvCacheManager m = Make(6);
  const Ids a = Range(0, 8);
  const Ids b = Range(100, 108);
  EXPECT_EQ(Alloc(m, 1, 8), Ids({0, 1}));
  Cache(m, 1, a, 8);
  EXPECT_EQ(Alloc(m, 2, 8), Ids({2, 3}));
  Cache(m, 2, b, 8);
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5}));
  Free(m, 1);
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5, 1, 0}));
  Free(m, 2);
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5, 1, 0, 3, 2}));
  EXPECT_EQ(Cached(m), Ids({0, 1, 2, 3}));

  // 4 blocks: the never-cached ones first, then a (freed first), tail before head.
  EXPECT_EQ(Alloc(m, 3, 16), Ids({4, 5, 1, 0}));
  EXPECT_EQ(m.stats().num_evictions, 2);
  EXPECT_EQ(Cached(m), Ids({2, 3}));
  EXPECT_EQ(m.FreeQueue(), Ids({3, 2}));
  EXPECT_EQ(m.FindCachedPrefix(Concat(a, {9}), {}).block_ids, Ids{});
  EXPECT_EQ(m.FindCachedPrefix(Concat(b, {9}), {}).block_ids, Ids({2, 3}));

  Free(m, 3);
  EXPECT_EQ(m.FreeQueue(), Ids({3, 2, 0, 1, 5, 4}));
  EXPECT_EQ(Alloc(m, 4, 4), Ids({3}));  // b's tail
  EXPECT_EQ(m.stats().num_evictions, 3);
  EXPECT_EQ(Cached(m), Ids({2}));
  EXPECT_EQ(m.FindCachedPrefix(Concat(b, {9}), {}).block_ids, Ids({2}));
}

TEST(KvCacheManager, HitRevivesAFreeCachedBlock) {
  KvCacheManager m = Make(10);
  const Ids a = Range(0, 9);
  EXPECT_EQ(Alloc(m, 1, 9), Ids({0, 1, 2}));
  Cache(m, 1, a, 9);
  Free(m, 1);
  EXPECT_EQ(m.FreeQueue(), Ids({3, 4, 5, 6, 7, 8, 9, 2, 1, 0}));

  PrefixHit hit = m.FindCachedPrefix(a, {});
  EXPECT_EQ(hit.block_ids, Ids({0, 1}));
  EXPECT_EQ(m.NumFreeBlocks(), 10);
  EXPECT_EQ(Alloc(m, 2, 9, &hit), Ids({0, 1, 3}));  // out of the middle and the back
  EXPECT_EQ(Refs(m, {0, 1, 2, 3}), Ids({1, 1, 0, 1}));
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5, 6, 7, 8, 9, 2}));
  EXPECT_EQ(m.NumFreeBlocks(), 7);
  EXPECT_EQ(Cached(m), Ids({0, 1}));
  EXPECT_EQ(m.stats().num_evictions, 0);

  Free(m, 2);
  EXPECT_EQ(m.FreeQueue(), Ids({4, 5, 6, 7, 8, 9, 2, 3, 1, 0}));
}

TEST(KvCacheManager, NoRoomReturnsNulloptAndChangesNothing) {
  KvCacheManager m = Make(4);
  const Ids a = Range(0, 9);
  EXPECT_EQ(Alloc(m, 1, 9), Ids({0, 1, 2}));
  Cache(m, 1, a, 9);

  Snapshot before = Take(m, 1);
  EXPECT_FALSE(m.Allocate(1, 17).has_value());  // needs 2 more, 1 free
  m.CheckInvariants();
  EXPECT_EQ(Take(m, 1), before);
  EXPECT_EQ(Alloc(m, 1, 16), Ids({0, 1, 2, 3}));
  Free(m, 1);
  EXPECT_EQ(m.FreeQueue(), Ids({3, 2, 1, 0}));

  // 4 free blocks, but 2 of them are the hit itself: 17 tokens need 3 more than the hit.
  PrefixHit hit = m.FindCachedPrefix(Concat(Range(0, 8), Range(50, 58)), {});
  EXPECT_EQ(hit.block_ids, Ids({0, 1}));
  before = Take(m, 2);
  EXPECT_FALSE(m.Allocate(2, 17, &hit).has_value());
  m.CheckInvariants();
  EXPECT_EQ(Take(m, 2), before);
  EXPECT_TRUE(m.BlockTable(2).empty());

  EXPECT_EQ(Alloc(m, 2, 16, &hit), Ids({0, 1, 3, 2}));
  EXPECT_EQ(m.NumFreeBlocks(), 0);
  EXPECT_EQ(m.stats().num_evictions, 0);  // 3 and 2 were never cached
  before = Take(m, 3);
  EXPECT_FALSE(m.Allocate(3, 1).has_value());
  EXPECT_FALSE(m.Allocate(2, 17).has_value());
  EXPECT_EQ(Take(m, 3), before);
  EXPECT_EQ(Alloc(m, 2, 16), Ids({0, 1, 3, 2}));  // covered: needs nothing
  EXPECT_EQ(Alloc(m, 3, 0), Ids{});
}

TEST(KvCacheManager, DuplicateContentStaysPrivate) {
  KvCacheManager m = Make(10);
  const Ids p = Range(0, 10);
  // Two requests with the same prompt scheduled in the same step: both miss.
  PrefixHit hit1 = m.FindCachedPrefix(p, {});
  PrefixHit hit2 = m.FindCachedPrefix(p, {});
  EXPECT_EQ(Alloc(m, 1, 10, &hit1), Ids({0, 1, 2}));
  EXPECT_EQ(Alloc(m, 2, 10, &hit2), Ids({3, 4, 5}));
  Cache(m, 1, p, 10);
  Cache(m, 2, p, 10);
  EXPECT_EQ(Cached(m), Ids({0, 1}));  // 3 and 4 hold the same content: not indexed twice

  // Request 2 decodes on; its block 5 chains onto the indexed copies 0 and 1.
  EXPECT_EQ(Alloc(m, 2, 12), Ids({3, 4, 5}));
  Cache(m, 2, Range(0, 12), 12);
  EXPECT_EQ(Cached(m), Ids({0, 1, 5}));
  PrefixHit hit3 = m.FindCachedPrefix(Range(0, 13), {});
  EXPECT_EQ(hit3.block_ids, Ids({0, 1, 5}));

  Free(m, 2);
  EXPECT_EQ(m.FreeQueue(), Ids({6, 7, 8, 9, 5, 4, 3}));
  Free(m, 1);
  EXPECT_EQ(m.FreeQueue(), Ids({6, 7, 8, 9, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(Alloc(m, 3, 13, &hit3), Ids({0, 1, 5, 6}));
  EXPECT_EQ(m.FreeQueue(), Ids({7, 8, 9, 4, 3, 2}));
}

TEST(KvCacheManager, OrphanedChildIsNeverHit) {
  KvCacheManager m = Make(10);
  const Ids p99 = Concat(Range(0, 4), {99});
  const Ids pq = Range(0, 9);
  PrefixHit hit1 = m.FindCachedPrefix(p99, {});
  PrefixHit hit2 = m.FindCachedPrefix(pq, {});
  EXPECT_EQ(Alloc(m, 1, 5, &hit1), Ids({0, 1}));
  EXPECT_EQ(Alloc(m, 2, 9, &hit2), Ids({2, 3, 4}));
  Cache(m, 1, p99, 5);
  Cache(m, 2, pq, 9);  // block 2 duplicates block 0; block 3 is cached with parent 0
  EXPECT_EQ(Cached(m), Ids({0, 3}));
  EXPECT_EQ(m.FindCachedPrefix(pq, {}).block_ids, Ids({0, 3}));

  // Evict block 0 while request 2 keeps block 3 (cached, child of the evicted block).
  Free(m, 1);
  EXPECT_EQ(m.FreeQueue(), Ids({5, 6, 7, 8, 9, 1, 0}));
  EXPECT_EQ(Alloc(m, 3, 28), Ids({5, 6, 7, 8, 9, 1, 0}));
  EXPECT_EQ(m.stats().num_evictions, 1);
  EXPECT_EQ(Cached(m), Ids({3}));
  Free(m, 3);
  EXPECT_EQ(m.FindCachedPrefix(pq, {}).block_ids, Ids{});

  // Recomputing the same prefix caches new copies; block 3 keeps its hash but its parent is
  // gone for good (serials are never reused), so it is never returned.
  PrefixHit hit4 = m.FindCachedPrefix(pq, {});
  EXPECT_EQ(Alloc(m, 4, 9, &hit4), Ids({0, 1, 9}));
  Cache(m, 4, pq, 9);
  EXPECT_EQ(Cached(m), Ids({0, 1, 3}));  // 1 and 3: same hash, same tokens, other parents
  EXPECT_EQ(m.FindCachedPrefix(pq, {}).block_ids, Ids({0, 1}));
  Free(m, 4);
  Free(m, 2);
  EXPECT_EQ(m.FindCachedPrefix(pq, {}).block_ids, Ids({0, 1}));
  EXPECT_EQ(m.NumFreeBlocks(), 10);
}

// With 2 or 1 hash bits nearly every block hash collides; hits must still be exact.
TEST(KvCacheManager, HashCollisionsOnlyCauseMisses) {
  for (int32_t hash_bits : {1, 2}) {
    SCOPED_TRACE(hash_bits);
    KvCacheManager m = Make(40, /*block_size=*/2, hash_bits);
    // Request r: first block {r, 100 + r}, second block {7, 7} for all (same tokens, other
    // parents), then one tail token.
    auto tokens = [](int32_t r) { return Ids({r, 100 + r, 7, 7, 0}); };
    for (int32_t r = 0; r < 12; ++r) {
      PrefixHit hit = m.FindCachedPrefix(tokens(r), {});
      EXPECT_EQ(hit.block_ids, Ids{}) << r;
      EXPECT_EQ(Alloc(m, r, 5, &hit), Ids({3 * r, 3 * r + 1, 3 * r + 2}));
      Cache(m, r, tokens(r), 5);
    }
    // 24 cached blocks under at most 4 hash values: all indexed, none confused.
    EXPECT_EQ(Cached(m).size(), 24u);
    for (int32_t r = 0; r < 12; ++r) {
      EXPECT_EQ(m.FindCachedPrefix(tokens(r), {}).block_ids, Ids({3 * r, 3 * r + 1})) << r;
      EXPECT_EQ(m.FindCachedPrefix(Ids({r, 100 + r, 7, 8, 0}), {}).block_ids, Ids({3 * r}));
      EXPECT_EQ(m.FindCachedPrefix(tokens(r), {0, "s"}).block_ids, Ids{});
      EXPECT_EQ(m.FindCachedPrefix(tokens(r), {1, ""}).block_ids, Ids{});
    }
    EXPECT_EQ(m.FindCachedPrefix(Ids({50, 150, 7, 7, 0}), {}).block_ids, Ids{});
    EXPECT_EQ(m.FindCachedPrefix(Ids({0, 101, 7, 7, 0}), {}).block_ids, Ids{});
    for (int32_t r = 0; r < 12; ++r) Free(m, r);
    EXPECT_EQ(m.NumFreeBlocks(), 40);
    // Reuse evicts from the index chains; the others still hit exactly.
    EXPECT_EQ(Alloc(m, 100, 2 * 9), Ids({36, 37, 38, 39, 2, 1, 0, 5, 4}));
    EXPECT_EQ(m.stats().num_evictions, 3);  // 1, 0 and 4; 2 and 5 were private tails
    EXPECT_EQ(m.FindCachedPrefix(tokens(0), {}).block_ids, Ids{});
    EXPECT_EQ(m.FindCachedPrefix(tokens(1), {}).block_ids, Ids({3}));
    for (int32_t r = 2; r < 12; ++r) {
      EXPECT_EQ(m.FindCachedPrefix(tokens(r), {}).block_ids, Ids({3 * r, 3 * r + 1})) << r;
    }
  }
}

TEST(KvCacheManager, PrefixCachingDisabled) {
  KvCacheManager m = Make(6, /*block_size=*/4, /*hash_bits=*/64, /*enable_prefix_caching=*/false);
  const Ids p = Range(0, 9);
  PrefixHit hit = m.FindCachedPrefix(p, {});
  EXPECT_EQ(hit.block_ids, Ids{});
  EXPECT_EQ(Alloc(m, 1, 9, &hit), Ids({0, 1, 2}));
  Cache(m, 1, p, 9);
  EXPECT_EQ(Cached(m), Ids{});
  EXPECT_EQ(m.FindCachedPrefix(p, {}).block_ids, Ids{});
  Free(m, 1);
  EXPECT_EQ(m.FreeQueue(), Ids({3, 4, 5, 2, 1, 0}));
  EXPECT_EQ(Alloc(m, 2, 9), Ids({3, 4, 5}));
  EXPECT_EQ(m.stats().num_lookups, 0);  // lookups are not counted when caching is off
  EXPECT_EQ(m.stats().num_lookup_tokens, 0);
  EXPECT_EQ(m.stats().num_evictions, 0);
  Free(m, 2);
  EXPECT_TRUE(m.ResetPrefixCache());
}

TEST(KvCacheManager, ResetPrefixCacheOnlyWhenNothingIsInUse) {
  KvCacheManager m = Make(10);
  const Ids p = Range(0, 9);
  EXPECT_EQ(Alloc(m, 1, 9), Ids({0, 1, 2}));
  Cache(m, 1, p, 9);
  EXPECT_FALSE(m.ResetPrefixCache());  // request 1 holds blocks
  m.CheckInvariants();
  EXPECT_EQ(Cached(m), Ids({0, 1}));
  EXPECT_EQ(m.FindCachedPrefix(p, {}).block_ids, Ids({0, 1}));

  Free(m, 1);
  const Ids queue = m.FreeQueue();
  EXPECT_TRUE(m.ResetPrefixCache());
  m.CheckInvariants();
  EXPECT_EQ(Cached(m), Ids{});
  EXPECT_EQ(m.FreeQueue(), queue);
  EXPECT_EQ(m.FindCachedPrefix(p, {}).block_ids, Ids{});
  EXPECT_EQ(m.stats().num_evictions, 0);
  EXPECT_TRUE(m.ResetPrefixCache());

  PrefixHit miss = m.FindCachedPrefix(p, {});
  EXPECT_EQ(Alloc(m, 2, 9, &miss), Ids({3, 4, 5}));
  Cache(m, 2, p, 9);
  EXPECT_EQ(m.FindCachedPrefix(p, {}).block_ids, Ids({3, 4}));
}

TEST(KvCacheManager, MoveKeepsState) {
  KvCacheManager m = Make(4);
  EXPECT_EQ(Alloc(m, 1, 5), Ids({0, 1}));
  KvCacheManager moved = std::move(m);
  EXPECT_EQ(Vec(moved.BlockTable(1)), Ids({0, 1}));
  EXPECT_EQ(moved.FreeQueue(), Ids({2, 3}));
  moved.CheckInvariants();
}

KvCacheManager MakeWithHost(int32_t num_blocks, int32_t num_host_blocks) {
  KvCacheOptions o;
  o.num_blocks = num_blocks;
  o.block_size = 4;
  o.num_host_blocks = num_host_blocks;
  return KvCacheManager(o);
}

std::vector<std::pair<int32_t, int32_t>> Pairs(const std::vector<BlockCopy>& copies) {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (const BlockCopy& c : copies) out.push_back({c.device_block, c.host_block});
  return out;
}

using PairList = std::vector<std::pair<int32_t, int32_t>>;

TEST(KvCacheManager, SwapOutAndInMovesComputedBlocksThroughHost) {
  KvCacheManager m = MakeWithHost(6, 3);
  EXPECT_EQ(m.num_host_blocks(), 3);
  EXPECT_EQ(m.NumFreeHostBlocks(), 3);
  EXPECT_EQ(Alloc(m, 1, 11), (Ids{0, 1, 2}));
  // 9 computed tokens fill 3 blocks; a 4th block allocated for the step is just dropped.
  EXPECT_EQ(Alloc(m, 1, 13), (Ids{0, 1, 2, 3}));
  std::vector<BlockCopy> out;
  ASSERT_TRUE(m.SwapOut(1, 9, &out));
  m.CheckInvariants();
  EXPECT_EQ(Pairs(out), (PairList{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_TRUE(m.BlockTable(1).empty());
  EXPECT_EQ(Vec(m.HostBlockTable(1)), (Ids{0, 1, 2}));
  EXPECT_EQ(m.NumFreeBlocks(), 6);
  EXPECT_EQ(m.NumFreeHostBlocks(), 0);
  EXPECT_EQ(m.stats().num_swapped_out_blocks, 3);
  // Another request takes device blocks meanwhile; the swap-in gets others, in table order.
  EXPECT_EQ(Alloc(m, 2, 5), (Ids{4, 5}));
  std::vector<BlockCopy> in;
  auto table = m.SwapIn(1, 10, &in);
  m.CheckInvariants();
  ASSERT_TRUE(table.has_value());
  EXPECT_EQ(Vec(*table), (Ids{3, 2, 1}));  // the free queue's order: 3 first, then 2, 1 (Free's)
  EXPECT_EQ(Pairs(in), (PairList{{3, 0}, {2, 1}, {1, 2}}));
  EXPECT_TRUE(m.HostBlockTable(1).empty());
  EXPECT_EQ(m.NumFreeHostBlocks(), 3);
  EXPECT_EQ(m.stats().num_swapped_in_blocks, 3);
  // It grows as any table.
  EXPECT_EQ(Alloc(m, 1, 13), (Ids{3, 2, 1, 0}));
}

TEST(KvCacheManager, SwapFailsWithoutRoomAndChangesNothing) {
  KvCacheManager m = MakeWithHost(4, 1);
  Alloc(m, 1, 8);
  const Snapshot before = Take(m, 1);
  std::vector<BlockCopy> out;
  EXPECT_FALSE(m.SwapOut(1, 8, &out));  // two blocks, one host block
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(Take(m, 1), before);
  EXPECT_EQ(m.NumFreeHostBlocks(), 1);
  ASSERT_TRUE(m.SwapOut(1, 3, &out));  // one block's worth fits
  EXPECT_EQ(Pairs(out), (PairList{{0, 0}}));
  // Swap-in needs device room: the whole pool is taken.
  Alloc(m, 2, 16);
  std::vector<BlockCopy> in;
  EXPECT_FALSE(m.SwapIn(1, 4, &in).has_value());
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(Vec(m.HostBlockTable(1)), (Ids{0}));
  m.CheckInvariants();
}

TEST(KvCacheManager, FreeReleasesHostBlocks) {
  KvCacheManager m = MakeWithHost(4, 4);
  Alloc(m, 1, 12);
  std::vector<BlockCopy> out;
  ASSERT_TRUE(m.SwapOut(1, 12, &out));
  EXPECT_EQ(m.NumFreeHostBlocks(), 1);
  Free(m, 1);  // an abort while swapped out
  EXPECT_EQ(m.NumFreeHostBlocks(), 4);
  EXPECT_TRUE(m.HostBlockTable(1).empty());
}

TEST(KvCacheManager, SwappedInBlocksAreCachedAgainFromTheFirst) {
  const Ids tokens = Range(0, 12);
  // Caches a 12-token request's 3 blocks, swaps it out and straight back in (13 tokens: 4
  // blocks), registers its full blocks again; returns the swapped-in table.
  auto round_trip = [&](KvCacheManager& m) {
    EXPECT_EQ(Alloc(m, 1, 12), (Ids{0, 1, 2}));
    Cache(m, 1, tokens, 12);
    std::vector<BlockCopy> out, in;
    EXPECT_TRUE(m.SwapOut(1, 12, &out));
    auto table = m.SwapIn(1, 13, &in);
    EXPECT_TRUE(table.has_value());
    const Ids swapped_in = table ? Vec(*table) : Ids{};
    for (int32_t b : swapped_in) EXPECT_FALSE(m.IsCached(b)) << "block " << b;
    Cache(m, 1, tokens, 12);
    return swapped_in;
  };
  const Ids query = Concat(tokens, {99});
  {
    SCOPED_TRACE("the cached originals survive: the swapped-in copies stay private");
    KvCacheManager m = MakeWithHost(8, 4);
    EXPECT_EQ(round_trip(m), (Ids{3, 4, 5, 6}));  // the free queue: 3..7, then the cached tail
    EXPECT_EQ(Cached(m), (Ids{0, 1, 2}));
    EXPECT_EQ(m.FindCachedPrefix(query, {}).block_ids, (Ids{0, 1, 2}));
  }
  {
    SCOPED_TRACE("the originals were evicted: the swapped-in copies are indexed");
    KvCacheManager m = MakeWithHost(4, 4);
    EXPECT_EQ(round_trip(m), (Ids{3, 2, 1, 0}));  // block 3, then the cached 2, 1, 0 (evicted)
    EXPECT_EQ(m.stats().num_evictions, 3);
    EXPECT_EQ(Cached(m), (Ids{1, 2, 3}));
    EXPECT_EQ(m.FindCachedPrefix(query, {}).block_ids, (Ids{3, 2, 1}));
  }
}

TEST(KvCacheManagerDeathTest, AllocateForASwappedRequestAborts) {
  KvCacheManager m = MakeWithHost(4, 4);
  Alloc(m, 1, 4);
  std::vector<BlockCopy> out;
  ASSERT_TRUE(m.SwapOut(1, 4, &out));
  EXPECT_DEATH(m.Allocate(1, 8), "swapped out");
  EXPECT_DEATH(m.SwapOut(1, 4, &out), "");
}

TEST(KvCacheManagerDeathTest, HitForARequestWithATableAborts) {
  KvCacheManager m = Make(4);
  EXPECT_EQ(Alloc(m, 1, 5), Ids({0, 1}));
  PrefixHit hit;
  EXPECT_DEATH(m.Allocate(1, 9, &hit), "already has a block table");
}

TEST(KvCacheManagerDeathTest, StaleHitAborts) {
  KvCacheManager m = Make(3);
  EXPECT_EQ(Alloc(m, 1, 5), Ids({0, 1}));
  Cache(m, 1, Range(0, 5), 5);
  Free(m, 1);
  PrefixHit hit = m.FindCachedPrefix(Range(0, 5), {});
  EXPECT_EQ(hit.block_ids, Ids({0}));
  EXPECT_EQ(Alloc(m, 2, 12), Ids({2, 1, 0}));  // evicts block 0
  Free(m, 2);
  EXPECT_DEATH(m.Allocate(3, 5, &hit), "stale PrefixHit");
}

}  // namespace
}  // namespace kiln
