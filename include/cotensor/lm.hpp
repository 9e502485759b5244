#pragma once

/// \file
/// Language models: a Hugging Face model folder's tokenizer (`tokenizer.json`) and model
/// (`model`: GPT-2, Llama, Qwen2 and Mistral layouts), generation token by token with a
/// continuous-batching scheduler over a paged key/value cache (`generator`, `sequence`), and the
/// text of a sequence's ids as they come (`text_stream`).
///
/// Thread safety: a `tokenizer` is immutable once made; any number of threads may call its const
/// members at once, and copies share one table (copying is cheap). A `text_stream` is one
/// sequence's: one thread at a time. A `model` is immutable once loaded: its const members may be
/// called from any thread, and copies share its weights. A `generator`'s members may be called
/// from any thread; a `sequence` is one consumer's (one `async_next` at a time).

#include "cotensor/asio.hpp"
#include "cotensor/detail/async_wait.hpp"
#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/tensor.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cotensor::lm {

/// A byte-level BPE tokenizer read from a Hugging Face `tokenizer.json`, giving the ids that the
/// `tokenizers` library gives (GPT-2, Llama 3, Qwen2 and models laid out like them).
///
/// What a file may hold (anything else is refused at load, naming it): a `BPE` model (merges as
/// "a b" strings or pairs; `ignore_merges`; no byte fallback, no subword prefix or suffix); no
/// normalizer or `NFC`; the `ByteLevel` pre-tokenizer with GPT-2's split regex, or a `Sequence`
/// of `Split` pre-tokenizers (a regex, behaviour `Isolated`) ending with `ByteLevel` without its
/// regex; post-processors `ByteLevel`, `TemplateProcessing` (special tokens around one sequence)
/// or a `Sequence` of them; the `ByteLevel` decoder; added tokens matched as they are written
/// (no `lstrip`, `rstrip` or `single_word`). Regexes run on ICU, with `\s` as Unicode's
/// White_Space, as in the `tokenizers` library.
class tokenizer {
public:
  /// Reads `tokenizer_json`. Throws std::runtime_error naming the file and what it cannot read
  /// or does not support.
  static tokenizer from_file(const std::filesystem::path& tokenizer_json);

  /// The ids of `text` (UTF-8; invalid bytes are tokenized as the bytes they are), with the
  /// special tokens the file's post-processor adds (a leading `<|begin_of_text|>` for Llama 3),
  /// as `tokenizers`' `encode(text).ids`. Added tokens written in the text are matched as such.
  std::vector<std::int32_t> encode(std::string_view text) const;

  /// The ids of `text` as `encode(text)`, with the post-processor's special tokens only when
  /// `add_special_tokens` is set, as `tokenizers`' `encode(text, add_special_tokens=...)`. A
  /// rendered chat already holds its special tokens: tokenize it with `false`, as transformers'
  /// `apply_chat_template` does.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens) const;

  /// The text of `ids`, special tokens skipped, as `tokenizers`' `decode(ids,
  /// skip_special_tokens=True)`: bytes that do not form UTF-8 become U+FFFD. Throws
  /// std::out_of_range for an id past the vocabulary.
  std::string decode(std::span<const std::int32_t> ids) const;

  /// The bytes that `id` stands for: a vocabulary entry's (its byte-level characters as the
  /// bytes they stand for, which may be part of a UTF-8 character), an added token's text,
  /// special or not (where `decode` skips a special one). Throws std::out_of_range for an id
  /// past the vocabulary.
  std::string token_bytes(std::int32_t id) const;

  /// The number of ids: the vocabulary and the added tokens.
  std::size_t vocab_size() const noexcept;

  /// The id of `token` (a vocabulary entry, in its byte-level spelling, or an added token), or
  /// -1.
  std::int32_t token_to_id(std::string_view token) const;

  /// Whether `id` is an added token marked special (skipped by `decode`).
  bool is_special(std::int32_t id) const noexcept;

