#pragma once

// The bookkeeping of a paged key/value cache (vLLM's block manager): which blocks are free,
// which sequences hold which, and the prefix cache — full blocks found again by a hash of their
// tokens and of the blocks before them, shared by reference count. The hash only finds: a block
// is taken when its ids are the prompt's, id for id, and the block it was computed after is the
// one found before it, in the same use (a block reused for other ids drops its followers), so
// a hash collision, accidental or crafted, never shares a wrong block. Blocks no sequence holds
// stay findable until a new block is needed (then the least recently released is reused). Used
// by the generator's thread only: not thread-safe.

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace cotensor::lm {

class kv_blocks {
public:
  explicit kv_blocks(std::int64_t total);

  std::int64_t total() const noexcept { return static_cast<std::int64_t>(blocks_.size()); }
  /// Blocks held by at least one sequence.
  std::int64_t used() const noexcept { return used_; }
  /// Blocks a sequence could be given now: free ones and cached ones no sequence holds.
  std::int64_t available() const noexcept { return total() - used_; }

  /// The blocks already holding `tokens`' full blocks, in order, for as long as they are
  /// found: `block_size` tokens each, chained by hash. Takes nothing.
  std::vector<std::int64_t> find(std::span<const std::int32_t> tokens,
                                 std::int64_t block_size) const;
  /// The chained hashes of `tokens`' full blocks, `block_size` tokens each, as `find` and
  /// `publish` compute them: equal hashes at a block mean (but for a collision) the same
  /// tokens up to its end.
  static std::vector<std::uint64_t> chain(std::span<const std::int32_t> tokens,
                                          std::int64_t block_size);
  /// Whether a sequence holds `block`.
  bool held(std::int64_t block) const noexcept {
    return blocks_[static_cast<std::size_t>(block)].refs > 0;
  }
  /// Takes a reference on `block` (one `find` returned).
  void hold(std::int64_t block);
  /// A block with no content, held once: a free one, else the least recently released cached
  /// one (forgotten). `available() > 0` is a precondition.
  std::int64_t allocate();
  /// Drops a reference; a block no one holds becomes free, or stays cached if published.
  void release(std::int64_t block);
  /// Records that `block`, held, now holds the full block `ids` computed after `parent` (the
  /// sequence's block before it, or -1 for its first): later `find`s return it. Nothing if
  /// that prefix is cached already, or if `parent` was not recorded.
  void publish(std::int64_t block, std::int64_t parent, std::span<const std::int32_t> ids);

private:
  struct entry {
    int refs = 0;
    std::optional<std::uint64_t> hash;      // published: the chained hash of its prefix
    std::int64_t parent = -1;               // the block it was computed after (-1: the first)
    std::uint64_t parent_use = 0;           // that block's `use` then
    std::uint64_t use = 0;                  // how many times the block was allocated
    std::vector<std::int32_t> tokens;       // the block's ids, to check a hash's match
    std::list<std::int64_t>::iterator lru;  // in idle_ when cached and held by none
  };

  // The chained hash of the ids of a block after the blocks whose hash is `parent`.
  static std::uint64_t hash_of(std::uint64_t parent, std::span<const std::int32_t> block);

  std::vector<entry> blocks_;
  std::vector<std::int64_t> free_;
  std::list<std::int64_t> idle_;  // cached blocks held by none, least recently released first
  std::unordered_map<std::uint64_t, std::int64_t> cached_;
  std::int64_t used_ = 0;
};

}  // namespace cotensor::lm
