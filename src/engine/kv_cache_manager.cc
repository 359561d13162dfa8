#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/hash.h"

namespace kiln {
namespace {

constexpr int32_t kNone = -1;
// The chain's value before block 0: the "parent hash" of a request's first block.
constexpr uint64_t kRootHash = 0x6b696c6e2d6b7631ULL;

}  // namespace

struct KvCacheManager::Impl {
  // One pool block. Links are block ids (kNone = none); the free queue's sentinel is num_blocks.
  struct Block {
    int32_t ref = 0;
    bool is_cached = false;
    // Intrusive free queue (valid while in_free_queue).
    bool in_free_queue = false;
    int32_t prev_free = kNone;
    int32_t next_free = kNone;
    // Valid while is_cached: the index entry and what a hit must match.
    uint64_t hash = 0;
    uint64_t serial = 0;             // unique among all blocks ever cached, never reused; 0 = none
    uint64_t parent_serial = 0;      // serial of the cached block before it in its chain; 0 = first
    int32_t prev_same_hash = kNone;  // blocks sharing `hash` form a doubly-linked chain
    int32_t next_same_hash = kNone;
    int32_t adapter_id = 0;
    std::string cache_salt;
    // The block's token ids live in tokens_[id * block_size, (id + 1) * block_size).
  };

  struct Request {
    std::vector<int32_t> block_table;
    std::vector<int32_t> host_table;  // while swapped out (block_table is then empty)
    // Blocks [0, num_cached_blocks) have been registered (or found already cached, or came
    // from a hit); the chain continues from the last one's hash and (canonical) serial.
    int32_t num_cached_blocks = 0;
    uint64_t chain_hash = kRootHash;
    uint64_t chain_serial = 0;
  };

  explicit Impl(const KvCacheOptions& o) : options(o) {
    CHECK_GE(o.num_blocks, 0) << "KvCacheOptions::num_blocks";
    CHECK_GT(o.block_size, 0) << "KvCacheOptions::block_size";
    CHECK(o.hash_bits >= 1 && o.hash_bits <= 64)
        << "KvCacheOptions::hash_bits must be in [1, 64], got " << o.hash_bits;
    CHECK_GE(o.num_host_blocks, 0) << "KvCacheOptions::num_host_blocks";
    // Popped from the back: block 0 first.
    for (int32_t h = o.num_host_blocks - 1; h >= 0; --h) host_free.push_back(h);
    hash_mask = o.hash_bits == 64 ? ~uint64_t{0} : (uint64_t{1} << o.hash_bits) - 1;
    blocks.resize(o.num_blocks);
    tokens.resize(static_cast<size_t>(o.num_blocks) * o.block_size);
    const int32_t sentinel = o.num_blocks;
    free_prev.assign(o.num_blocks + 1, kNone);
    free_next.assign(o.num_blocks + 1, kNone);
    free_prev[sentinel] = free_next[sentinel] = sentinel;
    for (int32_t b = 0; b < o.num_blocks; ++b) PushFreeBack(b);
  }

  // --- Free queue: a circular doubly-linked list through free_prev/free_next, sentinel last.
  int32_t sentinel() const { return options.num_blocks; }

  void PushFreeBack(int32_t b) {
    DCHECK(!blocks[b].in_free_queue);
    const int32_t last = free_prev[sentinel()];
    free_next[last] = b;
    free_prev[b] = last;
    free_next[b] = sentinel();
    free_prev[sentinel()] = b;
    blocks[b].in_free_queue = true;
    ++num_free;
  }

  void RemoveFree(int32_t b) {
    DCHECK(blocks[b].in_free_queue);
    free_next[free_prev[b]] = free_next[b];
    free_prev[free_next[b]] = free_prev[b];
    free_prev[b] = free_next[b] = kNone;
    blocks[b].in_free_queue = false;
    --num_free;
  }

  int32_t PopFreeFront() {
    const int32_t b = free_next[sentinel()];
    CHECK_NE(b, sentinel()) << "KvCacheManager: pop from an empty free queue";
    RemoveFree(b);
    return b;
  }