  /// The tables behind a tokenizer (src/lm/tokenizer.cpp).
  struct impl;

private:
  friend class text_stream;
  explicit tokenizer(std::shared_ptr<const impl> p) noexcept;
  std::shared_ptr<const impl> impl_;
};

/// The text of a sequence's ids as they come, for streaming: each `push` returns the text its id
/// completes, never part of a UTF-8 character (a character whose bytes span tokens comes with the
/// token that ends it), and all that `push` and `finish` return, put together, is
/// `decode(ids)` of all the ids.
class text_stream {
public:
  /// A stream for ids of `t` (it keeps a copy, which shares `t`'s tables).
  explicit text_stream(tokenizer t);

  /// The text that `id` completes: possibly empty (a special token, or a character not ended
  /// yet). Throws std::out_of_range for an id past the vocabulary, changing nothing.
  std::string push(std::int32_t id);

  /// What is left at the end of the sequence: U+FFFD for a character cut short, else empty.
  /// The stream is then empty, as new.
  std::string finish();

private:
  tokenizer tokenizer_;
  std::string pending_;  // bytes of a character not complete yet
};

/// One message of a chat.
struct chat_message {
  std::string role;     ///< "system", "user", "assistant", ...
  std::string content;  ///< its text
};

/// A Jinja chat template (a Hugging Face `chat_template`), rendered as transformers'
/// `apply_chat_template(..., tokenize=False)` renders it: Jinja's `trim_blocks` and
/// `lstrip_blocks`, the `loopcontrols` extension, transformers' `tojson`, `raise_exception` and
/// `strftime_now`, undefined values printed as "" and falsy.
///
/// The subset: text, `{{ }}`, `{% %}`, `{# #}` and the whitespace controls `-` and `+`.
/// Statements `if`/`elif`/`else`, `for` (with `loop.index`, `index0`, `revindex`, `revindex0`,
/// `first`, `last`, `length`, `previtem`, `nextitem`; unpacking `k, v`; an `if` filter; `else`),
/// `set` (a name or `ns.attr`), `break`, `continue`, `generation`. Expressions: string, integer,
/// float, boolean and none literals, lists, dicts, names, `.attr`, `[key]`, slices, calls,
/// arithmetic (`+`, `-`, `*`, `/`, `//`, `%`, `**`), `~`, comparisons, `in`, `not in`, `and`,
/// `or`, `not`, `a if b else c`. Filters:
/// `abs`, `capitalize`, `count`, `default`/`d`, `first`, `float`, `int`, `items`, `join`,
/// `last`, `length`, `list`, `lower`, `map` (an attribute or a filter), `reject`, `rejectattr`,
/// `replace`, `select`, `selectattr`, `string`, `tojson`, `trim`, `upper`. Tests: `boolean`,
/// `defined`, `divisibleby`, `eq`/`equalto`/`==`, `even`, `false`, `float`, `in`, `integer`,
/// `iterable`, `mapping`, `ne`/`!=`, `none`, `number`, `odd`, `sequence`, `string`, `true`,
/// `undefined`. Functions: `raise_exception`, `strftime_now`, `namespace`, `range`, `dict`.
/// Methods: on strings `strip`, `lstrip`, `rstrip`, `startswith`, `endswith`, `split`,
/// `upper`, `lower`, `replace`, `title`, `capitalize`, `join`, `find`, `count`; on dicts `get`,
/// `items`, `keys`, `values`. Anything else (macros, `include`, `extends`, other filters or tests)
/// is refused by `parse`.
///
/// Thread safety: immutable once parsed; any number of threads may render at once, and copies
/// share one parsed tree.
class chat_template {
public:
  /// Parses `source`; throws std::invalid_argument naming the construct and its position, as
  /// "chat_template: line 3, column 10: the filter 'foo' is not supported" (columns count
  /// characters from 1).
  static chat_template parse(std::string_view source);

