// The continuous-batching steps (<cotensor/lm.hpp>), on the generator's thread. A step
// retires cancelled sequences, admits waiting ones while the cache has their blocks, packs every
// running sequence's next token and prompt chunks under the token budget into one forward pass,
// then samples each row that ends a sequence's known tokens and hands the token to its reader.

#include "cotensor/ops.hpp"

#include "lm/generator_state.hpp"
#include "lm/sampler.hpp"

#include <algorithm>
#include <unordered_set>

namespace cotensor::lm {

void generator::state::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex);
      wake.wait(lock, [&] { return stopping || poked; });
      if (stopping) {
        return;
      }
      poked = false;
    }
    bool again = false;
    try {
      again = step();
    } catch (...) {
      // Nothing of a step may end the process (an allocation failed, say): every sequence
      // fails with the exception instead, and the generator goes on with new ones.
      fail_all(std::current_exception());
      again = true;
    }
    if (again) {
      const std::lock_guard lock(mutex);
      poked = true;  // go on while there is work
    }
  }
}

namespace {

// One sequence's share of a step: tokens [begin, begin + count) of it, and whether the last of
// them ends its known tokens (its logits pick the next).
struct part {
  sequence::state* s;
  std::size_t begin;
  std::size_t count;
  bool sample;
};

// The rows of `p` whose logits score the prompt's next token (sampling_params::prompt_logprobs):
// [begin, end) of the prompt's first prompt_size - 1, which `p` computes.
std::pair<std::size_t, std::size_t> prompt_rows(const part& p) {
  if (!p.s->params.prompt_logprobs) {
    return {p.begin, p.begin};
  }
  const std::size_t end = std::min(p.begin + p.count, p.s->prompt_size - 1);
  return {p.begin, std::max(p.begin, end)};
}

}  // namespace