  // The next free block for a table, its hash dropped if it was cached, with ref 1.
  int32_t TakeFreeBlock() {
    const int32_t b = PopFreeFront();
    Block& blk = blocks[b];
    if (blk.is_cached) {
      RemoveFromIndex(b);
      ++stats.num_evictions;
    }
    blk.ref = 1;
    return b;
  }

  // Drops a request's device table (last block first, see Free) and its prefix-cache chain.
  void ReleaseTable(RequestId id, Request& req) {
    // NOTE: last block first, so a sequence's tail is evicted before its (more shareable) head.
    for (auto b = req.block_table.rbegin(); b != req.block_table.rend(); ++b) {
      Block& blk = blocks[*b];
      CHECK_GT(blk.ref, 0) << "KvCacheManager: block " << *b << " of request " << id;
      if (--blk.ref == 0) PushFreeBack(*b);
    }
    req.block_table.clear();
    req.num_cached_blocks = 0;
    req.chain_hash = kRootHash;
    req.chain_serial = 0;
  }

  // --- Hash index: hash -> first block of the chain of cached blocks with that hash.
  std::span<const int32_t> BlockTokens(int32_t b) const {
    return {tokens.data() + static_cast<size_t>(b) * options.block_size,
            static_cast<size_t>(options.block_size)};
  }

  uint64_t BlockHash(uint64_t parent_hash, std::span<const int32_t> block_tokens,
                     int32_t adapter_id, uint64_t salt_hash) const {
    uint64_t h = HashInt32s(block_tokens, parent_hash);
    h = HashCombine(h, static_cast<uint32_t>(adapter_id));
    h = HashCombine(h, salt_hash);
    return h & hash_mask;
  }

  // The cached block under `hash` whose content and parent equal the given ones, or kNone.
  // NOTE: a hash match alone is never trusted, so a collision can only cause a miss.
  int32_t FindVerified(uint64_t hash, std::span<const int32_t> block_tokens, uint64_t parent_serial,
                       const PrefixCacheKey& key) const {
    auto it = hash_to_block.find(hash);
    if (it == hash_to_block.end()) return kNone;
    for (int32_t b = it->second; b != kNone; b = blocks[b].next_same_hash) {
      const Block& blk = blocks[b];
      if (blk.parent_serial != parent_serial || blk.adapter_id != key.adapter_id) continue;
      const std::span<const int32_t> cached = BlockTokens(b);
      if (!std::equal(cached.begin(), cached.end(), block_tokens.begin())) continue;
      if (blk.cache_salt != key.cache_salt) continue;
      return b;
    }
    return kNone;
  }

  void AddToIndex(int32_t b, uint64_t hash, std::span<const int32_t> block_tokens,
                  uint64_t parent_serial, const PrefixCacheKey& key) {
    Block& blk = blocks[b];
    DCHECK(!blk.is_cached);
    std::copy(block_tokens.begin(), block_tokens.end(),
              tokens.begin() + static_cast<size_t>(b) * options.block_size);
    blk.is_cached = true;
    blk.hash = hash;
    blk.serial = next_serial++;
    blk.parent_serial = parent_serial;
    blk.adapter_id = key.adapter_id;
    blk.cache_salt = key.cache_salt;
    auto [it, inserted] = hash_to_block.try_emplace(hash, b);
    blk.prev_same_hash = kNone;
    blk.next_same_hash = inserted ? kNone : it->second;
    if (!inserted) {
      blocks[it->second].prev_same_hash = b;
      it->second = b;
    }
    ++num_cached;
  }