  /// Renders `messages` with the variables `messages` (dicts with `role` and `content`),
  /// `add_generation_prompt`, `bos_token`, `eos_token`, and `tools` and `documents` none.
  /// Throws std::runtime_error with the template's own message for `raise_exception(message)`,
  /// or "chat_template: line L, column C: " and what is wrong for a runtime error (an undefined
  /// value used, a type error).
  std::string render(std::span<const chat_message> messages,
                     bool add_generation_prompt,
                     std::string_view bos_token = {},
                     std::string_view eos_token = {}) const;

  /// The template's text, as parsed.
  const std::string& source() const noexcept;

  /// The parsed tree (src/lm/chat_template.cpp).
  struct impl;

private:
  friend class model;
  explicit chat_template(std::shared_ptr<const impl> p) noexcept;
  std::shared_ptr<const impl> impl_;
};

/// How `model::load` reads a model.
struct load_options {
  /// The dtype the weights are kept and computed in: float32, bfloat16 or float16 (the logits
  /// are float32 whatever it is).
  cotensor::dtype dtype = cotensor::dtype::float32;
  /// Where the weights live and the model runs.
  cotensor::device device = cotensor::device::cpu();
};

/// A causal language model read from a Hugging Face model folder: `config.json` (its
/// `architectures`), `model.safetensors` or the shards that `model.safetensors.index.json` names,
/// `tokenizer.json`, and `tokenizer_config.json` and `chat_template.jinja` where there are.
/// Architectures: `GPT2LMHeadModel` (learned positions, Conv1D weights,
/// `gelu_new`, the head tied to the token embedding); `LlamaForCausalLM`, `Qwen2ForCausalLM` and
/// `MistralForCausalLM` without a sliding window (RMSNorm, RoPE with `rope_theta` and no scaling,
/// SwiGLU, grouped-query attention, q/k/v biases where the file has them, tied or untied head).
class model {
public:
  /// Reads the folder `dir`; the weights are read asynchronously (ops on cotensor's read
  /// threads), so the call returns before they are in memory. Throws std::runtime_error naming
  /// the file and what is wrong: an architecture not supported, a missing or misshapen tensor,
  /// an unreadable config, a chat template that does not parse; std::invalid_argument for a dtype
  /// other than float32, bfloat16 or float16.
  static model load(const std::filesystem::path& dir, load_options options = {});

  /// The model's tokenizer.
  const lm::tokenizer& tokenizer() const noexcept;

  /// The model's chat template: `chat_template.jinja` of the folder, else the `chat_template`
  /// of `tokenizer_config.json` (a string, or the "default" of a list of {name, template});
  /// null when the folder has none.
  const lm::chat_template* chat_template() const noexcept;

  /// `messages` rendered with the model's chat template, with `bos_token` and `eos_token` of
  /// `tokenizer_config.json` (undefined where it has none), as transformers'
  /// `apply_chat_template(messages, add_generation_prompt=..., tokenize=False)`. Tokenize the
  /// text with `tokenizer().encode(text, false)`. Throws std::logic_error when the model has no
  /// template; what `chat_template::render` throws.
  std::string render_chat(std::span<const chat_message> messages,
                          bool add_generation_prompt = true) const;

  /// The float32 logits `[ids.size(), vocabulary]` of one sequence, each position's next-token
  /// scores given the ids up to it: the whole forward pass, no cache (for tests and scoring).
  /// Returns at once, as any op (the tensor is computed asynchronously). Throws
  /// std::invalid_argument for no ids or more than the context length, std::out_of_range for an
  /// id past the vocabulary.
  tensor logits(std::span<const std::int32_t> ids) const;