bool generator::state::step() {
  // Cancelled sequences give their blocks back; waiting ones come in while there is room.
  std::erase_if(running, [&](const std::shared_ptr<sequence::state>& s) {
    if (s->cancelled.load(std::memory_order_relaxed)) {
      finish(*s, finish_reason::cancelled);
      return true;
    }
    return false;
  });
  {
    std::unique_lock lock(mutex);
    std::erase_if(waiting, [&](const std::shared_ptr<sequence::state>& s) {
      if (s->cancelled.load(std::memory_order_relaxed)) {
        finish(*s, finish_reason::cancelled);  // it holds no block: no pool state touched
        return true;
      }
      return false;
    });
    while (!waiting.empty() && running.size() < options.max_running) {
      std::shared_ptr<sequence::state> s = waiting.front();
      if (!s->cancelled.load(std::memory_order_relaxed)) {
        lock.unlock();
        const bool admitted = admit(*s);
        lock.lock();
        if (!admitted) {
          break;  // in order: the first waiting sequence waits for blocks
        }
        running.push_back(s);
      } else {
        lock.unlock();
        finish(*s, finish_reason::cancelled);
        lock.lock();
      }
      waiting.pop_front();
    }
    figures.waiting = waiting.size();
    figures.running = running.size();
    figures.kv_blocks_used = static_cast<std::size_t>(blocks.used());
  }

  // The batch: one token of each generating sequence (from a rotating start, so a budget
  // smaller than the running set skips each in turn), then prompt chunks.
  std::vector<part> parts;
  std::int64_t budget = options.token_budget;
  const std::size_t n = running.size();
  for (std::size_t i = 0; i < n && budget > 0; ++i) {
    sequence::state& s = *running[(rotation + i) % n];
    if (s.tokens.size() - s.computed == 1 && !s.paused()) {
      parts.push_back({&s, s.computed, 1, true});
      --budget;
    }
  }
  rotation = n == 0 ? 0 : (rotation + 1) % n;
  // Prompts scored token by token bring a row of logits per token to this thread: at most
  // 256 rows a step, all such prompts together (Qwen2's 151,936 floats a row: 156 MB).
  std::int64_t scoring_rows = 256;
  // The full prompt blocks that a sequence before in `running` computes, or will. A prompt
  // whose next block is among them waits (`deferred`) and takes that sequence's blocks from
  // the prefix cache once published: prompts that share a prefix (a request's n choices, a
  // batch with one system prompt) compute it once, though admitted in one step. The first
  // prompt in `running` never waits, so every shared block is computed.
  std::unordered_set<std::uint64_t> claimed;
  const auto block = static_cast<std::size_t>(options.block_size);
  for (const auto& sp : running) {
    sequence::state& s = *sp;
    const bool scoring = s.params.prompt_logprobs.has_value();
    if (options.prefix_caching && !scoring && s.tokens.size() - s.computed > 1) {
      if (s.deferred) {
        adopt(s);
      }
      const std::size_t next = s.computed / block;
      s.deferred = s.computed % block == 0 && next < s.prefix_hashes.size() &&
                   claimed.contains(s.prefix_hashes[next]);
      if (s.deferred) {
        continue;
      }
    }
    for (std::size_t b = s.computed / block; b < s.prefix_hashes.size(); ++b) {
      claimed.insert(s.prefix_hashes[b]);
    }
    const std::size_t left = s.tokens.size() - s.computed;
    if (left > 1 && budget > 0 && (!scoring || scoring_rows > 0)) {
      const std::int64_t chunk =
          scoring ? std::min(options.prefill_chunk, scoring_rows) : options.prefill_chunk;
      const auto count =
          static_cast<std::size_t>(std::min({static_cast<std::int64_t>(left), chunk, budget}));
      parts.push_back({&s, s.computed, count, count == left});
      budget -= static_cast<std::int64_t>(count);
      scoring_rows -= scoring ? static_cast<std::int64_t>(count) : 0;
    }
  }
  if (parts.empty()) {
    return false;
  }

  const std::int64_t bs = options.block_size;
  std::vector<std::int64_t> ids, positions, slots, rows, context, logit_rows;
  std::int64_t width = 1;
  for (const part& p : parts) {
    width = std::max(width, static_cast<std::int64_t>(p.s->blocks.size()));
  }
  std::vector<std::int64_t> tables(parts.size() * static_cast<std::size_t>(width), 0);
  std::uint64_t prompt_tokens = 0;
  for (std::size_t r = 0; r < parts.size(); ++r) {
    const part& p = parts[r];
    std::ranges::copy(p.s->blocks, tables.begin() + static_cast<std::ptrdiff_t>(r) * width);
    for (std::size_t i = p.begin; i < p.begin + p.count; ++i) {
      const auto at = static_cast<std::int64_t>(i);
      ids.push_back(p.s->tokens[i]);
      positions.push_back(at);
      slots.push_back(p.s->blocks[static_cast<std::size_t>(at / bs)] * bs + at % bs);
      rows.push_back(static_cast<std::int64_t>(r));
      context.push_back(at + 1);
      prompt_tokens += i < p.s->prompt_size ? 1 : 0;
    }
    // The rows in order: a part's prompt rows, then its sampled row (its last).
    const auto [first, end] = prompt_rows(p);
    for (std::size_t i = first; i < end; ++i) {
      logit_rows.push_back(static_cast<std::int64_t>(ids.size() - p.count + (i - p.begin)));
    }
    if (p.sample) {
      logit_rows.push_back(static_cast<std::int64_t>(ids.size()) - 1);
    }
  }
  const bool any_rows = !logit_rows.empty();  // rows to sample or to score
  if (!any_rows) {
    logit_rows.push_back(0);  // prompt chunks only: the step still needs one row of logits
  }
  const device d = net->where;
  const auto t = static_cast<std::int64_t>(ids.size());
  // With every row greedy, each row's first largest logit and its value, found on the workers,
  // are all the host reads: 16 rows of GPT-2's 50,257 logits took ~0.5 ms a step on this thread
  // as float32 (a copy of 3.2 MB, then a scan of each row). Else every row's logits.
  const bool greedy = std::ranges::all_of(parts, [](const part& p) {
    const auto [first, end] = prompt_rows(p);
    return first == end && (!p.sample || (is_greedy(p.s->params) && !p.s->params.logprobs &&
                                          !adjusts_logits(p.s->params)));
  });
  std::vector<float> logits;
  std::vector<std::int64_t> firsts;
  std::vector<float> largest;
  try {
    const step_inputs in{
        .ids = from_vector(std::move(ids), {t}, d),
        .positions = from_vector(std::move(positions), {t}, d),
        .slots = from_vector(std::move(slots), {t}, d),
        .sequence = from_vector(std::move(rows), {t}, d),
        .context = from_vector(std::move(context), {t}, d),
        .block_tables =
            from_vector(std::move(tables), {static_cast<std::int64_t>(parts.size()), width}, d),
        .logit_rows = from_vector(logit_rows, {static_cast<std::int64_t>(logit_rows.size())}, d)};
    const tensor out = net->step(in, cache);
    if (!any_rows) {
      out.wait();
    } else if (greedy) {
      // to_vector converts to float32 as astype does, with no op of its own. The largest
      // value is the one at the first largest's index (argmax finds a NaN first, and +inf
      // is the largest), read with a gather rather than a second pass over the logits.
      const tensor first = argmax(out, 1);
      std::vector<std::int64_t> starts(logit_rows.size());
      for (std::size_t r = 0; r < starts.size(); ++r) {
        starts[r] = static_cast<std::int64_t>(r) * net->vocab;
      }
      const tensor at = first + from_vector(std::move(starts), {first.shape()[0]}, d);
      const tensor top = index_select(reshape(out, {out.numel()}), 0, at);
      firsts = first.to_vector<std::int64_t>();
      largest = top.to_vector<float>();
    } else {
      logits = out.to_vector<float>();
    }
  } catch (...) {
    // The step failed: so does every sequence in it (their cache contents are unknown).
    const std::exception_ptr error = std::current_exception();
    for (const part& p : parts) {
      finish(*p.s, finish_reason::error, error);
    }
    std::erase_if(running, [](const auto& s) { return s->blocks.empty(); });
    return true;
  }

  // Sample every finished row first, count, then hand the tokens over: a reader that has its
  // token sees figures that count it.
  const auto vocab = static_cast<std::size_t>(net->vocab);
  std::size_t row = 0;
  struct pick {
    sequence::state* s;
    std::int32_t id;
    std::optional<token_logprobs> logprobs;
  };
  std::vector<pick> picked;
  for (const part& p : parts) {
    sequence::state& s = *p.s;
    s.computed += p.count;
    if (options.prefix_caching) {
      for (; (s.published + 1) * block <= s.computed; ++s.published) {
        blocks.publish(s.blocks[s.published], s.published == 0 ? -1 : s.blocks[s.published - 1],
                       std::span(s.tokens).subspan(s.published * block, block));
      }
    }
    // The prompt's log-probabilities, a row for each of its tokens this part computed but the
    // last: the next prompt token's.
    const auto [first, end] = prompt_rows(p);
    bool failed = false;
    if (first < end && any_rows) {
      std::vector<token_logprobs> scored;
      try {
        for (std::size_t i = first; i < end; ++i) {
          const std::span<const float> row_logits(logits.data() + (row + i - first) * vocab, vocab);
          scored.push_back(logprobs_of(row_logits, s.tokens[i + 1], *s.params.prompt_logprobs));
        }
        const std::lock_guard lock(s.mutex);
        s.prompt_logprobs.insert(s.prompt_logprobs.end(), std::make_move_iterator(scored.begin()),
                                 std::make_move_iterator(scored.end()));
      } catch (...) {
        finish(s, finish_reason::error, std::current_exception());  // non-finite logits
        failed = true;
      }
      row += end - first;
    }
    if (!p.sample || !any_rows) {
      continue;
    }
    const std::size_t r = row++;
    if (failed) {
      continue;
    }
    if (s.params.max_tokens == 0) {
      finish(s, finish_reason::length);  // the prompt alone was asked for
      continue;
    }
    try {
      if (greedy) {
        picked.push_back({&s, pick_greedy(firsts[r], largest[r]), std::nullopt});
      } else {
        const std::span<const float> row_logits(logits.data() + r * vocab, vocab);
        // The bias and penalties on a copy: the log-probabilities stay the model's.
        std::vector<float> adjusted;
        if (adjusts_logits(s.params)) {
          adjusted.assign(row_logits.begin(), row_logits.end());
          const std::span<const std::int32_t> tokens(s.tokens);
          adjust_logits(adjusted, s.params, tokens.first(s.prompt_size),
                        tokens.subspan(s.prompt_size));
        }
        const std::int32_t id =
            sample(adjusted.empty() ? row_logits : std::span<const float>(adjusted), s.params,
                   s.seed, static_cast<std::uint64_t>(s.generated));
        std::optional<token_logprobs> logprobs;
        if (s.params.logprobs) {
          logprobs = logprobs_of(row_logits, id, *s.params.logprobs);
        }
        picked.push_back({&s, id, std::move(logprobs)});  // nothing picked if either threw
      }
    } catch (...) {
      finish(s, finish_reason::error, std::current_exception());  // non-finite logits
    }
  }
  {
    const std::lock_guard lock(mutex);
    ++figures.steps;
    figures.tokens_generated += picked.size();
    figures.prompt_tokens_computed += prompt_tokens;
  }
  for (pick& p : picked) {
    try {
      after_token(*p.s, p.id, std::move(p.logprobs));
    } catch (...) {
      finish(*p.s, finish_reason::error, std::current_exception());
    }
  }
  std::erase_if(running, [](const auto& s) { return s->blocks.empty(); });
  const std::lock_guard lock(mutex);
  figures.running = running.size();
  figures.kv_blocks_used = static_cast<std::size_t>(blocks.used());
  return true;
}

