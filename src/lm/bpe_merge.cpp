// Byte-level BPE's merges of one piece (tokenizer::impl::merge_all): the adjacent pair of lowest
// rank first, the leftmost of equals, as the `tokenizers` library merges them.

#include "lm/tokenizer_impl.hpp"

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace cotensor::lm {

// Merges the adjacent pair of lowest rank (the leftmost of equals) until none is in the table,
// as `tokenizers` does: a heap of candidate pairs by (rank, position) over a linked list of
// symbols, a candidate checked when it comes out (its symbols may have merged since) —
// O(n log n) in the piece's length, not O(n^2) (a piece can be a megabyte of letters).
void tokenizer::impl::merge_all(std::vector<std::int32_t>& symbols) const {
  const auto n = static_cast<std::int64_t>(symbols.size());
  if (n < 2) {
    return;
  }
  struct candidate {
    std::int32_t rank;
    std::int64_t left;  // the position of its left symbol
    std::int32_t left_id, right_id, merged;
    bool operator>(const candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<std::int64_t> next(static_cast<std::size_t>(n));
  std::vector<std::int64_t> prev(static_cast<std::size_t>(n));
  std::vector<bool> alive(static_cast<std::size_t>(n), true);
  for (std::int64_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap;
  const auto offer = [&](std::int64_t left) {
    if (left < 0 || next[left] < 0) {
      return;
    }
    const std::int32_t a = symbols[left];
    const std::int32_t b = symbols[next[left]];
    if (const auto m = merges.find(pair_key(a, b)); m != merges.end()) {
      heap.push({m->second.first, left, a, b, m->second.second});
    }
  };
  for (std::int64_t i = 0; i + 1 < n; ++i) {
    offer(i);
  }
  while (!heap.empty()) {
    const candidate c = heap.top();
    heap.pop();
    const std::int64_t right = next[c.left];
    if (!alive[c.left] || right < 0 || symbols[c.left] != c.left_id ||
        symbols[right] != c.right_id) {
      continue;  // stale: a symbol of the pair has merged since
    }
    symbols[c.left] = c.merged;
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] >= 0) {
      prev[next[right]] = c.left;
    }
    offer(prev[c.left]);
    offer(c.left);
  }
  std::size_t out = 0;
  for (std::int64_t i = 0; i >= 0; i = next[i]) {
    symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

}  // namespace cotensor::lm