  /// The architecture, as config.json names it ("GPT2LMHeadModel", "LlamaForCausalLM", ...).
  std::string_view architecture() const noexcept;
  /// The most ids a sequence may have (`n_positions`, `max_position_embeddings`).
  std::int64_t context_length() const noexcept;
  /// The ids the model scores, the logits' row length (`vocab_size`): the ids a prompt or a
  /// `logit_bias` may name. It may exceed the tokenizer's (Qwen2's 151,936 for 151,665 tokens).
  std::int64_t vocab_size() const noexcept;
  /// The ids that end a generation: `eos_token_id` of generation_config.json, else of
  /// config.json (a number or a list; none if neither has it).
  std::span<const std::int32_t> eos_token_ids() const noexcept;

  /// The weights and shape of a model (src/lm/model.cpp).
  struct impl;

private:
  friend class generator;
  explicit model(std::shared_ptr<const impl> p) noexcept;
  std::shared_ptr<const impl> impl_;
};

/// The most likeliest tokens `sampling_params::logprobs` may ask for (vLLM's and OpenAI's 20).
inline constexpr int max_logprobs = 20;

/// How a sequence picks its tokens and when it ends (vLLM's `SamplingParams`, its defaults).
///
/// Each token is picked from the model's logits adjusted in vLLM's order: `logit_bias` added,
/// then `repetition_penalty`, `frequency_penalty` and `presence_penalty` applied, then
/// temperature, top-k and top-p (a greedy pick takes the largest adjusted logit).
/// `token_logprobs` are the model's, before any of them.
struct sampling_params {
  /// Divides the logits before the softmax; 0 picks the most likely token (greedy, the lowest
  /// id among equals). Negative or NaN is refused.
  float temperature = 1.0F;
  /// Keeps the `top_k` most likely tokens (the lower id first among equals); 0 keeps all.
  int top_k = 0;
  /// Keeps the most likely tokens whose probabilities add up to `top_p` (at least one), in
  /// (0, 1].
  float top_p = 1.0F;
  /// The seed of the sequence's random numbers (Philox-4x32-10, one number per token): the same
  /// seed, prompt and parameters give the same tokens whatever the batch and thread count. None:
  /// a seed from std::random_device.
  std::optional<std::uint64_t> seed{};
  /// The most tokens to generate; a sequence also ends at the generator's context. 0 computes
  /// the prompt alone (for `prompt_logprobs`, or to fill the prefix cache) and ends with
  /// `length`, delivering no token.
  int max_tokens = 16;
  /// Texts that end the sequence: the token whose text completes one is the last delivered
  /// (its text holds the stop text; a server trims it).
  std::vector<std::string> stop{};
  /// Goes on past the model's end-of-sequence ids (delivering them) instead of stopping before.
  bool ignore_eos = false;
  /// Log-probabilities with every token delivered (`sequence::logprobs`): its own and those of
  /// the `logprobs` most likely tokens, 0 to `max_logprobs` (vLLM's `logprobs`). None: not
  /// computed.
  std::optional<int> logprobs{};
  /// Log-probabilities of the prompt's tokens after the first (`sequence::prompt_logprobs`),
  /// each with those of the `prompt_logprobs` most likely tokens at its position, 0 to
  /// `max_logprobs` (vLLM's `prompt_logprobs`). The prompt is then computed whole, the prefix
  /// cache not searched for it (its blocks are still offered to other sequences), and each of
  /// its tokens costs a pass over the vocabulary on the generator's thread. None: not computed.
  std::optional<int> prompt_logprobs{};
  /// Subtracted from the logit of every token the sequence has generated, once however often
  /// (OpenAI's and vLLM's `presence_penalty`), in [-2, 2]; the prompt's tokens are not counted.
  /// Positive discourages a token once it appeared, negative encourages it.
  float presence_penalty = 0.0F;
  /// Subtracted from the logit of every token the sequence has generated, once for each time it
  /// was (`frequency_penalty`), in [-2, 2].
  float frequency_penalty = 0.0F;
  /// For every token of the prompt or generated, its logit divided by this where positive and
  /// multiplied by it where not (vLLM's `repetition_penalty`, CTRL's), a result past float's
  /// range held at its largest finite value: above 1 discourages repeats, below 1 encourages
  /// them; finite and above 0, 1 for none.
  float repetition_penalty = 1.0F;
  /// Added to the logits of these ids (OpenAI's `logit_bias`): -100 all but bans a token, 100 all
  /// but forces it. `submit` throws std::invalid_argument for a bias outside [-100, 100], a
  /// negative id or an id given twice, std::out_of_range for an id from `model::vocab_size()` on.
  std::vector<std::pair<std::int32_t, float>> logit_bias{};
};

