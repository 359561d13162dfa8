// KvCacheManager: paged KV blocks, per-request block tables and prefix caching (DESIGN.md §3).
//
// The pool holds num_blocks blocks of block_size token slots. A request's block table lists the
// blocks that hold its positions [0, num_tokens): position p lives in block_table[p / block_size]
// at offset p % block_size.
//
//   request tokens:  | block 0 (full) | block 1 (full) | block 2 (partial) |
//   block table:     [      17       ,       4        ,        9          ]
//                     ^ cached, ref 2  ^ cached, ref 1   ^ private, never cached while partial
//
// Prefix caching: a full block is content-addressed by a chained hash
//   hash(block i) = H(hash(block i-1), token ids of block i, adapter id, cache salt)
// so the hash of block i names the whole prefix up to it. A lookup walks the request's full
// blocks from the first and stops at the first miss. A hash match is never trusted alone: the
// cached block's own token ids, adapter id and salt must equal the request's, and its parent must
// be exactly the block matched one step before (checked through a serial number every cached
// block receives and its children record), so a hash collision can only cause a miss.
//
// Block life cycle:
//   free, uncached --Allocate--> in use (ref >= 1) --Free, ref 0--> free (cached or not)
//   in use --CacheFullBlocks--> in use + cached (hash registered)
//   free + cached --hit--> in use (ref 1), removed from the free queue
//   free + cached --popped by an allocation--> evicted (hash dropped), reused
// Free blocks form one queue: allocations pop from the front; Free() appends a request's blocks
// to the back in reverse order (its last block first), so the least recently used cached blocks
// and the tails of sequences are evicted first (LRU).
//
// Swap space: num_host_blocks blocks in the runner's host memory. SwapOut moves a preempted
// request's computed blocks there (the caller copies their contents, BlockCopy) and gives its
// device blocks back as Free does; SwapIn gives it a fresh device table and returns the host
// blocks. A swapped-in table starts private: its blocks are registered in the prefix cache again
// by the next CacheFullBlocks, from block 0.
//
// Thread safety: none; owned by the scheduler on the engine thread.
// Invariants (CheckInvariants): each block is either in the free queue (ref 0) or referenced
// (ref = number of block tables holding it); the hash map indexes exactly the cached blocks;
// NumFreeBlocks() == free queue length; no block table holds a block twice; no two cached blocks
// hold the same verified content (tokens, adapter, salt, parent); nothing is cached while prefix
// caching is off; each host block is either free or in exactly one request's host table, and no
// request holds both device and host blocks. Debug builds check them after every mutating call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/step.h"

namespace kiln {

using RequestId = int64_t;

struct KvCacheOptions {
  int32_t num_blocks = 0;             // blocks in the pool (from the memory plan)
  int32_t block_size = 16;            // tokens per block; smaller = finer sharing, bigger tables
  bool enable_prefix_caching = true;  // reuse full blocks across requests
  // Test-only: keep just the low hash_bits bits (1..64) of every block hash, so that tests can
  // force hash collisions and show they never give a wrong hit (the index keeps several blocks
  // per hash, so they do not even cost a miss, only longer scans). Leave at 64 in production.
  int32_t hash_bits = 64;
  // Host blocks for swap-to-host preemption (0 = none: preemption recomputes).
  int32_t num_host_blocks = 0;
};

// What makes two identical token prefixes shareable: the same adapter and the same tenant salt.
struct PrefixCacheKey {
  int32_t adapter_id = 0;  // 0 = base model
  std::string cache_salt;  // per-tenant isolation; "" = shared
};

struct PrefixHit {
  std::vector<int32_t> block_ids;  // the cached blocks, in order (not yet referenced)
  int32_t num_tokens = 0;          // block_ids.size() * block_size
};

struct KvCacheStats {
  int64_t num_lookups = 0;        // FindCachedPrefix calls (while prefix caching is on)
  int64_t num_lookup_tokens = 0;  // tokens asked about
  int64_t num_hit_tokens = 0;     // tokens found
  int64_t num_evictions = 0;      // cached blocks whose hash was dropped to reuse the block
  int64_t num_swapped_out_blocks = 0;
  int64_t num_swapped_in_blocks = 0;
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheOptions& options);

  int32_t block_size() const;
  int32_t num_blocks() const;
  // Blocks not referenced by any request (cached-but-free blocks count: they can be evicted).
  int32_t NumFreeBlocks() const;
  // Blocks a table for num_tokens tokens needs: ceil(num_tokens / block_size).
  int32_t NumBlocksFor(int32_t num_tokens) const;

