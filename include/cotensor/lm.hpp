#pragma once

/// \file
/// Language models: a Hugging Face model folder's tokenizer (`tokenizer.json`) and model
/// (`model`: GPT-2, Llama, Qwen2 and Mistral layouts, logits without a cache so far), and the
/// text of a sequence's ids as they come (`text_stream`). Generation (sampling, a cache, the
/// continuous-batching scheduler) is not here yet.
///
/// Thread safety: a `tokenizer` is immutable once made; any number of threads may call its const
/// members at once, and copies share one table (copying is cheap). A `text_stream` is one
/// sequence's: one thread at a time. A `model` is immutable once loaded: its const members may be
/// called from any thread, and copies share its weights.

#include "cotensor/device.hpp"
#include "cotensor/dtype.hpp"
#include "cotensor/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
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

  /// The text of `ids`, special tokens skipped, as `tokenizers`' `decode(ids,
  /// skip_special_tokens=True)`: bytes that do not form UTF-8 become U+FFFD. Throws
  /// std::out_of_range for an id past the vocabulary.
  std::string decode(std::span<const std::int32_t> ids) const;

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
/// and `tokenizer.json`. Architectures: `GPT2LMHeadModel` (learned positions, Conv1D weights,
/// `gelu_new`, the head tied to the token embedding); `LlamaForCausalLM`, `Qwen2ForCausalLM` and
/// `MistralForCausalLM` without a sliding window (RMSNorm, RoPE with `rope_theta` and no scaling,
/// SwiGLU, grouped-query attention, q/k/v biases where the file has them, tied or untied head).
class model {
public:
  /// Reads the folder `dir`; the weights are read asynchronously (ops on cotensor's read
  /// threads), so the call returns before they are in memory. Throws std::runtime_error naming
  /// the file and what is wrong: an architecture not supported, a missing or misshapen tensor,
  /// an unreadable config; std::invalid_argument for a dtype other than float32, bfloat16 or
  /// float16.
  static model load(const std::filesystem::path& dir, load_options options = {});

  /// The model's tokenizer.
  const lm::tokenizer& tokenizer() const noexcept;

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

  /// The weights and shape of a model (src/lm/model.cpp).
  struct impl;

private:
  explicit model(std::shared_ptr<const impl> p) noexcept;
  std::shared_ptr<const impl> impl_;
};

}  // namespace cotensor::lm