/// A token and its log-probability.
struct token_logprob {
  std::int32_t id = 0;   ///< the token
  float logprob = 0.0F;  ///< its log-probability
};

/// The log-probabilities that came with a token (`sampling_params::logprobs` and
/// `prompt_logprobs`): the log-softmax of the model's logits at that position, x − max −
/// log Σ e^(x − max) with the exponentials in float (within 4 ulp) and the rest in double,
/// rounded to float, before temperature, top-k and top-p (the distribution of the model, as
/// vLLM's default `raw_logprobs`): what the model gives the token whichever way it was picked.
struct token_logprobs {
  /// The token's own log-probability.
  float logprob = 0.0F;
  /// The `sampling_params::logprobs` most likely tokens, most likely first (the lower id first
  /// among equals); a greedy pick is the first.
  std::vector<token_logprob> top;
};

/// The end-of-sequence id that ended a sequence (`sequence::end_token`), which `async_next` does
/// not deliver.
struct end_token {
  std::int32_t id = 0;  ///< the id, one of the model's end-of-sequence ids
  /// Its log-probabilities, when `sampling_params::logprobs` asks for them.
  std::optional<token_logprobs> logprobs;
};

/// Why a sequence ended.
enum class finish_reason : std::uint8_t {
  none,       ///< not finished
  stop,       ///< an end-of-sequence id (not delivered) or a stop text
  length,     ///< `max_tokens` generated, or the generator's context full
  cancelled,  ///< cancelled: its `async_next` cancelled, the `sequence` destroyed, or the
              ///< generator destroyed
  error,      ///< a step's forward pass failed (`sequence::error()` holds why)
};

/// A `generator`'s limits. The key/value cache is a pool of blocks of `block_size` tokens.
struct generator_options {
  /// The most sequences generating at once (one step batches all of them).
  std::size_t max_running = 64;
  /// The most sequences waiting for room; `submit` past it throws std::length_error. A
  /// waiting sequence cancelled (or destroyed) gives its place back at once.
  std::size_t max_waiting = 1024;
  /// Bytes of the key/value cache; 0: enough for `max_running` sequences of the whole context,
  /// at most 512 MiB.
  std::size_t kv_cache_bytes = 0;
  /// The most ids a sequence may hold, prompt and generated tokens together (vLLM's
  /// `max_model_len`); 0: the model's `context_length()`. Past the model's, the generator's
  /// constructor throws std::invalid_argument.
  std::int64_t context_length = 0;
  /// Tokens per block of the cache (16, as vLLM).
  std::int64_t block_size = 16;
  /// The most tokens one step computes, over all sequences (decode tokens first, then prompt
  /// chunks: keep it above `max_running`, or prompts wait while every sequence decodes). A step
  /// is every running sequence's wait for its next token. 2048, as vLLM's CPU server: prompts
  /// that arrive together are read in one step, which the decoding sequences wait on once,
  /// where 256 spread them over steps that each held every stream back (16 served streams of
  /// GPT-2 small: inter-token p99 30-56 ms against 160-176, tokens/s 1-10 % higher, the first
  /// token 2.3x later; docs/performance.md, "Serving language models"). Smaller bounds each
  /// step's wait: a first token then comes sooner, the others' tokens less evenly.
  std::int64_t token_budget = 2048;
  /// The most prompt tokens of one sequence in one step (chunked prefill: a prompt longer than
  /// this is read over several steps; smaller, it holds other sequences' tokens back less long).
  std::int64_t prefill_chunk = 2048;
  /// A sequence with this many tokens not yet taken by `async_next` is paused (skipped by the
  /// steps) until its reader catches up: a slow reader never makes memory grow. A paused
  /// sequence keeps its cache blocks and its place among `max_running`: read every running
  /// sequence (one coroutine each), or sequences behind it may wait for room indefinitely.
  std::size_t max_unread = 64;
  /// Identical prompt prefixes share full cache blocks (found by a hash of their tokens,
  /// checked id for id), so a repeated prefix is computed once, also by prompts running at
  /// once: a prompt whose next block another is computing waits for it.
  bool prefix_caching = true;
};