  void RemoveFromIndex(int32_t b) {
    Block& blk = blocks[b];
    DCHECK(blk.is_cached);
    if (blk.next_same_hash != kNone) blocks[blk.next_same_hash].prev_same_hash = blk.prev_same_hash;
    if (blk.prev_same_hash != kNone) {
      blocks[blk.prev_same_hash].next_same_hash = blk.next_same_hash;
    } else if (blk.next_same_hash != kNone) {
      hash_to_block[blk.hash] = blk.next_same_hash;
    } else {
      hash_to_block.erase(blk.hash);
    }
    blk.is_cached = false;
    blk.prev_same_hash = blk.next_same_hash = kNone;
    blk.serial = blk.parent_serial = 0;
    blk.hash = 0;
    blk.cache_salt.clear();
    --num_cached;
  }

  const KvCacheOptions options;
  uint64_t hash_mask = 0;
  std::vector<Block> blocks;
  std::vector<int32_t> tokens;  // [num_blocks * block_size], meaningful for cached blocks
  std::vector<int32_t> free_prev, free_next;  // [num_blocks + 1]
  int32_t num_free = 0;
  int32_t num_cached = 0;
  uint64_t next_serial = 1;
  std::unordered_map<uint64_t, int32_t> hash_to_block;
  std::unordered_map<RequestId, Request> requests;
  std::vector<int32_t> host_free;  // free host blocks (a stack)
  KvCacheStats stats;
};

KvCacheManager::KvCacheManager(const KvCacheOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
KvCacheManager::~KvCacheManager() = default;
KvCacheManager::KvCacheManager(KvCacheManager&&) noexcept = default;
KvCacheManager& KvCacheManager::operator=(KvCacheManager&&) noexcept = default;

int32_t KvCacheManager::block_size() const { return impl_->options.block_size; }
int32_t KvCacheManager::num_blocks() const { return impl_->options.num_blocks; }
int32_t KvCacheManager::NumFreeBlocks() const { return impl_->num_free; }

int32_t KvCacheManager::NumBlocksFor(int32_t num_tokens) const {
  CHECK_GE(num_tokens, 0);
  const int64_t bs = impl_->options.block_size;
  return static_cast<int32_t>((int64_t{num_tokens} + bs - 1) / bs);
}

PrefixHit KvCacheManager::FindCachedPrefix(std::span<const int32_t> token_ids,
                                           const PrefixCacheKey& key) {
  Impl& m = *impl_;
  PrefixHit hit;
  if (!m.options.enable_prefix_caching) return hit;
  ++m.stats.num_lookups;
  m.stats.num_lookup_tokens += static_cast<int64_t>(token_ids.size());
  const size_t bs = static_cast<size_t>(m.options.block_size);
  // NOTE: cap at n - 1 tokens so that the last prompt token is still computed and yields logits.
  const size_t max_blocks = token_ids.empty() ? 0 : (token_ids.size() - 1) / bs;
  const uint64_t salt_hash = HashBytes(key.cache_salt);
  uint64_t parent_hash = kRootHash;
  uint64_t parent_serial = 0;
  for (size_t i = 0; i < max_blocks; ++i) {
    const std::span<const int32_t> block_tokens = token_ids.subspan(i * bs, bs);
    const uint64_t h = m.BlockHash(parent_hash, block_tokens, key.adapter_id, salt_hash);
    const int32_t b = m.FindVerified(h, block_tokens, parent_serial, key);
    if (b == kNone) break;
    hit.block_ids.push_back(b);
    parent_hash = h;
    parent_serial = m.blocks[b].serial;
  }
  hit.num_tokens = static_cast<int32_t>(hit.block_ids.size() * bs);
  m.stats.num_hit_tokens += hit.num_tokens;
  return hit;
}

std::optional<std::span<const int32_t>> KvCacheManager::Allocate(RequestId id, int32_t num_tokens,
                                                                 const PrefixHit* hit) {
  Impl& m = *impl_;
  const int32_t num_needed_total = NumBlocksFor(num_tokens);
  auto it = m.requests.find(id);
  const int32_t table_size =
      it == m.requests.end() ? 0 : static_cast<int32_t>(it->second.block_table.size());
  int32_t num_hit_blocks = 0;
  int32_t num_hit_free = 0;  // hit blocks in the free queue: reviving them shrinks it
  if (hit != nullptr) {
    CHECK_EQ(table_size, 0) << "KvCacheManager::Allocate: a PrefixHit for request " << id
                            << ", which already has a block table";
    num_hit_blocks = static_cast<int32_t>(hit->block_ids.size());
    CHECK_EQ(hit->num_tokens, int64_t{num_hit_blocks} * m.options.block_size)
        << "KvCacheManager::Allocate: malformed PrefixHit";
    uint64_t parent_serial = 0;
    for (int32_t b : hit->block_ids) {
      CHECK(b >= 0 && b < m.options.num_blocks) << "KvCacheManager::Allocate: hit block " << b;
      const Impl::Block& blk = m.blocks[b];
      // A hit is only valid until the next allocation: one that popped a hit block dropped
      // its hash (or re-cached it under a new serial).
      CHECK(blk.is_cached && blk.parent_serial == parent_serial)
          << "KvCacheManager::Allocate: stale PrefixHit for request " << id << ": block " << b
          << " was evicted since FindCachedPrefix";
      parent_serial = blk.serial;
      if (blk.ref == 0) ++num_hit_free;
    }
  }
  const int32_t num_new = std::max(0, num_needed_total - table_size - num_hit_blocks);
  if (num_new > m.num_free - num_hit_free) return std::nullopt;
  if (it == m.requests.end()) it = m.requests.try_emplace(id).first;
  Impl::Request& req = it->second;
  if (hit != nullptr && num_hit_blocks > 0) {
    // Revive first so that the pops below cannot take a hit block.
    for (int32_t b : hit->block_ids) {
      Impl::Block& blk = m.blocks[b];
      if (blk.ref == 0) m.RemoveFree(b);
      ++blk.ref;
      req.block_table.push_back(b);
    }
    const Impl::Block& last = m.blocks[hit->block_ids.back()];
    req.num_cached_blocks = num_hit_blocks;
    req.chain_hash = last.hash;
    req.chain_serial = last.serial;
  }
  CHECK(req.host_table.empty()) << "KvCacheManager::Allocate: request " << id
                                << " is swapped out (SwapIn first)";
  for (int32_t i = 0; i < num_new; ++i) req.block_table.push_back(m.TakeFreeBlock());
#ifndef NDEBUG
  CheckInvariants();
#endif
  return std::span<const int32_t>(req.block_table);
}

void KvCacheManager::CacheFullBlocks(RequestId id, std::span<const int32_t> token_ids,
                                     int32_t num_computed_tokens, const PrefixCacheKey& key) {
  Impl& m = *impl_;
  if (!m.options.enable_prefix_caching) return;
  auto it = m.requests.find(id);
  CHECK(it != m.requests.end()) << "KvCacheManager::CacheFullBlocks: unknown request " << id;
  Impl::Request& req = it->second;
  CHECK(num_computed_tokens >= 0 && static_cast<size_t>(num_computed_tokens) <= token_ids.size())
      << "KvCacheManager::CacheFullBlocks: request " << id << " num_computed_tokens "
      << num_computed_tokens << " with " << token_ids.size() << " token ids";
  const int32_t bs = m.options.block_size;
  const int32_t num_full = num_computed_tokens / bs;
  CHECK_LE(num_full, static_cast<int32_t>(req.block_table.size()))
      << "KvCacheManager::CacheFullBlocks: request " << id << " has fewer blocks than computed";
  if (num_full <= req.num_cached_blocks) return;
  const uint64_t salt_hash = HashBytes(key.cache_salt);
  for (int32_t i = req.num_cached_blocks; i < num_full; ++i) {
    const std::span<const int32_t> block_tokens =
        token_ids.subspan(static_cast<size_t>(i) * bs, static_cast<size_t>(bs));
    const uint64_t h = m.BlockHash(req.chain_hash, block_tokens, key.adapter_id, salt_hash);
    const int32_t b = req.block_table[i];
    CHECK(!m.blocks[b].is_cached) << "KvCacheManager::CacheFullBlocks: request " << id << " block "
                                  << b << " at " << i << " is already cached";
    const int32_t same = m.FindVerified(h, block_tokens, req.chain_serial, key);
    if (same != kNone) {
      // NOTE: keep the duplicate private; later blocks chain onto the indexed copy, whose
      // content (and so K/V) is the same.
      req.chain_serial = m.blocks[same].serial;
    } else {
      m.AddToIndex(b, h, block_tokens, req.chain_serial, key);
      req.chain_serial = m.blocks[b].serial;
    }
    req.chain_hash = h;
  }
  req.num_cached_blocks = num_full;
#ifndef NDEBUG
  CheckInvariants();
#endif
}

void KvCacheManager::Free(RequestId id) {
  Impl& m = *impl_;
  auto it = m.requests.find(id);
  if (it == m.requests.end()) return;
  m.ReleaseTable(id, it->second);
  for (int32_t h : it->second.host_table) m.host_free.push_back(h);
  m.requests.erase(it);
#ifndef NDEBUG
  CheckInvariants();
#endif
}

bool KvCacheManager::SwapOut(RequestId id, int32_t num_tokens, std::vector<BlockCopy>* copies) {
  Impl& m = *impl_;
  auto it = m.requests.find(id);
  CHECK(it != m.requests.end()) << "KvCacheManager::SwapOut: unknown request " << id;
  Impl::Request& req = it->second;
  const int32_t n = NumBlocksFor(num_tokens);
  CHECK(num_tokens > 0 && n <= static_cast<int32_t>(req.block_table.size()))
      << "KvCacheManager::SwapOut: request " << id << " has " << req.block_table.size()
      << " blocks, not the " << n << " that " << num_tokens << " tokens fill";
  CHECK(req.host_table.empty()) << "KvCacheManager::SwapOut: request " << id << " already swapped";
  if (n > static_cast<int32_t>(m.host_free.size())) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t h = m.host_free.back();
    m.host_free.pop_back();
    req.host_table.push_back(h);
    copies->push_back({req.block_table[i], h});
  }
  m.ReleaseTable(id, req);
  m.stats.num_swapped_out_blocks += n;
#ifndef NDEBUG
  CheckInvariants();
#endif
  return true;
}

std::optional<std::span<const int32_t>> KvCacheManager::SwapIn(RequestId id, int32_t num_tokens,
                                                               std::vector<BlockCopy>* copies) {
  Impl& m = *impl_;
  auto it = m.requests.find(id);
  CHECK(it != m.requests.end()) << "KvCacheManager::SwapIn: unknown request " << id;
  Impl::Request& req = it->second;
  const int32_t num_host = static_cast<int32_t>(req.host_table.size());
  CHECK(num_host > 0 && req.block_table.empty())
      << "KvCacheManager::SwapIn: request " << id << " is not swapped out";
  const int32_t n = NumBlocksFor(num_tokens);
  CHECK_GE(n, num_host) << "KvCacheManager::SwapIn: request " << id << " swapped " << num_host
                        << " blocks, more than " << num_tokens << " tokens fill";
  if (n > m.num_free) return std::nullopt;
  for (int32_t i = 0; i < n; ++i) req.block_table.push_back(m.TakeFreeBlock());
  for (int32_t i = 0; i < num_host; ++i) {
    copies->push_back({req.block_table[i], req.host_table[i]});
    m.host_free.push_back(req.host_table[i]);
  }
  req.host_table.clear();
  m.stats.num_swapped_in_blocks += num_host;
#ifndef NDEBUG
  CheckInvariants();
#endif
  return std::span<const int32_t>(req.block_table);
}

int32_t KvCacheManager::num_host_blocks() const { return impl_->options.num_host_blocks; }

int32_t KvCacheManager::NumFreeHostBlocks() const {
  return static_cast<int32_t>(impl_->host_free.size());
}

std::span<const int32_t> KvCacheManager::HostBlockTable(RequestId id) const {
  auto it = impl_->requests.find(id);
  if (it == impl_->requests.end()) return {};
  return it->second.host_table;
}

std::span<const int32_t> KvCacheManager::BlockTable(RequestId id) const {
  auto it = impl_->requests.find(id);
  if (it == impl_->requests.end()) return {};
  return it->second.block_table;
}

bool KvCacheManager::ResetPrefixCache() {
  Impl& m = *impl_;
  if (m.num_free != m.options.num_blocks) return false;
  for (int32_t b = 0; b < m.options.num_blocks; ++b) {
    if (m.blocks[b].is_cached) m.RemoveFromIndex(b);
  }
  // Requests left have no blocks, so no chain state to reset.
#ifndef NDEBUG
  CheckInvariants();
#endif
  return true;
}

const KvCacheStats& KvCacheManager::stats() const { return impl_->stats; }

int32_t KvCacheManager::RefCount(int32_t block_id) const {
  CHECK(block_id >= 0 && block_id < impl_->options.num_blocks) << "block " << block_id;
  return impl_->blocks[block_id].ref;
}

bool KvCacheManager::IsCached(int32_t block_id) const {
  CHECK(block_id >= 0 && block_id < impl_->options.num_blocks) << "block " << block_id;
  return impl_->blocks[block_id].is_cached;
}

std::vector<int32_t> KvCacheManager::FreeQueue() const {
  const Impl& m = *impl_;
  std::vector<int32_t> queue;
  queue.reserve(m.num_free);
  for (int32_t b = m.free_next[m.sentinel()]; b != m.sentinel(); b = m.free_next[b]) {
    queue.push_back(b);
  }
  return queue;
}

void KvCacheManager::CheckInvariants() const {
  const Impl& m = *impl_;
  const int32_t n = m.options.num_blocks;
  constexpr const char* kWhere = "KvCacheManager invariant: ";

  // Free queue: a well-linked list of exactly the blocks flagged in_free_queue, all with ref 0.
  int32_t queue_len = 0;
  for (int32_t prev = m.sentinel(), b = m.free_next[prev]; b != m.sentinel();
       prev = b, b = m.free_next[b]) {
    CHECK(b >= 0 && b < n) << kWhere << "free queue holds bad id " << b;
    CHECK_EQ(m.free_prev[b], prev) << kWhere << "free queue back link of block " << b;
    CHECK(m.blocks[b].in_free_queue) << kWhere << "block " << b << " in the free queue unflagged";
    CHECK_EQ(m.blocks[b].ref, 0) << kWhere << "block " << b << " in the free queue has a ref";
    ++queue_len;
    CHECK_LE(queue_len, n) << kWhere << "free queue has a cycle";
  }
  CHECK_EQ(queue_len, m.num_free) << kWhere << "free queue length vs NumFreeBlocks()";

  // Ref counts equal the number of tables holding each block; no table holds a block twice.
  std::vector<int32_t> holders(n, 0);
  std::vector<RequestId> last_holder(n, 0);
  std::vector<bool> has_holder(n, false);
  for (const auto& [id, req] : m.requests) {
    CHECK(req.num_cached_blocks >= 0 &&
          req.num_cached_blocks <= static_cast<int32_t>(req.block_table.size()))
        << kWhere << "request " << id << " num_cached_blocks " << req.num_cached_blocks;
    for (size_t i = 0; i < req.block_table.size(); ++i) {
      const int32_t b = req.block_table[i];
      CHECK(b >= 0 && b < n) << kWhere << "request " << id << " holds bad block id " << b;
      CHECK(!(has_holder[b] && last_holder[b] == id))
          << kWhere << "request " << id << " holds block " << b << " twice";
      has_holder[b] = true;
      last_holder[b] = id;
      ++holders[b];
      // Only hit or registered blocks are cached; later ones are still private.
      if (static_cast<int32_t>(i) >= req.num_cached_blocks) {
        CHECK(!m.blocks[b].is_cached) << kWhere << "request " << id << " block " << b << " at " << i
                                      << " is cached past its cached prefix";
      }
    }
  }
  // Host blocks: each free or held by exactly one swapped-out request.
  const int32_t num_host = m.options.num_host_blocks;
  std::vector<int32_t> host_owners(num_host, 0);
  for (int32_t h : m.host_free) {
    CHECK(h >= 0 && h < num_host) << kWhere << "free host block id " << h;
    ++host_owners[h];
  }
  for (const auto& [id, req] : m.requests) {
    CHECK(req.host_table.empty() || req.block_table.empty())
        << kWhere << "request " << id << " holds device and host blocks";
    for (int32_t h : req.host_table) {
      CHECK(h >= 0 && h < num_host) << kWhere << "request " << id << " holds host block " << h;
      ++host_owners[h];
    }
  }
  for (int32_t h = 0; h < num_host; ++h) {
    CHECK_EQ(host_owners[h], 1) << kWhere << "host block " << h << " free or held once";
  }

  int32_t num_cached = 0;
  for (int32_t b = 0; b < n; ++b) {
    const Impl::Block& blk = m.blocks[b];
    CHECK_EQ(blk.ref, holders[b]) << kWhere << "block " << b << " ref vs tables holding it";
    CHECK_EQ(blk.in_free_queue, blk.ref == 0)
        << kWhere << "block " << b << " (ref " << blk.ref << ") free-queue membership";
    if (blk.is_cached) {
      ++num_cached;
      CHECK(m.options.enable_prefix_caching) << kWhere << "block " << b << " cached while off";
      CHECK(blk.serial > 0 && blk.serial < m.next_serial) << kWhere << "block " << b << " serial";
      CHECK_LT(blk.parent_serial, blk.serial) << kWhere << "block " << b << " parent serial";
      CHECK_EQ(blk.hash & ~m.hash_mask, 0u) << kWhere << "block " << b << " hash bits";
    }
  }
  CHECK_EQ(num_cached, m.num_cached) << kWhere << "cached block count";

  // The index holds each cached block exactly once, under its own hash, and no two cached
  // blocks hold the same verified content.
  int32_t num_indexed = 0;
  std::vector<bool> seen(n, false);
  for (const auto& [hash, head] : m.hash_to_block) {
    CHECK(head >= 0 && head < n) << kWhere << "index head " << head;
    CHECK_EQ(m.blocks[head].prev_same_hash, kNone) << kWhere << "index head " << head;
    for (int32_t b = head; b != kNone; b = m.blocks[b].next_same_hash) {
      const Impl::Block& blk = m.blocks[b];
      CHECK(b >= 0 && b < n && !seen[b]) << kWhere << "hash chain revisits block " << b;
      seen[b] = true;
      CHECK(blk.is_cached) << kWhere << "uncached block " << b << " in the index";
      CHECK_EQ(blk.hash, hash) << kWhere << "block " << b << " indexed under another hash";
      if (blk.next_same_hash != kNone) {
        CHECK_EQ(m.blocks[blk.next_same_hash].prev_same_hash, b)
            << kWhere << "hash chain back link after block " << b;
      }
      for (int32_t o = blk.next_same_hash; o != kNone; o = m.blocks[o].next_same_hash) {
        const Impl::Block& other = m.blocks[o];
        const std::span<const int32_t> bt = m.BlockTokens(b), ot = m.BlockTokens(o);
        CHECK(!(other.parent_serial == blk.parent_serial && other.adapter_id == blk.adapter_id &&
                other.cache_salt == blk.cache_salt && std::equal(bt.begin(), bt.end(), ot.begin())))
            << kWhere << "blocks " << b << " and " << o << " cache the same content";
        CHECK_NE(other.serial, blk.serial) << kWhere << "blocks " << b << " and " << o;
      }
      ++num_indexed;
    }
  }
  CHECK_EQ(num_indexed, num_cached) << kWhere << "indexed vs cached blocks";
}

}  // namespace kiln
