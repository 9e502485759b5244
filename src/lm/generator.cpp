// The public side of generation (<cotensor/lm.hpp>): a sequence's reader (async_next's start
// and end, cancellation) and the generator's construction, submission and figures. The steps
// are in scheduler.cpp.

#include "cotensor/lm.hpp"
#include "cotensor/ops.hpp"

#include "lm/generator_state.hpp"
#include "lm/sampler.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>

namespace cotensor::lm {

// --- sequence -----------------------------------------------------------------------------

sequence& sequence::operator=(sequence&& other) noexcept {
  if (this != &other) {
    cancel();
    state_ = std::move(other.state_);
  }
  return *this;
}

sequence::~sequence() { cancel(); }

void sequence::cancel() noexcept {
  if (!state_) {
    return;
  }
  std::unique_lock lock(state_->mutex);
  if (state_->reason == finish_reason::none) {
    state_->reason = finish_reason::cancelled;
    state_->unread.clear();
    state_->unread_logprobs.clear();
    state_->taken_logprobs.reset();  // the end: no token
  }
  state_->cancelled.store(true, std::memory_order_relaxed);
  wake_reader(*state_, lock);
  if (const auto owner = state_->owner.lock()) {
    owner->poke();  // the blocks go back at the next step
  }
}

lm::finish_reason sequence::finish_reason() const noexcept {
  if (!state_) {
    return finish_reason::none;
  }
  const std::lock_guard lock(state_->mutex);
  return state_->reason;
}

std::exception_ptr sequence::error() const {
  if (!state_) {
    return nullptr;
  }
  const std::lock_guard lock(state_->mutex);
  return state_->error;
}

std::optional<token_logprobs> sequence::logprobs() const {
  if (!state_) {
    return std::nullopt;
  }
  const std::lock_guard lock(state_->mutex);
  return state_->taken_logprobs;
}

std::vector<token_logprobs> sequence::prompt_logprobs() const {
  if (!state_) {
    return {};
  }
  const std::lock_guard lock(state_->mutex);
  return state_->prompt_logprobs;
}

std::optional<lm::end_token> sequence::end_token() const {
  if (!state_) {
    return std::nullopt;
  }
  const std::lock_guard lock(state_->mutex);
  return state_->ended_by;
}

std::size_t sequence::prompt_size() const noexcept { return state_ ? state_->prompt_size : 0; }

void sequence::start_next(const std::shared_ptr<state>& s, detail::waiter& w) {
  if (!s) {
    w.complete(nullptr);  // take_next says bad_descriptor
    return;
  }
  std::unique_lock lock(s->mutex);
  if (s->reader != nullptr) {
    lock.unlock();
    w.complete(std::make_exception_ptr(boost::system::system_error(asio::error::in_progress)));
    return;
  }
  if (!s->unread.empty() || s->reason != finish_reason::none) {
    lock.unlock();
    w.complete(nullptr);
    return;
  }
  s->reader = &w;
}

std::pair<boost::system::error_code, std::optional<std::int32_t>>
sequence::take_next(const std::shared_ptr<state>& s, std::exception_ptr wait_error) {
  if (!s) {
    return {asio::error::bad_descriptor, std::nullopt};
  }
  if (wait_error) {
    boost::system::error_code ec = asio::error::operation_aborted;
    try {
      std::rethrow_exception(wait_error);
    } catch (const boost::system::system_error& e) {
      ec = e.code();
    } catch (...) {
    }
    if (ec == asio::error::operation_aborted) {
      sequence(s).cancel();  // the wait was cancelled: so is the sequence (the handle lets go)
    }
    return {ec, std::nullopt};
  }
  std::unique_lock lock(s->mutex);
  if (!s->unread.empty()) {
    const std::int32_t id = s->unread.front();
    s->unread.pop_front();
    s->taken_logprobs.reset();
    if (!s->unread_logprobs.empty()) {
      s->taken_logprobs = std::move(s->unread_logprobs.front());
      s->unread_logprobs.pop_front();
    }
    const bool resume = s->unread.size() + 1 == s->max_unread;
    lock.unlock();
    if (const auto owner = resume ? s->owner.lock() : nullptr) {
      owner->poke();  // it was paused
    }
    return {{}, id};
  }
  s->taken_logprobs.reset();  // the end: no token
  if (s->reason == finish_reason::error) {
    return {boost::system::errc::make_error_code(boost::system::errc::io_error), std::nullopt};
  }
  return {{}, std::nullopt};
}

// --- generator ----------------------------------------------------------------------------

generator::generator(const lm::model& m, generator_options options) {
  const model::impl& mi = *m.impl_;
  if (options.max_running == 0 || options.max_waiting == 0 || options.block_size < 1 ||
      options.token_budget < 1 || options.prefill_chunk < 1 || options.max_unread == 0) {
    throw std::invalid_argument("cotensor::lm::generator: max_running, max_waiting, block_size, "
                                "token_budget, prefill_chunk and max_unread must be 1 or more");
  }
  if (options.context_length < 0 || options.context_length > mi.positions) {
    throw std::invalid_argument("cotensor::lm::generator: context_length " +
                                std::to_string(options.context_length) + " is past the model's " +
                                std::to_string(mi.positions));
  }
  const std::int64_t context = options.context_length > 0 ? options.context_length : mi.positions;
  const auto layers = static_cast<std::int64_t>(
      mi.kind == model::impl::family::gpt2 ? mi.gpt2_blocks.size() : mi.llama_blocks.size());
  const std::int64_t per_block = 2 * layers * options.block_size * mi.kv_heads * mi.head_dim *
                                 static_cast<std::int64_t>(itemsize(mi.dtype));
  const std::int64_t width = blocks_for(static_cast<std::size_t>(context), options.block_size);
  std::int64_t total = 0;
  if (options.kv_cache_bytes == 0) {
    total = std::min(static_cast<std::int64_t>(options.max_running) * width,
                     std::max<std::int64_t>(1, (std::int64_t{512} << 20) / per_block));
  } else {
    total = static_cast<std::int64_t>(options.kv_cache_bytes) / per_block;
  }
  if (total < 1) {
    throw std::invalid_argument("cotensor::lm::generator: kv_cache_bytes " +
                                std::to_string(options.kv_cache_bytes) +
                                " holds no block (one is " + std::to_string(per_block) + " bytes)");
  }
  state_ = std::make_shared<state>(m.impl_, options, total);
  state_->context_length = context;
  state_->table_width = width;
  for (std::int64_t l = 0; l < layers; ++l) {
    const shape s{total, options.block_size, mi.kv_heads, mi.head_dim};
    state_->cache.keys.push_back(zeros(s, mi.dtype, mi.where));
    state_->cache.values.push_back(zeros(s, mi.dtype, mi.where));
  }
  state_->figures.kv_blocks_total = static_cast<std::size_t>(total);
  state_->thread = std::thread([s = state_.get()] { s->loop(); });
}

generator::~generator() {
  {
    const std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->wake.notify_one();
  }
  state_->thread.join();
  for (auto& s : state_->running) {
    state_->finish(*s, finish_reason::cancelled);
  }
  for (auto& s : state_->waiting) {
    state_->finish(*s, finish_reason::cancelled);
  }
}

sequence generator::submit(std::vector<std::int32_t> prompt, sampling_params params) {
  const model::impl& m = *state_->net;
  check_sampling(params);
  const std::int64_t context = state_->context_length;
  if (prompt.empty() || static_cast<std::int64_t>(prompt.size()) >= context) {
    throw std::invalid_argument("cotensor::lm::generator::submit: a prompt of " +
                                std::to_string(prompt.size()) + " ids; the context takes 1 to " +
                                std::to_string(context - 1) + " before generating");
  }
  for (const std::int32_t id : prompt) {
    if (id < 0 || id >= m.vocab) {
      throw std::out_of_range("cotensor::lm::generator::submit: id " + std::to_string(id) +
                              " is past the vocabulary (" + std::to_string(m.vocab) + ")");
    }
  }
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= m.vocab) {
      throw std::out_of_range("cotensor::lm::generator::submit: logit_bias's id " +
                              std::to_string(id) + " is past the vocabulary (" +
                              std::to_string(m.vocab) + ")");
    }
  }
  auto s = std::make_shared<sequence::state>();
  s->prompt_size = prompt.size();
  s->limit = std::min(prompt.size() + static_cast<std::size_t>(params.max_tokens),
                      static_cast<std::size_t>(context));
  const std::int64_t need = blocks_for(s->limit, state_->options.block_size);
  if (need > state_->blocks.total()) {
    throw std::invalid_argument("cotensor::lm::generator::submit: the sequence needs " +
                                std::to_string(need) + " cache blocks; the pool has " +
                                std::to_string(state_->blocks.total()));
  }
  s->seed = params.seed ? *params.seed
                        : (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  s->max_unread = state_->options.max_unread;
  s->owner = state_;
  s->tokens = std::move(prompt);
  if (!params.stop.empty()) {
    s->text.emplace(m.tok);
  }
  s->params = std::move(params);
  {
    const std::lock_guard lock(state_->mutex);
    // A cancelled sequence leaves its place at once, though the next step takes it out.
    const auto queued = static_cast<std::size_t>(
        std::ranges::count_if(state_->waiting, [](const std::shared_ptr<sequence::state>& w) {
          return !w->cancelled.load(std::memory_order_relaxed);
        }));
    if (queued >= state_->options.max_waiting) {
      throw std::length_error("cotensor::lm::generator::submit: " + std::to_string(queued) +
                              " sequences are waiting already (max_waiting)");
    }
    state_->waiting.push_back(s);
    state_->figures.waiting = state_->waiting.size();
    state_->poked = true;
    state_->wake.notify_one();
  }
  return sequence(std::move(s));
}

generator_stats generator::stats() const {
  const std::lock_guard lock(state_->mutex);
  return state_->figures;
}

std::int64_t generator::context_length() const noexcept { return state_->context_length; }

}  // namespace cotensor::lm
