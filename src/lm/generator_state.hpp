#pragma once

// The insides of a generator and its sequences, shared by generator.cpp (the public members)
// and scheduler.cpp (the steps).
//
// Who touches what: the generator's `mutex` guards `waiting`, `stopping`, `poked` and the
// figures; a sequence's `mutex` guards what its reader sees (unread tokens, the finish reason,
// the pending wait). Everything else — running sequences, their tokens and blocks, the block
// pool — is the step thread's alone.

#include "cotensor/lm.hpp"

#include "lm/kv_blocks.hpp"
#include "lm/model_impl.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace cotensor::lm {

struct sequence::state {
  // Fixed at submit.
  sampling_params params;
  std::uint64_t seed = 0;
  std::size_t prompt_size = 0;
  std::size_t limit = 0;  // the most ids: prompt + max_tokens, at most the context
  std::size_t max_unread = 0;
  std::weak_ptr<generator::state> owner;

  // The step thread's.
  std::vector<std::int32_t> tokens;  // the prompt, then what was generated
  std::vector<std::int64_t> blocks;  // the block table
  std::size_t computed = 0;          // tokens whose keys and values are in the cache
  std::size_t published = 0;         // blocks offered to the prefix cache
  // The chained hashes of the prompt's full blocks that admit looks up (kv_blocks::chain of
  // all but the last prompt token), with prefix caching; none for a scored prompt, which
  // computes at most a step's scoring rows: others do not wait on it.
  std::vector<std::uint64_t> prefix_hashes;
  bool deferred = false;  // the last step left its prompt to a sequence computing its next block
  int generated = 0;
  std::optional<text_stream> text;  // for stop texts
  std::string tail;

  // The reader's view, under `mutex`.
  mutable std::mutex mutex;
  std::deque<std::int32_t> unread;
  std::deque<token_logprobs> unread_logprobs;    // unread's, when params.logprobs asks for them
  std::optional<token_logprobs> taken_logprobs;  // those of the id async_next gave last
  std::vector<token_logprobs> prompt_logprobs;   // params.prompt_logprobs's, as computed
  std::optional<lm::end_token> ended_by;         // the end-of-sequence id that ended it
  lm::finish_reason reason = finish_reason::none;
  std::exception_ptr error;
  detail::waiter* reader = nullptr;
  std::atomic<bool> cancelled{false};

  bool paused() const {
    const std::lock_guard lock(mutex);
    return unread.size() >= max_unread;
  }
};

struct generator::state {
  std::shared_ptr<const model::impl> net;  // the model
  generator_options options;
  kv_cache cache;
  std::int64_t context_length = 0;  // the most ids a sequence holds
  std::int64_t table_width = 0;     // blocks of a sequence's table: the context's
  kv_blocks blocks;
  std::vector<std::shared_ptr<sequence::state>> running;
  std::size_t rotation = 0;  // where the next step starts taking decode tokens

  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool poked = false;
  std::deque<std::shared_ptr<sequence::state>> waiting;
  generator_stats figures;
  std::thread thread;

  state(std::shared_ptr<const model::impl> m, generator_options o, std::int64_t total)
      : net(std::move(m)), options(o), blocks(total) {}

  void poke() {
    const std::lock_guard lock(mutex);
    poked = true;
    wake.notify_one();
  }
  void loop();
  bool step();
  bool admit(sequence::state& s);
  /// Takes from the prefix cache the blocks of `s`'s prompt published since `s` last looked.
  void adopt(sequence::state& s);
  void finish(sequence::state& s, lm::finish_reason why, std::exception_ptr error = nullptr);
  /// Fails every running and waiting sequence with `error` (a step that threw past its guards).
  void fail_all(const std::exception_ptr& error) noexcept;
  void deliver(sequence::state& s, std::int32_t id, std::optional<token_logprobs> logprobs);
  void after_token(sequence::state& s, std::int32_t id, std::optional<token_logprobs> logprobs);
};

// Completes the reader's pending wait, if any, after letting go of the sequence's lock.
inline void wake_reader(sequence::state& s, std::unique_lock<std::mutex>& lock) {
  detail::waiter* w = std::exchange(s.reader, nullptr);
  lock.unlock();
  if (w != nullptr) {
    w->complete(nullptr);
  }
}

inline std::int64_t blocks_for(std::size_t tokens, std::int64_t block_size) {
  return (static_cast<std::int64_t>(tokens) + block_size - 1) / block_size;
}

}  // namespace cotensor::lm