/// What a `generator` is doing, read at one moment.
struct generator_stats {
  std::size_t running = 0;                   ///< sequences admitted and not finished
  std::size_t waiting = 0;                   ///< sequences waiting for room
  std::size_t kv_blocks_used = 0;            ///< cache blocks held by sequences
  std::size_t kv_blocks_total = 0;           ///< cache blocks in the pool
  std::uint64_t steps = 0;                   ///< forward passes run
  std::uint64_t tokens_generated = 0;        ///< tokens sampled (end-of-sequence ids included)
  std::uint64_t prompt_tokens_computed = 0;  ///< prompt tokens run through the model
  std::uint64_t prefix_cache_hits = 0;       ///< prompt tokens taken from shared blocks
};

/// One generation: the tokens a `generator` picks after a prompt, taken one at a time.
///
/// Move-only. Destroying it (or moving another into it) cancels the generation: its cache blocks
/// go back to the pool at the next step.
class sequence {
public:
  struct state;

  /// An empty sequence: `async_next` gives `bad_descriptor`.
  sequence() = default;
  /// Takes `other`'s generation; `other` is left empty.
  sequence(sequence&&) noexcept = default;
  /// Cancels this sequence's generation (as `cancel()`), then takes `other`'s.
  sequence& operator=(sequence&& other) noexcept;
  sequence(const sequence&) = delete;
  sequence& operator=(const sequence&) = delete;
  /// Cancels the generation, as `cancel()`.
  ~sequence();

  /// Waits for the sequence's next token. Any Asio completion token; signature
  /// `void(boost::system::error_code, std::optional<std::int32_t>)`: the next id, or
  /// `std::nullopt` once the sequence has finished (`finish_reason()` says why). Tokens are
  /// kept until taken (at most `max_unread`: the sequence pauses past it).
  ///
  /// Completion: on the handler's associated executor (cotensor's I/O executor if none), never
  /// inside this call. Errors: `operation_aborted` when the wait is cancelled (Asio's
  /// per-operation cancellation, any type), which also cancels the sequence; `io_error` when a
  /// step failed (`error()` holds the exception); `in_progress` when another `async_next` of
  /// this sequence is pending; `bad_descriptor` on an empty (moved-from) sequence. With
  /// `asio::use_awaitable`: `while (auto id = co_await seq.async_next(asio::use_awaitable))`.
  template <class CompletionToken>
  auto async_next(CompletionToken&& token) {
    using signature = void(boost::system::error_code, std::optional<std::int32_t>);
    return asio::async_initiate<CompletionToken, signature>(
        [](auto handler, std::shared_ptr<state> s) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto ex = asio::get_associated_executor(handler, detail::fallback_executor());
          auto done = [handler = std::move(handler), s](std::exception_ptr e) mutable {
            auto [ec, id] = take_next(s, std::move(e));
            std::move(handler)(ec, id);
          };
          detail::async_wait_with(
              asio::bind_cancellation_slot(slot, asio::bind_executor(ex, std::move(done))),
              [s](detail::waiter& w) { start_next(s, w); });
        },
        token, state_);
  }

  /// The log-probabilities of the token that the last `async_next` gave, when its sampling
  /// parameters ask for them (`sampling_params::logprobs`); std::nullopt when they do not, before
  /// the first token and after the last. Thread safety: the reader's, as `async_next`.
  std::optional<token_logprobs> logprobs() const;
  /// The log-probabilities of the prompt's tokens after the first, in order (entry i is token
  /// i + 1's, given the tokens before it), when `sampling_params::prompt_logprobs` asks for
  /// them: every one once `async_next` has given the first token or the end, those computed so
  /// far before (a sequence that failed or was cancelled mid-prompt has part of them). Empty
  /// when not asked. Thread safety: the reader's, as `async_next`.
  std::vector<token_logprobs> prompt_logprobs() const;
  /// The end-of-sequence id that ended the sequence (`finish_reason()` `stop` with no stop text),
  /// with its log-probabilities when they were asked for: a listing of the model's choices
  /// (vLLM's) ends with it. std::nullopt otherwise, and before the end. Thread safety: the
  /// reader's, as `async_next`.
  std::optional<lm::end_token> end_token() const;
  /// Why the sequence ended (`none` while it runs).
  lm::finish_reason finish_reason() const noexcept;
  /// Why a step failed, when `finish_reason()` is `error`; else null.
  std::exception_ptr error() const;
  /// The prompt's ids (as submitted).
  std::size_t prompt_size() const noexcept;
  /// Cancels the generation: `async_next` then gives `std::nullopt`, `finish_reason()`
  /// `cancelled`, and the cache blocks go back at the next step. Nothing if it has finished.
  void cancel() noexcept;

