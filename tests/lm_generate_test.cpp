// cotensor::lm::generator and sequence: greedy generation against `transformers` (the 32 ids
// tests/data/lm/make_models.py recorded), batching that changes no sequence's tokens, seeded
// sampling, stop texts and lengths, cancellation giving the cache back, a full cache making
// sequences wait, the prefix cache, and the errors of submit and async_next.

#include "cotensor/cotensor.hpp"

#include "engine/faults.hpp"
#include "support/lm_fixtures.hpp"
#include "support/run.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

namespace asio = boost::asio;
using cotensor::lm::finish_reason;
using cotensor::lm::generator;
using cotensor::lm::model;
using cotensor::lm::sampling_params;
using cotensor::lm::sequence;

const std::filesystem::path& data = cotensor::test::lm_data;
using cotensor::test::ids_of;

// The log-softmax of one row of logits, in double: what a token's log-probabilities are
// checked against.
std::vector<double> log_softmax_of(std::span<const float> row) {
  double largest = -INFINITY;
  for (const float x : row) {
    largest = std::max(largest, static_cast<double>(x));
  }
  double total = 0.0;
  for (const float x : row) {
    total += std::exp(static_cast<double>(x) - largest);
  }
  std::vector<double> out;
  out.reserve(row.size());
  for (const float x : row) {
    out.push_back(static_cast<double>(x) - largest - std::log(total));
  }
  return out;
}

// Every id of `seqs`, read by one coroutine each on one io_context, in order.
std::vector<std::vector<std::int32_t>> read_all(std::vector<sequence>& seqs) {
  asio::io_context io;
  std::vector<std::vector<std::int32_t>> out(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          while (auto id = co_await seqs[i].async_next(asio::use_awaitable)) {
            out[i].push_back(*id);
          }
        },
        asio::detached);
  }
  io.run();
  return out;
}

// The ids of `s` up to its end, and how its last wait completed (no error at the end of the
// sequence; the step's error when one ends it).
struct read_to_end_result {
  std::vector<std::int32_t> ids;
  boost::system::error_code ec;
};
read_to_end_result read_to_end(sequence& s) {
  asio::io_context io;
  read_to_end_result out;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (;;) {
          auto [e, id] = co_await s.async_next(asio::as_tuple(asio::use_awaitable));
          if (e || !id) {
            out.ec = e;
            co_return;
          }
          out.ids.push_back(*id);
        }
      },
      asio::detached);
  io.run();
  return out;
}

std::vector<std::int32_t> read_one(sequence& s) {
  std::vector<sequence> one;
  one.push_back(std::move(s));
  auto ids = read_all(one)[0];
  s = std::move(one[0]);
  return ids;
}

const sampling_params greedy32{.temperature = 0.0F, .max_tokens = 32, .ignore_eos = true};

// Polls `f` until it holds (the generator's thread gets there), up to 20 s.
template <class F>
bool eventually(F f) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!f()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