void generator::state::fail_all(const std::exception_ptr& error) noexcept {
  for (const auto& s : running) {
    finish(*s, finish_reason::error, error);
  }
  running.clear();
  std::deque<std::shared_ptr<sequence::state>> queued;
  {
    const std::lock_guard lock(mutex);
    queued.swap(waiting);
    figures.waiting = 0;
    figures.running = 0;
    figures.kv_blocks_used = static_cast<std::size_t>(blocks.used());
  }
  for (const auto& s : queued) {
    finish(*s, finish_reason::error, error);
  }
}

void generator::state::finish(sequence::state& s, lm::finish_reason why, std::exception_ptr error) {
  std::unique_lock lock(s.mutex);
  if (s.reason == finish_reason::none) {
    s.reason = why;
    s.error = std::move(error);
    if (why == finish_reason::cancelled) {
      s.unread.clear();  // as sequence::cancel: a cancelled sequence reads its end at once
      s.unread_logprobs.clear();
    }
  }
  wake_reader(s, lock);
  for (const std::int64_t b : s.blocks) {
    blocks.release(b);
  }
  s.blocks.clear();
}

void generator::state::deliver(sequence::state& s,
                               std::int32_t id,
                               std::optional<token_logprobs> logprobs) {
  std::unique_lock lock(s.mutex);
  if (s.reason != finish_reason::none) {
    return;  // cancelled meanwhile
  }
  s.unread.push_back(id);
  if (logprobs) {
    s.unread_logprobs.push_back(std::move(*logprobs));
  }
  wake_reader(s, lock);
}