private:
  friend class generator;
  explicit sequence(std::shared_ptr<state> s) noexcept : state_(std::move(s)) {}
  static void start_next(const std::shared_ptr<state>& s, detail::waiter& w);
  static std::pair<boost::system::error_code, std::optional<std::int32_t>>
  take_next(const std::shared_ptr<state>& s, std::exception_ptr wait_error);

  std::shared_ptr<state> state_;
};

/// The continuous-batching scheduler of one model: every step runs one forward pass over the
/// next token of every running sequence and chunks of waiting prompts, under a token budget;
/// sequences join and leave between steps. The key/value cache is a pool of blocks with a block
/// table per sequence; a sequence is admitted once the blocks for its prompt and `max_tokens`
/// are free (it waits until then, in submission order).
///
/// Steps run on a thread of the generator's own, which blocks on the forward pass's results (no
/// Asio thread ever does); tokens reach their readers through `sequence::async_next`. Sampling
/// runs there too, per sequence with its own seed, so batching changes no sequence's tokens.
class generator {
public:
  /// A scheduler for `m` (it keeps a copy, which shares the weights), with its cache allocated
  /// on the model's device. Throws std::invalid_argument for options out of range (a zero
  /// limit, a cache smaller than one sequence's block, a `context_length` past the model's).
  explicit generator(const lm::model& m, generator_options options = {});
  /// Stops the steps, cancels every sequence not finished (their `async_next` gives
  /// `std::nullopt`, `finish_reason()` `cancelled`) and waits for the step running, if any.
  ~generator();
  generator(const generator&) = delete;
  generator& operator=(const generator&) = delete;

  /// Starts generating after `prompt` (ids, e.g. `model.tokenizer().encode(text)`). Throws
  /// std::invalid_argument for an empty prompt, one that fills the context, parameters out of
  /// range, or a sequence needing more cache blocks than the pool has; std::out_of_range for an
  /// id past the vocabulary; std::length_error when `max_waiting` sequences wait already.
  sequence submit(std::vector<std::int32_t> prompt, sampling_params params = {});

  /// The scheduler's figures now.
  generator_stats stats() const;

  /// The most ids a sequence holds: `generator_options::context_length`, or the model's.
  std::int64_t context_length() const noexcept;

  /// The scheduler's state (src/lm/generator.cpp).
  struct state;

private:
  std::shared_ptr<state> state_;
};

}  // namespace cotensor::lm