TEST_SUITE("lm.generate") {
  TEST_CASE("greedy generation gives transformers' 32 ids, every text batched together") {
    for (const std::string name : {"gpt2-tiny", "llama-tiny", "qwen2-tiny"}) {
      CAPTURE(name);
      const model m = model::load(data / name);
      const auto expected = cotensor::load_safetensors(data / (name + "-expected.safetensors"));
      generator g(m, {.prefill_chunk = 5});  // chunked prompts among other sequences' decode
      std::vector<sequence> seqs;
      std::vector<std::vector<std::int32_t>> want;
      std::size_t generated = 0;
      for (int i = 0; expected.contains("greedy_" + std::to_string(i)); ++i) {
        const auto prompt = ids_of(expected.at("ids_" + std::to_string(i)));
        seqs.push_back(g.submit(prompt, greedy32));
        // transformers' loop went on past the context (64); a generation ends there.
        auto ids = ids_of(expected.at("greedy_" + std::to_string(i)));
        ids.resize(std::min(ids.size(), 64 - prompt.size()));
        generated += ids.size();
        want.push_back(std::move(ids));
      }
      REQUIRE(seqs.size() == 4);
      const auto got = read_all(seqs);
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i] == want[i]);
        CHECK(seqs[i].finish_reason() == finish_reason::length);
      }
      CHECK(eventually([&] { return g.stats().kv_blocks_used == 0; }));
      const auto st = g.stats();
      CHECK(st.tokens_generated == generated);
      CHECK(generated > 4 * 30);
      CHECK(st.running == 0);
      CHECK(st.steps < 4 * 32);  // the sequences shared steps
    }
  }

  TEST_CASE("a sequence alone and among 16 others of other lengths gives the same tokens") {
    const model m = model::load(data / "llama-tiny");
    const auto prompt = m.tokenizer().encode("The engine orders ops by the buffers they read.");
    sampling_params sampled{.temperature = 0.8F,
                            .top_k = 50,
                            .top_p = 0.9F,
                            .seed = 7,
                            .max_tokens = 24,
                            .ignore_eos = true};
    std::vector<std::int32_t> alone_greedy;
    std::vector<std::int32_t> alone_sampled;
    {
      generator g(m);
      auto a = g.submit(prompt, greedy32);
      alone_greedy = read_one(a);
      auto b = g.submit(prompt, sampled);
      alone_sampled = read_one(b);
    }
    CHECK(alone_greedy.size() == 32);
    CHECK(alone_sampled.size() == 24);
    CHECK(alone_sampled != alone_greedy);
    generator g(m, {.token_budget = 64, .prefill_chunk = 7, .prefix_caching = false});
    std::vector<sequence> seqs;
    for (int i = 0; i < 16; ++i) {
      std::vector<std::int32_t> other(prompt.begin(), prompt.begin() + 1 + i % 9);
      other.push_back(static_cast<std::int32_t>(100 + i));
      seqs.push_back(g.submit(other, {.temperature = 1.0F,
                                      .seed = static_cast<std::uint64_t>(i),
                                      .max_tokens = 8 + i,
                                      .ignore_eos = true}));
      if (i == 5) {
        seqs.push_back(g.submit(prompt, greedy32));
      }
      if (i == 11) {
        seqs.push_back(g.submit(prompt, sampled));
      }
    }
    const auto got = read_all(seqs);
    CHECK(got[6] == alone_greedy);
    CHECK(got[13] == alone_sampled);
    CHECK(got[0].size() == 8);
    CHECK(got[17].size() == 23);
  }

  TEST_CASE("sampling: a seed gives the same tokens, top_k 1 is greedy") {
    const model m = model::load(data / "gpt2-tiny");
    generator g(m);
    const auto prompt = m.tokenizer().encode("Hello, world!");
    const auto run = [&](sampling_params p) {
      auto s = g.submit(prompt, p);
      return read_one(s);
    };
    const sampling_params seeded{
        .temperature = 1.5F, .seed = 42, .max_tokens = 20, .ignore_eos = true};
    CHECK(run(seeded) == run(seeded));
    auto other = seeded;
    other.seed = 43;
    CHECK(run(other) != run(seeded));
    auto top1 = seeded;
    top1.top_k = 1;
    auto greedy = seeded;
    greedy.temperature = 0.0F;
    CHECK(run(top1) == run(greedy));
    // Unseeded sequences draw their own seeds.
    auto unseeded = seeded;
    unseeded.seed.reset();
    CHECK(run(unseeded) != run(unseeded));
  }

  TEST_CASE("stop texts, max_tokens, the context and the end-of-sequence id end a sequence") {
    const model m = model::load(data / "qwen2-tiny");
    generator g(m);
    const auto prompt = m.tokenizer().encode("Hello, world!");
    auto full = g.submit(prompt, greedy32);
    const auto ids = read_one(full);
    REQUIRE(ids.size() == 32);
    // A stop text made of the 6th and 7th tokens' text ends the sequence at the 7th.
    const std::string text = m.tokenizer().decode(std::span(ids).subspan(5, 2));
    REQUIRE(!text.empty());
    auto stopped = g.submit(
        prompt, {.temperature = 0.0F, .max_tokens = 32, .stop = {text}, .ignore_eos = true});
    const auto until_stop = read_one(stopped);
    CHECK(stopped.finish_reason() == finish_reason::stop);
    CHECK(until_stop.size() <= 7);
    CHECK(m.tokenizer().decode(until_stop).find(text) != std::string::npos);
    // The context (64) ends a sequence that max_tokens would not.
    auto to_context =
        g.submit(prompt, {.temperature = 0.0F, .max_tokens = 1000, .ignore_eos = true});
    const auto to_64 = read_one(to_context);
    CHECK(to_64.size() == 64 - prompt.size());
    CHECK(to_context.finish_reason() == finish_reason::length);
    // A shorter context, as a server's context_length sets it, ends it sooner, with the same ids.
    generator short_context(m, {.context_length = 40});
    CHECK(short_context.context_length() == 40);
    CHECK(g.context_length() == 64);
    auto to_40 =
        short_context.submit(prompt, {.temperature = 0.0F, .max_tokens = 1000, .ignore_eos = true});
    const auto first_40 = read_one(to_40);
    CHECK(first_40.size() == 40 - prompt.size());
    CHECK(to_40.finish_reason() == finish_reason::length);
    CHECK(std::equal(first_40.begin(), first_40.end(), to_64.begin()));
    CHECK_THROWS_AS(short_context.submit(std::vector<std::int32_t>(40, 1), greedy32),
                    std::invalid_argument);
    CHECK_THROWS_AS(generator(m, {.context_length = 65}), std::invalid_argument);
    CHECK_THROWS_AS(generator(m, {.context_length = -1}), std::invalid_argument);
    // The end-of-sequence id: stop before it, or go on past it with ignore_eos.
    REQUIRE(!m.eos_token_ids().empty());
    const std::int32_t eos = m.eos_token_ids()[0];
    CHECK(eos == m.tokenizer().token_to_id("<|im_end|>"));
    CHECK(std::ranges::find(ids, eos) == ids.end());  // greedy never picks it here: sample until
    bool seen = false;
    for (std::uint64_t seed = 0; seed < 40 && !seen; ++seed) {
      auto s =
          g.submit(prompt, {.temperature = 5.0F, .seed = seed, .max_tokens = 60, .logprobs = 2});
      const auto got = read_one(s);
      CHECK(std::ranges::find(got, eos) == got.end());
      seen = s.finish_reason() == finish_reason::stop;
      CHECK((seen || got.size() == 64 - prompt.size()));
      // The id that ended it, with its log-probabilities: the log-softmax after the tokens.
      const auto end = s.end_token();
      REQUIRE(end.has_value() == seen);
      if (seen) {
        CHECK(end->id == eos);
        REQUIRE(end->logprobs.has_value());
        CHECK(end->logprobs->top.size() == 2);
        std::vector<std::int32_t> all = prompt;
        all.insert(all.end(), got.begin(), got.end());
        const auto rows = m.logits(all).to_vector<float>();
        const std::size_t vocab = rows.size() / all.size();
        const double want =
            log_softmax_of(std::span(rows).last(vocab))[static_cast<std::size_t>(eos)];
        CHECK(end->logprobs->logprob == doctest::Approx(want).epsilon(1e-4));
      }
    }
    CHECK(seen);
    CHECK_FALSE(stopped.end_token().has_value());  // a stop text ended that one
  }

  TEST_CASE("cancelling a sequence gives its blocks back, a full cache makes others wait") {
    const model m = model::load(data / "gpt2-tiny");
    // Room for one sequence of 48 ids at a time: 3 blocks of 16 (2 layers, keys and values,
    // 32 floats a token).
    const std::size_t block_bytes = 2 * 2 * 16 * 32 * 4;
    generator g(m, {.kv_cache_bytes = 3 * block_bytes, .max_unread = 2, .prefix_caching = false});
    CHECK(g.stats().kv_blocks_total == 3);
    const auto prompt = m.tokenizer().encode("Hello, world!");
    REQUIRE(prompt.size() <= 8);
    const sampling_params long_run{.temperature = 0.0F, .max_tokens = 40, .ignore_eos = true};
    auto first = g.submit(prompt, long_run);
    auto second = g.submit(prompt, long_run);
    // The first holds every block; it pauses after 2 unread tokens (2 steps); the second waits.
    CHECK(eventually([&] {
      const auto st = g.stats();
      return st.running == 1 && st.waiting == 1 && st.steps == 2;
    }));
    CHECK(g.stats().kv_blocks_used == 3);
    const auto steps = g.stats().steps;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(g.stats().steps == steps);  // paused: nobody reads
    first.cancel();
    CHECK(first.finish_reason() == finish_reason::cancelled);
    // Cancelled, the first's blocks go to the second, which then runs to its end.
    const auto ids = read_one(second);
    CHECK(ids.size() == 40);
    CHECK(eventually([&] { return g.stats().kv_blocks_used == 0; }));
    auto third = g.submit(prompt, long_run);
    { const sequence dropped = std::move(third); }  // destroying it cancels it
    CHECK(eventually([&] { return g.stats().kv_blocks_used == 0 && g.stats().running == 0; }));
    // One that could never fit is refused at once.
    CHECK_THROWS_AS(g.submit(prompt, {.max_tokens = 60, .ignore_eos = true}),
                    std::invalid_argument);
  }

  TEST_CASE("max_waiting: past it submit throws length_error, and a cancelled sequence frees its "
            "place at once") {
    const model m = model::load(data / "gpt2-tiny");
    generator g(m, {.max_running = 1, .max_waiting = 1, .max_unread = 1});
    const std::vector<std::int32_t> prompt{1, 2, 3};
    const sampling_params long_run{.temperature = 0.0F, .max_tokens = 40, .ignore_eos = true};
    auto running = g.submit(prompt, long_run);  // runs, then pauses after a token: nobody reads
    REQUIRE(eventually([&] { return g.stats().steps == 1; }));
    auto waiting = g.submit(prompt, long_run);
    CHECK_THROWS_WITH_AS(g.submit(prompt, long_run), doctest::Contains("max_waiting"),
                         std::length_error);
    // Reading the token resumes the running sequence; its next step is held up for a second
    // (its first op's completion delayed), so no step takes the cancelled sequence out of the
    // queue meanwhile: its place must be free all the same.
    cotensor::detail::faults::delay_op(1, std::chrono::seconds(1));
    {
      asio::io_context io;
      asio::co_spawn(
          io, [&]() -> asio::awaitable<void> { co_await running.async_next(asio::use_awaitable); },
          asio::detached);
      io.run();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the step is under way
    waiting.cancel();
    CHECK_NOTHROW(waiting = g.submit(prompt, long_run));
    CHECK_THROWS_AS(g.submit(prompt, long_run), std::length_error);
    CHECK(g.stats().steps == 1);  // it was all within the held-up step
    cotensor::detail::faults::reset();
    CHECK(waiting.finish_reason() == finish_reason::none);
  }

  TEST_CASE("cancelling the wait cancels the sequence, and the reader's errors") {
    const model m = model::load(data / "gpt2-tiny");
    // One running sequence, paused after each unread token: the next ones wait in the queue, so
    // their waits stay pending until something happens to them.
    generator g(m, {.max_running = 1, .max_unread = 1});
    const auto prompt = m.tokenizer().encode("Hello");
    const sampling_params run40{.temperature = 0.0F, .max_tokens = 40, .ignore_eos = true};
    auto running = g.submit(prompt, run40);
    auto queued = g.submit(prompt, run40);
    auto other = g.submit(prompt, run40);
    asio::io_context io;
    asio::cancellation_signal signal;
    boost::system::error_code first_ec;
    boost::system::error_code second_ec;
    std::optional<std::int32_t> after{0};
    int taken = 0;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          // (Not `while (taken < 3 && co_await ...)`: g++ 12 ran that co_await a fourth time.)
          for (int i = 0; i < 3; ++i) {
            taken += (co_await running.async_next(asio::use_awaitable)).has_value() ? 1 : 0;
          }
          // Pending (queued), then cancelled: operation_aborted, and the sequence is over.
          std::tie(first_ec, after) = co_await queued.async_next(
              asio::bind_cancellation_slot(signal.slot(), asio::as_tuple(asio::use_awaitable)));
          std::tie(second_ec, after) =
              co_await queued.async_next(asio::as_tuple(asio::use_awaitable));
        },
        asio::detached);
    while (taken < 3 && io.run_one() > 0) {  // (none run: the coroutine ended early, failed)
    }
    REQUIRE(taken == 3);
    io.poll();
    signal.emit(asio::cancellation_type::terminal);
    // Two waits at once on one sequence: the second is refused; cancel() ends the first.
    boost::system::error_code a_ec;
    boost::system::error_code b_ec;
    std::optional<std::int32_t> a_id{0};
    other.async_next(asio::bind_executor(io, [&](boost::system::error_code ec, auto id) {
      a_ec = ec;
      a_id = id;
    }));
    other.async_next(
        asio::bind_executor(io, [&](boost::system::error_code ec, auto) { b_ec = ec; }));
    other.cancel();
    io.run();
    CHECK(taken == 3);
    CHECK(first_ec == asio::error::operation_aborted);
    CHECK(!second_ec);
    CHECK(!after);
    CHECK(queued.finish_reason() == finish_reason::cancelled);
    CHECK(b_ec == asio::error::in_progress);
    CHECK(!a_ec);
    CHECK(!a_id);
    CHECK(other.finish_reason() == finish_reason::cancelled);
    CHECK(eventually([&] { return g.stats().waiting == 0; }));
    CHECK(running.finish_reason() == finish_reason::none);
    { const sequence dropped = std::move(running); }
    CHECK(eventually([&] { return g.stats().kv_blocks_used == 0 && g.stats().running == 0; }));
    // An empty sequence says so.
    sequence empty;
    auto [ec, id] = cotensor::test::run_to_completion(
        [&]()
            -> asio::awaitable<std::tuple<boost::system::error_code, std::optional<std::int32_t>>> {
          co_return co_await empty.async_next(asio::as_tuple(asio::use_awaitable));
        });
    CHECK(ec == asio::error::bad_descriptor);
    CHECK(!id);
  }

  TEST_CASE("a failed step ends its sequences with io_error, and the generator goes on") {
    const model m = model::load(data / "gpt2-tiny");
    generator g(m, {.max_unread = 1});
    const auto prompt = m.tokenizer().encode("Hello");
    const sampling_params run20{.temperature = 0.0F, .max_tokens = 20, .ignore_eos = true};
    auto s = g.submit(prompt, run20);
    // Paused after its first token: no step runs until it is read.
    REQUIRE(eventually([&] { return g.stats().steps == 1; }));
    cotensor::detail::faults::fail_op(1);  // the next step's first op fails
    const auto got = read_to_end(s);
    cotensor::detail::faults::reset();
    CHECK(got.ids.size() == 1);  // the token before the failed step
    CHECK(got.ec == boost::system::errc::io_error);
    CHECK(s.finish_reason() == finish_reason::error);
    CHECK_THROWS_AS(std::rethrow_exception(s.error()), cotensor::detail::faults::injected_fault);
    CHECK(eventually([&] { return g.stats().kv_blocks_used == 0; }));
    auto next = g.submit(prompt, run20);
    CHECK(read_one(next).size() == 20);
  }

  TEST_CASE("logits that are not finite end their sequence with an error, greedy or sampling, "
            "and the generator goes on") {
    // gpt2-tiny with its final layer norm's bias NaN (float32 bytes patched in a copy): every
    // logit is NaN. A greedy step reads each row's argmax and max from the workers, a sampling
    // step every logit: both refuse the row.
    const auto dir =
        std::filesystem::temp_directory_path() / ("cotensor-lm-nan-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::copy(data / "gpt2-tiny", dir);
    {
      std::fstream f(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
      std::uint64_t header_bytes = 0;
      f.read(reinterpret_cast<char*>(&header_bytes), sizeof header_bytes);
      std::string header(static_cast<std::size_t>(header_bytes), '\0');
      f.read(header.data(), static_cast<std::streamsize>(header.size()));
      // {"transformer.ln_f.bias":{"dtype":"F32","shape":[32],"data_offsets":[begin,end]},...}
      const auto entry = header.find("\"transformer.ln_f.bias\"");
      REQUIRE(entry != std::string::npos);
      REQUIRE(header.find("\"F32\"", entry) < header.find('}', entry));
      const auto numbers = header.find("\"data_offsets\"", entry) + 16;
      std::size_t used = 0;
      const auto begin = std::stoll(header.substr(numbers), &used);
      const auto end = std::stoll(header.substr(numbers + used + 1));
      const std::vector<float> nan(static_cast<std::size_t>((end - begin) / 4),
                                   std::numeric_limits<float>::quiet_NaN());
      f.seekp(static_cast<std::streamoff>(8 + header_bytes + static_cast<std::uint64_t>(begin)));
      f.write(reinterpret_cast<const char*>(nan.data()), end - begin);
    }
    const model m = model::load(dir);
    generator g(m);
    const auto prompt = m.tokenizer().encode("Hello");
    for (const sampling_params& p :
         {sampling_params{.temperature = 0.0F, .max_tokens = 8, .ignore_eos = true},
          sampling_params{.temperature = 1.0F, .seed = 3, .max_tokens = 8, .ignore_eos = true}}) {
      CAPTURE(p.temperature);
      auto s = g.submit(prompt, p);
      const auto got = read_to_end(s);
      CHECK(got.ids.empty());
      CHECK(got.ec == boost::system::errc::io_error);
      CHECK(s.finish_reason() == finish_reason::error);
      CHECK_THROWS_WITH_AS(std::rethrow_exception(s.error()), doctest::Contains("not finite"),
                           std::runtime_error);
    }
    CHECK(eventually([&] { return g.stats().kv_blocks_used == 0; }));
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("destroying the generator ends every sequence, its pending reader included") {
    const model m = model::load(data / "gpt2-tiny");
    const auto prompt = m.tokenizer().encode("Hello");
    const sampling_params run40{.temperature = 0.0F, .max_tokens = 40, .ignore_eos = true};
    asio::io_context io;
    boost::system::error_code ec = asio::error::would_block;
    std::optional<std::int32_t> id{0};
    sequence running;
    sequence queued;
    {
      generator g(m, {.max_running = 1, .max_unread = 1});
      running = g.submit(prompt, run40);
      queued = g.submit(prompt, run40);  // waits: the running one pauses, unread
      queued.async_next(asio::bind_executor(io, [&](boost::system::error_code e, auto i) {
        ec = e;
        id = i;
      }));
    }
    io.run();
    CHECK(!ec);
    CHECK(!id);
    CHECK(queued.finish_reason() == finish_reason::cancelled);
    CHECK(running.finish_reason() == finish_reason::cancelled);
    // A sequence outliving its generator reads its end, and cancels without harm.
    auto [e2, i2] = cotensor::test::run_to_completion(
        [&]()
            -> asio::awaitable<std::tuple<boost::system::error_code, std::optional<std::int32_t>>> {
          co_return co_await running.async_next(asio::as_tuple(asio::use_awaitable));
        });
    CHECK(!e2);
    CHECK(!i2);
    running.cancel();
  }

  TEST_CASE("the prefix cache computes a repeated prompt prefix once, with the same tokens") {
    const model m = model::load(data / "llama-tiny");
    generator g(m);
    std::vector<std::int32_t> prompt = m.tokenizer().encode(
        "A long system prompt, repeated by every request, that fills two blocks of the cache.");
    prompt.resize(40, 7);
    auto a = g.submit(prompt, greedy32);
    const auto first = read_one(a);
    CHECK(g.stats().prefix_cache_hits == 0);
    const auto computed = g.stats().prompt_tokens_computed;
    CHECK(computed == 40);
    auto b = g.submit(prompt, greedy32);
    CHECK(read_one(b) == first);
    CHECK(g.stats().prefix_cache_hits == 32);  // two full blocks of 16
    CHECK(g.stats().prompt_tokens_computed == computed + 8);
  }

  TEST_CASE("prompts that share a prefix, admitted together, compute it once") {
    const model m = model::load(data / "llama-tiny");
    std::vector<std::int32_t> prompt = m.tokenizer().encode(
        "A long system prompt, repeated by every request, that fills two blocks of the cache.");
    prompt.resize(40, 7);
    std::vector<std::int32_t> other = prompt;  // the first block alone in common
    for (std::size_t i = 20; i < other.size(); ++i) {
      other[i] = static_cast<std::int32_t>(100 + i);
    }
    std::vector<std::int32_t> alone, alone_other;
    {
      generator g(m);
      auto a = g.submit(prompt, greedy32);
      alone = read_one(a);
      auto b = g.submit(other, greedy32);
      alone_other = read_one(b);
    }
    // Chunks of 5: the first prompt takes 8 steps, so the others are admitted while it computes
    // (whenever the generator's thread takes them), before its blocks are in the cache.
    generator g(m, {.prefill_chunk = 5});
    std::vector<sequence> seqs;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back(g.submit(prompt, greedy32));
    }
    seqs.push_back(g.submit(other, greedy32));
    const auto got = read_all(seqs);
    CHECK(got[0] == alone);
    CHECK(got[1] == alone);
    CHECK(got[2] == alone);
    CHECK(got[3] == alone_other);
    // The first computes its 40 tokens; the two like it take its two full blocks and compute
    // 8; the fourth takes its first block and computes 24.
    const auto st = g.stats();
    CHECK(st.prefix_cache_hits == 32 + 32 + 16);
    CHECK(st.prompt_tokens_computed == 40 + 8 + 8 + 24);
    CHECK(eventually([&] { return g.stats().kv_blocks_used == 0; }));
  }

  TEST_CASE("logprobs: each token's log-softmax of the model's logits, and the likeliest tokens") {
    const model m = model::load(data / "gpt2-tiny");
    generator g(m);
    const auto prompt = m.tokenizer().encode("Hello, world!");
    struct token {
      std::int32_t id;
      std::optional<cotensor::lm::token_logprobs> logprobs;
    };
    // Every token of a sequence with the log-probabilities that came with it, and those seen
    // once the sequence has ended.
    const auto run = [&](sampling_params p, std::optional<cotensor::lm::token_logprobs>* after) {
      auto s = g.submit(prompt, p);
      std::vector<token> out;
      asio::io_context io;
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            while (auto id = co_await s.async_next(asio::use_awaitable)) {
              out.push_back({*id, s.logprobs()});
            }
            *after = s.logprobs();
          },
          asio::detached);
      io.run();
      return out;
    };
    // The log-softmax of the full forward pass's last row after `ids`, in double.
    const auto reference = [&](const std::vector<std::int32_t>& ids) {
      const auto row = m.logits(ids).to_vector<float>();
      const std::size_t vocab = row.size() / ids.size();
      return log_softmax_of(std::span(row).last(vocab));
    };
    std::optional<cotensor::lm::token_logprobs> after;
    for (const float temperature : {0.0F, 1.5F}) {
      CAPTURE(temperature);
      const sampling_params p{.temperature = temperature,
                              .seed = 7,
                              .max_tokens = 8,
                              .ignore_eos = true,
                              .logprobs = 5};
      const auto tokens = run(p, &after);
      REQUIRE(tokens.size() == 8);
      CHECK_FALSE(after.has_value());  // the end brings none
      std::vector<std::int32_t> ids = prompt;
      for (const token& t : tokens) {
        REQUIRE(t.logprobs.has_value());
        const std::vector<double> want = reference(ids);
        CHECK(t.logprobs->logprob ==
              doctest::Approx(want[static_cast<std::size_t>(t.id)]).epsilon(1e-4));
        REQUIRE(t.logprobs->top.size() == 5);
        if (temperature == 0.0F) {
          CHECK(t.logprobs->top[0].id == t.id);  // greedy: the likeliest
        }
        for (std::size_t i = 0; i < 5; ++i) {
          const auto& alt = t.logprobs->top[i];
          CHECK(alt.logprob ==
                doctest::Approx(want[static_cast<std::size_t>(alt.id)]).epsilon(1e-4));
          if (i > 0) {
            CHECK(alt.logprob <= t.logprobs->top[i - 1].logprob);
          }
        }
        // Nothing outside the five is likelier than the fifth.
        std::size_t likelier = 0;
        for (const double w : want) {
          likelier += w > want[static_cast<std::size_t>(t.logprobs->top[4].id)] + 1e-3 ? 1 : 0;
        }
        CHECK(likelier <= 4);
        ids.push_back(t.id);
      }
      // Asking for log-probabilities changes no token; without them none come, and 0 gives
      // only the token's own.
      auto plain = p;
      plain.logprobs.reset();
      const auto without = run(plain, &after);
      auto own = p;
      own.logprobs = 0;
      const auto only_own = run(own, &after);
      REQUIRE(without.size() == tokens.size());
      REQUIRE(only_own.size() == tokens.size());
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        CHECK(without[i].id == tokens[i].id);
        CHECK_FALSE(without[i].logprobs.has_value());
        CHECK(only_own[i].id == tokens[i].id);
        REQUIRE(only_own[i].logprobs.has_value());
        CHECK(only_own[i].logprobs->top.empty());
        CHECK(only_own[i].logprobs->logprob == tokens[i].logprobs->logprob);
      }
    }
    // A cancelled sequence has no token, so no log-probabilities either. One unread token at
    // most pauses the sequence, so it cannot reach its end (which cancel leaves as it is)
    // before the cancel.
    generator paced(m, {.max_unread = 1});
    auto s = paced.submit(
        prompt, {.temperature = 0.0F, .max_tokens = 8, .ignore_eos = true, .logprobs = 1});
    asio::io_context io;
    bool had = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          (void)co_await s.async_next(asio::use_awaitable);
          had = s.logprobs().has_value();
          s.cancel();
        },
        asio::detached);
    io.run();
    CHECK(had);
    CHECK_FALSE(s.logprobs().has_value());
  }

  TEST_CASE("prompt_logprobs: every prompt token's log-softmax after the first, whole and in "
            "chunks, past the prefix cache, and max_tokens 0 computes the prompt alone") {
    const model m = model::load(data / "gpt2-tiny");
    const auto prompt = m.tokenizer().encode("Hello, world! Hello, world! Hello, world! Hi");
    REQUIRE(prompt.size() > 17);  // more than one block of 16
    // The log-softmax of every row of the full forward pass, in double.
    const auto rows = m.logits(prompt).to_vector<float>();
    const std::size_t vocab = rows.size() / prompt.size();
    const auto reference = [&](std::size_t at, std::int32_t id) {
      return log_softmax_of(
          std::span(rows).subspan(at * vocab, vocab))[static_cast<std::size_t>(id)];
    };
    struct result {
      std::vector<std::int32_t> tokens;
      std::vector<cotensor::lm::token_logprobs> scored;
      finish_reason reason;
    };
    const auto run = [&](generator& g, const sampling_params& p) {
      auto s = g.submit(prompt, p);
      result out;
      asio::io_context io;
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            while (auto id = co_await s.async_next(asio::use_awaitable)) {
              out.tokens.push_back(*id);
              if (out.tokens.size() == 1) {
                out.scored = s.prompt_logprobs();
              }
            }
            if (out.tokens.empty()) {
              out.scored = s.prompt_logprobs();
            }
          },
          asio::detached);
      io.run();
      out.reason = s.finish_reason();
      return out;
    };
    const sampling_params scored{
        .temperature = 0.0F, .max_tokens = 4, .ignore_eos = true, .prompt_logprobs = 3};
    generator g(m);
    const result whole = run(g, scored);
    REQUIRE(whole.scored.size() == prompt.size() - 1);
    for (std::size_t i = 0; i + 1 < prompt.size(); ++i) {
      CAPTURE(i);
      const auto& e = whole.scored[i];
      CHECK(e.logprob == doctest::Approx(reference(i, prompt[i + 1])).epsilon(1e-4));
      REQUIRE(e.top.size() == 3);
      for (std::size_t k = 0; k < 3; ++k) {
        CHECK(e.top[k].logprob == doctest::Approx(reference(i, e.top[k].id)).epsilon(1e-4));
        if (k > 0) {
          CHECK(e.top[k].logprob <= e.top[k - 1].logprob);
        }
      }
    }
    // The same tokens as without; the prompt again (its blocks published) is computed whole,
    // not taken from the prefix cache, with the same figures; in chunks of 5 too.
    auto plain = scored;
    plain.prompt_logprobs.reset();
    const result without = run(g, plain);
    CHECK(without.tokens == whole.tokens);
    CHECK(without.scored.empty());
    const auto hits = g.stats().prefix_cache_hits;
    const result again = run(g, scored);
    CHECK(g.stats().prefix_cache_hits == hits);
    generator chunked(m, {.prefill_chunk = 5});
    const result in_chunks = run(chunked, scored);
    for (const result* r : {&again, &in_chunks}) {
      CHECK(r->tokens == whole.tokens);
      REQUIRE(r->scored.size() == whole.scored.size());
      for (std::size_t i = 0; i < whole.scored.size(); ++i) {
        CHECK(r->scored[i].logprob == doctest::Approx(whole.scored[i].logprob).epsilon(1e-5));
        CHECK(r->scored[i].top.size() == 3);
      }
    }
    // max_tokens 0: the prompt alone, then the end (length), with every prompt token scored.
    auto prompt_only = scored;
    prompt_only.max_tokens = 0;
    const result alone = run(g, prompt_only);
    CHECK(alone.tokens.empty());
    CHECK(alone.reason == finish_reason::length);
    REQUIRE(alone.scored.size() == whole.scored.size());
    CHECK(alone.scored.front().logprob == whole.scored.front().logprob);
    // 0 gives each prompt token's own alone.
    auto own = scored;
    own.prompt_logprobs = 0;
    const result own_only = run(g, own);
    REQUIRE(own_only.scored.size() == whole.scored.size());
    CHECK(own_only.scored.back().top.empty());
    CHECK_THROWS_WITH(g.submit(prompt, {.prompt_logprobs = 21}),
                      doctest::Contains("prompt_logprobs"));
  }

  TEST_CASE("logit_bias and the penalties: each pick the largest of the model's logits so "
            "adjusted, alone or among others") {
    const model m = model::load(data / "gpt2-tiny");
    generator g(m);
    const auto prompt = m.tokenizer().encode("Hello, world! Hello, world!");
    const auto run = [&](sampling_params p) {
      auto s = g.submit(prompt, p);
      return read_one(s);
    };
    const sampling_params greedy{.temperature = 0.0F, .max_tokens = 16, .ignore_eos = true};
    const auto plain = run(greedy);
    REQUIRE(plain.size() == 16);

    // The last row of the model's logits after `ids`, adjusted as vLLM does, written out here.
    const auto adjusted = [&](const std::vector<std::int32_t>& ids, const sampling_params& p) {
      const auto all = m.logits(ids).to_vector<float>();
      const std::size_t vocab = all.size() / ids.size();
      std::vector<float> row(all.end() - static_cast<std::ptrdiff_t>(vocab), all.end());
      for (const auto& [id, bias] : p.logit_bias) {
        row[static_cast<std::size_t>(id)] += bias;
      }
      std::set<std::int32_t> seen(ids.begin(), ids.end());
      for (const std::int32_t id : seen) {
        float& x = row[static_cast<std::size_t>(id)];
        x = x > 0.0F ? x / p.repetition_penalty : x * p.repetition_penalty;
      }
      std::map<std::int32_t, int> counts;
      for (std::size_t i = prompt.size(); i < ids.size(); ++i) {
        ++counts[ids[i]];
      }
      for (const auto& [id, count] : counts) {
        float& x = row[static_cast<std::size_t>(id)];
        x -= p.frequency_penalty * static_cast<float>(count);
        x -= p.presence_penalty;
      }
      return row;
    };
    auto repetition = greedy;
    repetition.repetition_penalty = 3.0F;
    auto presence = greedy;
    presence.presence_penalty = 2.0F;
    presence.frequency_penalty = 1.5F;
    // Greedy's first token and the next other one it gives, banned; another favoured.
    const auto next = std::ranges::find_if(plain, [&](std::int32_t id) { return id != plain[0]; });
    REQUIRE(next != plain.end());
    const std::int32_t other = *next;
    std::int32_t favoured = 7;
    while (favoured == plain[0] || favoured == other) {
      ++favoured;
    }
    auto bias = greedy;
    bias.logit_bias = {{plain[0], -100.0F}, {other, -100.0F}, {favoured, 2.5F}};
    auto all = bias;
    all.repetition_penalty = 0.5F;  // below 1: repeats encouraged
    all.presence_penalty = -1.0F;
    all.frequency_penalty = 0.5F;
    for (const sampling_params& p : {repetition, presence, bias, all}) {
      const auto tokens = run(p);
      REQUIRE(tokens.size() == 16);
      CHECK(tokens != plain);  // the adjustment is no no-op
      // Each pick is the largest adjusted logit, within the model's logits' tolerance (the
      // reference's full forward pass differs from the steps' by rounding).
      std::vector<std::int32_t> ids = prompt;
      for (const std::int32_t id : tokens) {
        const auto row = adjusted(ids, p);
        CHECK(row[static_cast<std::size_t>(id)] >= *std::ranges::max_element(row) - 1e-3F);
        ids.push_back(id);
      }
      // Among other sequences, greedy or sampled, the same tokens; the others' are theirs alone.
      // A seeded sample under the same adjustment: its own tokens, not the unadjusted ones.
      auto sampled = p;
      sampled.temperature = 1.0F;
      sampled.seed = 3;
      auto unadjusted = greedy;
      unadjusted.temperature = 1.0F;
      unadjusted.seed = 3;
      const auto alone = run(sampled);
      CHECK(alone != run(unadjusted));
      std::vector<sequence> batch;
      batch.push_back(g.submit(prompt, greedy));
      batch.push_back(g.submit(prompt, p));
      batch.push_back(g.submit(prompt, unadjusted));
      batch.push_back(g.submit(prompt, sampled));
      const auto together = read_all(batch);
      CHECK(together[0] == plain);
      CHECK(together[1] == tokens);
      CHECK(together[2] == run(unadjusted));
      CHECK(together[3] == alone);
    }
    // Every id but three banned: sampled, only those three come; a forced one always does.
    auto banned = greedy;
    banned.temperature = 1.0F;
    banned.seed = 11;
    for (std::int32_t id = 0; id < m.vocab_size(); ++id) {
      if (id < 5 || id > 7) {
        banned.logit_bias.emplace_back(id, -100.0F);
      }
    }
    for (const std::int32_t id : run(banned)) {
      CHECK((id >= 5 && id <= 7));
    }
    // A penalty far from 1 holds the logits within float's range: the sequence goes on.
    for (const float penalty : {1e-40F, 1e38F}) {
      auto extreme = greedy;
      extreme.repetition_penalty = penalty;
      CHECK(run(extreme).size() == 16);
      extreme.temperature = 1.0F;
      CHECK(run(extreme).size() == 16);
    }
    for (const float temperature : {0.0F, 1.0F}) {
      const auto forced = run({.temperature = temperature,
                               .seed = 5,
                               .max_tokens = 8,
                               .ignore_eos = true,
                               .logit_bias = {{42, 100.0F}}});
      CHECK(forced == std::vector<std::int32_t>(8, 42));
    }
    // The log-probabilities stay the model's: the same as without the bias.
    auto scored = bias;
    scored.logprobs = 3;
    auto s = g.submit(prompt, scored);
    std::optional<cotensor::lm::token_logprobs> first;
    asio::io_context io;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          (void)co_await s.async_next(asio::use_awaitable);
          first = s.logprobs();
          s.cancel();
        },
        asio::detached);
    io.run();
    REQUIRE(first.has_value());
    REQUIRE(first->top.size() == 3);
    CHECK(first->top[0].id == plain[0]);  // banned from the pick, still the likeliest
  }

  TEST_CASE("submit refuses what it cannot run, naming it") {
    const model m = model::load(data / "gpt2-tiny");
    generator g(m);
    const std::vector<std::int32_t> ok{1, 2, 3};
    CHECK_THROWS_AS(g.submit({}, {}), std::invalid_argument);
    CHECK_THROWS_AS(g.submit(std::vector<std::int32_t>(64, 1), {}), std::invalid_argument);
    CHECK_THROWS_AS(g.submit({1, 1200}, {}), std::out_of_range);
    CHECK_THROWS_WITH(g.submit(ok, {.temperature = -1.0F}), doctest::Contains("temperature"));
    CHECK_THROWS_WITH(g.submit(ok, {.top_k = -1}), doctest::Contains("top_k"));
    CHECK_THROWS_WITH(g.submit(ok, {.top_p = 0.0F}), doctest::Contains("top_p"));
    CHECK_THROWS_WITH(g.submit(ok, {.max_tokens = -1}), doctest::Contains("max_tokens"));
    CHECK_THROWS_WITH(g.submit(ok, {.stop = {""}}), doctest::Contains("stop"));
    CHECK_THROWS_WITH(g.submit(ok, {.logprobs = 21}), doctest::Contains("logprobs"));
    CHECK_THROWS_WITH(g.submit(ok, {.logprobs = -1}), doctest::Contains("logprobs"));
    CHECK_THROWS_WITH(g.submit(ok, {.presence_penalty = 2.5F}),
                      doctest::Contains("presence_penalty"));
    CHECK_THROWS_WITH(g.submit(ok, {.frequency_penalty = -3.0F}),
                      doctest::Contains("frequency_penalty"));
    CHECK_THROWS_WITH(g.submit(ok, {.repetition_penalty = 0.0F}),
                      doctest::Contains("repetition_penalty"));
    CHECK_THROWS_WITH(g.submit(ok, {.logit_bias = {{5, 101.0F}}}), doctest::Contains("logit_bias"));
    CHECK_THROWS_WITH(g.submit(ok, {.logit_bias = {{5, 1.0F}, {5, 2.0F}}}),
                      doctest::Contains("twice"));
    CHECK_THROWS_WITH(g.submit(ok, {.logit_bias = {{-1, 1.0F}}}), doctest::Contains("negative"));
    CHECK_THROWS_AS(g.submit(ok, {.logit_bias = {{1200, 1.0F}}}), std::out_of_range);
    CHECK_THROWS_AS(generator(m, {.block_size = 0}), std::invalid_argument);
    CHECK_THROWS_AS(generator(m, {.kv_cache_bytes = 1}), std::invalid_argument);
  }
}