// What follows the sampling of `id` for `s`: delivery, and the end of the sequence if `id`
// ends it. Returns with `s` finished or still running.
void generator::state::after_token(sequence::state& s,
                                   std::int32_t id,
                                   std::optional<token_logprobs> logprobs) {
  ++s.generated;
  const sampling_params& p = s.params;
  if (!p.ignore_eos && std::ranges::find(net->eos, id) != net->eos.end()) {
    {
      const std::lock_guard lock(s.mutex);
      if (s.reason == finish_reason::none) {
        s.ended_by = lm::end_token{.id = id, .logprobs = std::move(logprobs)};
      }
    }
    finish(s, finish_reason::stop);
    return;
  }
  s.tokens.push_back(id);
  deliver(s, id, std::move(logprobs));
  if (s.text) {
    // An id past the tokenizer's (a model's padded vocabulary) has no text.
    const std::string piece =
        static_cast<std::size_t>(id) < net->tok.vocab_size() ? s.text->push(id) : std::string();
    s.tail += piece;
    std::size_t longest = 0;
    for (const std::string& stop : p.stop) {
      longest = std::max(longest, stop.size());
    }
    // A stop text ends within the new piece: search the piece and the bytes before it.
    const std::size_t from =
        s.tail.size() > piece.size() + longest ? s.tail.size() - piece.size() - longest : 0;
    for (const std::string& stop : p.stop) {
      if (s.tail.find(stop, from) != std::string::npos) {
        finish(s, finish_reason::stop);
        return;
      }
    }
    if (s.tail.size() > 4 * longest + 64) {
      s.tail.erase(0, s.tail.size() - 2 * longest);
    }
  }
  if (s.generated >= p.max_tokens || s.tokens.size() >= s.limit) {
    finish(s, finish_reason::length);
  }
}

