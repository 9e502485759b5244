// The key/value cache's block bookkeeping and prefix cache (kv_blocks.hpp).

#include "lm/kv_blocks.hpp"

#include "support/assert.hpp"

#include <algorithm>

namespace cotensor::lm {

kv_blocks::kv_blocks(std::int64_t total) : blocks_(static_cast<std::size_t>(total)) {
  for (std::int64_t b = total - 1; b >= 0; --b) {
    free_.push_back(b);
  }
}

std::uint64_t kv_blocks::hash_of(std::uint64_t parent, std::span<const std::int32_t> block) {
  // FNV-1a over the parent's hash and the ids, then a splitmix64 finish.
  std::uint64_t h = 0xcbf29ce484222325ULL ^ parent;
  for (const std::int32_t id : block) {
    h = (h ^ static_cast<std::uint32_t>(id)) * 0x100000001b3ULL;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

std::vector<std::uint64_t> kv_blocks::chain(std::span<const std::int32_t> tokens,
                                            std::int64_t block_size) {
  std::vector<std::uint64_t> out;
  std::uint64_t parent = 0;
  for (std::int64_t end = block_size; end <= static_cast<std::int64_t>(tokens.size());
       end += block_size) {
    parent = hash_of(parent, tokens.subspan(static_cast<std::size_t>(end - block_size),
                                            static_cast<std::size_t>(block_size)));
    out.push_back(parent);
  }
  return out;
}

std::vector<std::int64_t> kv_blocks::find(std::span<const std::int32_t> tokens,
                                          std::int64_t block_size) const {
  std::vector<std::int64_t> found;
  std::uint64_t parent = 0;
  for (std::int64_t end = block_size; end <= static_cast<std::int64_t>(tokens.size());
       end += block_size) {
    const auto ids = tokens.subspan(static_cast<std::size_t>(end - block_size),
                                    static_cast<std::size_t>(block_size));
    const std::uint64_t h = hash_of(parent, ids);
    const auto it = cached_.find(h);
    if (it == cached_.end()) {
      break;
    }
    const entry& e = blocks_[static_cast<std::size_t>(it->second)];
    const std::int64_t before = found.empty() ? -1 : found.back();
    const bool same_parent =
        e.parent == before &&
        (before < 0 || e.parent_use == blocks_[static_cast<std::size_t>(before)].use);
    if (!same_parent || !std::equal(ids.begin(), ids.end(), e.tokens.begin(), e.tokens.end())) {
      break;  // a collision: not the same prefix
    }
    found.push_back(it->second);
    parent = h;
  }
  return found;
}

void kv_blocks::hold(std::int64_t block) {
  entry& e = blocks_[static_cast<std::size_t>(block)];
  if (e.refs++ == 0) {
    ++used_;
    if (e.hash) {
      idle_.erase(e.lru);
    }
  }
}

std::int64_t kv_blocks::allocate() {
  std::int64_t block = 0;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    COTENSOR_ASSERT(!idle_.empty());
    block = idle_.front();
    idle_.pop_front();
    entry& e = blocks_[static_cast<std::size_t>(block)];
    cached_.erase(*e.hash);
    e.hash.reset();
    e.tokens.clear();
  }
  entry& e = blocks_[static_cast<std::size_t>(block)];
  ++e.use;  // the blocks published after its old contents no longer follow it
  e.refs = 1;
  ++used_;
  return block;
}

void kv_blocks::release(std::int64_t block) {
  entry& e = blocks_[static_cast<std::size_t>(block)];
  COTENSOR_ASSERT(e.refs > 0);
  if (--e.refs > 0) {
    return;
  }
  --used_;
  if (e.hash) {
    e.lru = idle_.insert(idle_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void kv_blocks::publish(std::int64_t block,
                        std::int64_t parent,
                        std::span<const std::int32_t> ids) {
  entry& e = blocks_[static_cast<std::size_t>(block)];
  if (e.hash) {
    return;
  }
  std::uint64_t parent_hash = 0;
  if (parent >= 0) {
    const entry& p = blocks_[static_cast<std::size_t>(parent)];
    if (!p.hash) {
      return;  // its prefix is not findable: neither is this block
    }
    parent_hash = *p.hash;
  }
  const std::uint64_t h = hash_of(parent_hash, ids);
  if (cached_.contains(h)) {
    return;  // the same prefix in another block (or a collision): this one stays private
  }
  cached_.emplace(h, block);
  e.hash = h;
  e.parent = parent;
  e.parent_use = parent >= 0 ? blocks_[static_cast<std::size_t>(parent)].use : 0;
  e.tokens.assign(ids.begin(), ids.end());
}

}  // namespace cotensor::lm