  // The longest verified cached prefix of `token_ids` in full blocks, capped at
  // token_ids.size() - 1 tokens (NOTE: the last token must still be computed to yield logits).
  // Returns an empty hit (and counts nothing) when prefix caching is off. Changes nothing but
  // the stats.
  PrefixHit FindCachedPrefix(std::span<const int32_t> token_ids, const PrefixCacheKey& key);

  // Grows request `id`'s block table so that it covers `num_tokens` positions. For a request
  // without a table yet, `hit` (from FindCachedPrefix in the same step, nothing allocated in
  // between) becomes the table's head and its blocks are referenced. Returns the whole block
  // table, or nullopt — with nothing changed — when the free blocks (counting evictable
  // cached ones, minus those `hit` itself revives) do not suffice.
  // A table never shrinks: a num_tokens it already covers returns it unchanged. The span stays
  // valid until the next Allocate or Free of `id`.
  // REQUIRES: hit is non-null only for a request without a table (or with an empty one);
  // num_tokens >= 0. A stale hit (one of its blocks evicted since) aborts through CHECK.
  std::optional<std::span<const int32_t>> Allocate(RequestId id, int32_t num_tokens,
                                                   const PrefixHit* hit = nullptr);

  // Registers the full blocks of request `id` among its first num_computed_tokens positions
  // (whose K/V are now written) in the prefix cache. `token_ids` are the request's tokens (at
  // least num_computed_tokens). Blocks already cached are skipped; a block whose content is
  // already cached under another block stays private (no duplicate index entry), and the
  // request's later blocks chain onto that other block. Incremental: only blocks past those
  // handled by earlier calls are hashed. A no-op when prefix caching is off.
  // REQUIRES: `id` has a table covering num_computed_tokens; every call for a request passes the
  // same `key` (the one given to FindCachedPrefix) and tokens that extend the earlier ones.
  void CacheFullBlocks(RequestId id, std::span<const int32_t> token_ids,
                       int32_t num_computed_tokens, const PrefixCacheKey& key);

  // Drops request `id`'s table: each block's ref count falls; blocks reaching 0 join the back
  // of the free queue, last block first. Its host blocks (if swapped out) become free. A no-op
  // for an unknown id.
  void Free(RequestId id);

  // Swap-out: request `id`'s blocks holding its first num_tokens positions get host blocks, one
  // BlockCopy each (device -> host) is appended to `copies`, and its device table is dropped as
  // by Free. Returns false, with nothing changed, when too few host blocks are free.
  // REQUIRES: `id` has a device table covering num_tokens (> 0) and no host blocks.
  bool SwapOut(RequestId id, int32_t num_tokens, std::vector<BlockCopy>* copies);

  // Swap-in: gives swapped-out request `id` a new device table covering num_tokens positions
  // (at least the swapped ones), appends one BlockCopy per host block (host -> device, same
  // order as the table) to `copies` and frees the host blocks. Returns the table, or nullopt
  // with nothing changed when the free device blocks do not suffice.
  // REQUIRES: `id` is swapped out (host blocks, no device table).
  std::optional<std::span<const int32_t>> SwapIn(RequestId id, int32_t num_tokens,
                                                 std::vector<BlockCopy>* copies);

  int32_t num_host_blocks() const;
  int32_t NumFreeHostBlocks() const;
  // The host blocks of a swapped-out request (empty otherwise).
  std::span<const int32_t> HostBlockTable(RequestId id) const;

  // The block table of `id` (empty for an unknown id).
  std::span<const int32_t> BlockTable(RequestId id) const;

  // Drops every cached hash (e.g. after weights change) and returns true, but only when no
  // request holds a block (NumFreeBlocks() == num_blocks()); otherwise returns false with nothing
  // changed, since blocks in use would keep stale content indexed. The free queue order and the
  // stats stay as they are (dropped hashes are not counted as evictions).
  bool ResetPrefixCache();

  const KvCacheStats& stats() const;

  // Aborts through CHECK with a description when an invariant is broken. O(num_blocks).
  void CheckInvariants() const;

  // Introspection for exact tests.
  int32_t RefCount(int32_t block_id) const;
  bool IsCached(int32_t block_id) const;
  std::vector<int32_t> FreeQueue() const;  // front (next to be allocated) first

  ~KvCacheManager();
  KvCacheManager(KvCacheManager&&) noexcept;
  KvCacheManager& operator=(KvCacheManager&&) noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