bool generator::state::admit(sequence::state& s) {
  const std::int64_t bs = options.block_size;
  const std::int64_t need = blocks_for(s.limit, bs);
  std::vector<std::int64_t> found;
  if (options.prefix_caching && !s.params.prompt_logprobs) {
    // At least the prompt's last token is computed again: its logits start the generation.
    // A prompt scored token by token is computed whole: every token's logits are needed.
    found = blocks.find(std::span(s.tokens).first(s.prompt_size - 1), bs);
  }
  std::int64_t idle = 0;
  for (const std::int64_t b : found) {
    idle += blocks.held(b) ? 0 : 1;
  }
  if (blocks.available() - idle < need - static_cast<std::int64_t>(found.size())) {
    return false;
  }
  for (const std::int64_t b : found) {
    blocks.hold(b);
  }
  s.blocks = std::move(found);
  s.computed = s.blocks.size() * static_cast<std::size_t>(bs);
  s.published = s.blocks.size();
  while (static_cast<std::int64_t>(s.blocks.size()) < need) {
    s.blocks.push_back(blocks.allocate());
  }
  if (options.prefix_caching && !s.params.prompt_logprobs) {
    s.prefix_hashes = kv_blocks::chain(std::span(s.tokens).first(s.prompt_size - 1), bs);
  }
  const std::lock_guard lock(mutex);
  figures.prefix_cache_hits += s.computed;
  return true;
}

void generator::state::adopt(sequence::state& s) {
  const auto bs = static_cast<std::size_t>(options.block_size);
  const std::size_t from = s.computed / bs;
  if (s.computed % bs != 0) {
    return;
  }
  const std::vector<std::int64_t> found =
      blocks.find(std::span(s.tokens).first(s.prompt_size - 1), options.block_size);
  if (found.size() <= from) {
    return;
  }
  // The blocks from `from` on are the ones admit allocated, unpublished: each gives way to the
  // found block, so `s` holds as many as it was admitted with.
  for (std::size_t i = from; i < found.size(); ++i) {
    blocks.hold(found[i]);
    blocks.release(s.blocks[i]);
    s.blocks[i] = found[i];
  }
  s.computed = found.size() * bs;
  s.published = found.size();
  const std::lock_guard lock(mutex);
  figures.prefix_cache_hits += (found.size() - from) * bs;
}

}  // namespace cotensor::lm
