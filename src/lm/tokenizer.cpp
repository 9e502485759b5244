// Byte-level BPE from a Hugging Face tokenizer.json (<cotensor/lm.hpp> says what is supported).
//
// encode: the text is cut at the added tokens written in it (leftmost, longest first); each
// piece between them is normalized (NFC, if the file says so), split by the pre-tokenizers'
// regexes (ICU, on the UTF-8 bytes in place), mapped byte by byte to GPT-2's printable alphabet
// and merged by rank; the post-processor's special tokens go around the whole.
// decode: the tokens' byte-level characters back to bytes, then UTF-8 with U+FFFD for what is
// not (as Rust's String::from_utf8_lossy, which `tokenizers` uses).

#include "cotensor/lm.hpp"

#include "lm/byte_level.hpp"
#include "lm/tokenizer_impl.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>
#include <unordered_map>
#include <utility>

namespace cotensor::lm {

namespace {

// GPT-2's split regex, the ByteLevel pre-tokenizer's when `use_regex` is true.
constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& what) {
  throw std::runtime_error("cotensor::lm::tokenizer: " + file.string() + ": " + what);
}

// `pattern` for ICU: \s and \S spelled as Unicode's White_Space property, which the
// `tokenizers` library's regexes (Oniguruma) match, whatever ICU's own \s is.
std::string icu_pattern(std::string_view pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += R"(\p{White_Space})";
      } else if (next == 'S') {
        out += R"(\P{White_Space})";
      } else {
        out += '\\';
        out += next;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

std::shared_ptr<const icu::RegexPattern> compile(const std::filesystem::path& file,
                                                 std::string_view pattern) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where{};
  std::shared_ptr<const icu::RegexPattern> compiled(icu::RegexPattern::compile(
      icu::UnicodeString::fromUTF8(icu_pattern(pattern)), 0, where, status));
  if (U_FAILURE(status) || !compiled) {
    refuse(file, "cannot compile the pre-tokenizer's regex " + std::string(pattern) + " (" +
                     u_errorName(status) + " at offset " + std::to_string(where.offset) + ")");
  }
  return compiled;
}

const json::value& member(const std::filesystem::path& file,
                          const json::value& object,
                          std::string_view key,
                          json::value::kind kind) {
  const json::value* v = object.find(key);
  if (v == nullptr || v->type != kind) {
    refuse(file, "\"" + std::string(key) + "\" is missing or not of its type");
  }
  return *v;
}

bool flag(const json::value& object, std::string_view key) {
  const json::value* v = object.find(key);
  return v != nullptr && v->type == json::value::kind::boolean && v->boolean;
}

std::string type_of(const json::value& v) {
  const json::value* t = v.find("type");
  return t != nullptr && t->type == json::value::kind::string ? t->text : std::string("?");
}

std::int32_t id_of(const std::filesystem::path& file, const json::value& v) {
  const auto i = v.as_index();
  if (!i || *i > std::numeric_limits<std::int32_t>::max()) {
    refuse(file, "an id is not a whole number that fits int32: " + v.text);
  }
  return static_cast<std::int32_t>(*i);
}

}  // namespace

void tokenizer::impl::read_model(const std::filesystem::path& file, const json::value& model) {
  using kind = json::value::kind;
  if (type_of(model) != "BPE") {
    refuse(file, "model type \"" + type_of(model) + "\" is not supported (BPE only)");
  }
  if (flag(model, "byte_fallback")) {
    refuse(file, "a BPE model with byte_fallback (SentencePiece-style) is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
    const json::value* v = model.find(key);
    if (v != nullptr && v->type != kind::null) {
      refuse(file, std::string("the BPE model's \"") + key + "\" is not supported");
    }
  }
  ignore_merges = flag(model, "ignore_merges");
  for (const auto& [token, id] : member(file, model, "vocab", kind::object).members) {
    vocab.emplace(token, id_of(file, id));
  }
  const auto& list = member(file, model, "merges", kind::array).items;
  for (std::size_t rank = 0; rank < list.size(); ++rank) {
    std::string left;
    std::string right;
    const json::value& m = list[rank];
    if (m.type == kind::string && m.text.find(' ') != std::string::npos) {
      const std::size_t space = m.text.find(' ');
      left = m.text.substr(0, space);
      right = m.text.substr(space + 1);
    } else if (m.type == kind::array && m.items.size() == 2 && m.items[0].type == kind::string &&
               m.items[1].type == kind::string) {
      left = m.items[0].text;
      right = m.items[1].text;
    } else {
      refuse(file, "merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto a = vocab.find(left);
    const auto b = vocab.find(right);
    const auto ab = vocab.find(left + right);
    if (a == vocab.end() || b == vocab.end() || ab == vocab.end()) {
      refuse(file, "merge " + std::to_string(rank) + " (" + left + " " + right +
                       ") names a token missing from the vocabulary");
    }
    merges.emplace(pair_key(a->second, b->second),
                   std::pair{static_cast<std::int32_t>(rank), ab->second});
  }
}

void tokenizer::impl::read_pre_tokenizer(const std::filesystem::path& file,
                                         const json::value& pre) {
  using kind = json::value::kind;
  const auto byte_level = [&](const json::value& p) {
    if (flag(p, "add_prefix_space")) {
      refuse(file, "the ByteLevel pre-tokenizer's add_prefix_space is not supported");
    }
    if (flag(p, "use_regex")) {
      splits.push_back(compile(file, gpt2_pattern));
    }
  };
  if (type_of(pre) == "ByteLevel") {
    byte_level(pre);
    return;
  }
  if (type_of(pre) != "Sequence") {
    refuse(file, "pre-tokenizer \"" + type_of(pre) + "\" is not supported");
  }
  const auto& steps = member(file, pre, "pretokenizers", kind::array).items;
  if (steps.empty() || type_of(steps.back()) != "ByteLevel") {
    refuse(file, "a pre-tokenizer Sequence must end with ByteLevel");
  }
  for (std::size_t i = 0; i + 1 < steps.size(); ++i) {
    const json::value& step = steps[i];
    const json::value* behavior = step.find("behavior");
    if (type_of(step) != "Split" || behavior == nullptr || behavior->text != "Isolated" ||
        flag(step, "invert")) {
      refuse(file, "pre-tokenizer \"" + type_of(step) +
                       "\" is not supported in a Sequence (Split, Isolated, not inverted only)");
    }
    const json::value& pattern = member(file, step, "pattern", kind::object);
    const json::value* regex = pattern.find("Regex");
    if (regex == nullptr || regex->type != kind::string) {
      refuse(file, "a Split pre-tokenizer's pattern must be a Regex");
    }
    splits.push_back(compile(file, regex->text));
  }
  byte_level(steps.back());
}

void tokenizer::impl::read_post_processor(const std::filesystem::path& file,
                                          const json::value& post) {
  using kind = json::value::kind;
  const std::string type = type_of(post);
  if (type == "ByteLevel") {
    return;  // offsets only
  }
  if (type == "Sequence") {
    for (const json::value& p : member(file, post, "processors", kind::array).items) {
      read_post_processor(file, p);
    }
    return;
  }
  if (type != "TemplateProcessing") {
    refuse(file, "post-processor \"" + type + "\" is not supported");
  }
  const json::value& specials = member(file, post, "special_tokens", kind::object);
  bool after = false;
  for (const json::value& piece : member(file, post, "single", kind::array).items) {
    if (piece.find("Sequence") != nullptr) {
      after = true;
      continue;
    }
    const json::value* token = piece.find("SpecialToken");
    const json::value* name = token != nullptr ? token->find("id") : nullptr;
    const json::value* entry = name != nullptr ? specials.find(name->text) : nullptr;
    if (entry == nullptr) {
      refuse(file, "a TemplateProcessing piece is neither a sequence nor a known special token");
    }
    for (const json::value& id : member(file, *entry, "ids", kind::array).items) {
      (after ? suffix : prefix).push_back(id_of(file, id));
    }
  }
}

tokenizer tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  using kind = json::value::kind;
  const json::value root = json::parse_file(tokenizer_json, "cotensor::lm::tokenizer");
  auto p = std::make_shared<impl>();
  p->read_model(tokenizer_json, member(tokenizer_json, root, "model", kind::object));

  if (const json::value* added = root.find("added_tokens"); added != nullptr) {
    for (const json::value& t : added->items) {
      if (flag(t, "lstrip") || flag(t, "rstrip") || flag(t, "single_word")) {
        refuse(tokenizer_json, "added token " +
                                   member(tokenizer_json, t, "content", kind::string).text +
                                   ": lstrip, rstrip and single_word are not supported");
      }
      impl::added a{member(tokenizer_json, t, "content", kind::string).text,
                    id_of(tokenizer_json, member(tokenizer_json, t, "id", kind::number)),
                    flag(t, "special")};
      p->vocab.insert_or_assign(a.content, a.id);
      p->added_tokens.push_back(std::move(a));
    }
  }
  std::stable_sort(
      p->added_tokens.begin(), p->added_tokens.end(),
      [](const auto& x, const auto& y) { return x.content.size() > y.content.size(); });
  for (std::uint32_t i = 0; i < p->added_tokens.size(); ++i) {
    const std::string& content = p->added_tokens[i].content;
    if (!content.empty()) {
      p->added_by_first_byte[static_cast<unsigned char>(content[0])].push_back(i);
    }
  }

  if (const json::value* n = root.find("normalizer"); n != nullptr && n->type != kind::null) {
    if (type_of(*n) != "NFC") {
      refuse(tokenizer_json, "normalizer \"" + type_of(*n) + "\" is not supported (NFC only)");
    }
    p->nfc = true;
  }
  p->read_pre_tokenizer(tokenizer_json,
                        member(tokenizer_json, root, "pre_tokenizer", kind::object));
  if (const json::value* post = root.find("post_processor");
      post != nullptr && post->type != kind::null) {
    p->read_post_processor(tokenizer_json, *post);
  }
  if (const json::value* d = root.find("decoder");
      d != nullptr && d->type != kind::null && type_of(*d) != "ByteLevel") {
    refuse(tokenizer_json, "decoder \"" + type_of(*d) + "\" is not supported (ByteLevel only)");
  }

  std::int32_t top = -1;
  for (const auto& [token, id] : p->vocab) {
    top = std::max(top, id);
  }
  p->token_of.assign(static_cast<std::size_t>(top + 1), std::string());
  p->special.assign(p->token_of.size(), false);
  for (const auto& [token, id] : p->vocab) {
    p->token_of[static_cast<std::size_t>(id)] = token;
  }
  for (const auto& a : p->added_tokens) {
    p->special[static_cast<std::size_t>(a.id)] = a.special;
  }
  p->count = p->vocab.size();
  return tokenizer(std::move(p));
}

tokenizer::tokenizer(std::shared_ptr<const impl> p) noexcept : impl_(std::move(p)) {}

void tokenizer::impl::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  std::string mapped;
  std::vector<std::int32_t> symbols;
  for (const char c : piece) {
    const std::string& ch = detail::byte_level_char(static_cast<unsigned char>(c));
    mapped += ch;
    const auto it = vocab.find(ch);
    if (it == vocab.end()) {
      throw std::runtime_error("cotensor::lm::tokenizer: the vocabulary lacks the byte-level "
                               "character of byte " +
                               std::to_string(static_cast<unsigned char>(c)));
    }
    symbols.push_back(it->second);
  }
  if (ignore_merges) {
    if (const auto whole = vocab.find(mapped); whole != vocab.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  merge_all(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void tokenizer::impl::encode_text(std::string_view text, std::vector<std::int32_t>& out) const {
  std::string normalized;
  if (nfc) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
    const icu::UnicodeString u = n->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(
                                                  text.data(), static_cast<int32_t>(text.size()))),
                                              status);
    if (U_FAILURE(status)) {
      throw std::runtime_error(std::string("cotensor::lm::tokenizer: NFC failed: ") +
                               u_errorName(status));
    }
    u.toUTF8String(normalized);
    text = normalized;
  }
  // Each regex splits every piece so far into its matches and the text between them.
  std::vector<std::string_view> pieces{text};
  for (const auto& pattern : splits) {
    std::vector<std::string_view> next;
    UErrorCode status = U_ZERO_ERROR;
    const std::unique_ptr<icu::RegexMatcher> matcher(pattern->matcher(status));
    for (const std::string_view piece : pieces) {
      UText* ut =
          utext_openUTF8(nullptr, piece.data(), static_cast<int64_t>(piece.size()), &status);
      matcher->reset(ut);
      std::int64_t done = 0;
      while (U_SUCCESS(status) && matcher->find(status)) {
        const std::int64_t begin = matcher->start64(status);
        const std::int64_t end = matcher->end64(status);
        if (begin > done) {
          next.push_back(
              piece.substr(static_cast<std::size_t>(done), static_cast<std::size_t>(begin - done)));
        }
        if (end > begin) {
          next.push_back(
              piece.substr(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin)));
        }
        done = end;
      }
      if (done < static_cast<std::int64_t>(piece.size())) {
        next.push_back(piece.substr(static_cast<std::size_t>(done)));
      }
      matcher->reset(icu::UnicodeString());
      utext_close(ut);
    }
    if (U_FAILURE(status)) {
      throw std::runtime_error(std::string("cotensor::lm::tokenizer: regex failed: ") +
                               u_errorName(status));
    }
    pieces = std::move(next);
  }
  for (const std::string_view piece : pieces) {
    encode_piece(piece, out);
  }
}

std::vector<std::int32_t> tokenizer::encode(std::string_view text) const {
  return encode(text, true);
}

std::vector<std::int32_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const impl& t = *impl_;
  std::vector<std::int32_t> out;
  if (add_special_tokens) {
    out = t.prefix;
  }
  // Cut at the added tokens written in the text: at each place the longest that starts there.
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    const impl::added* hit = nullptr;
    for (const std::uint32_t k : t.added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      if (text.substr(i).starts_with(t.added_tokens[k].content)) {
        hit = &t.added_tokens[k];
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > start) {
      t.encode_text(text.substr(start, i - start), out);
    }
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (start < text.size()) {
    t.encode_text(text.substr(start), out);
  }
  if (add_special_tokens) {
    out.insert(out.end(), t.suffix.begin(), t.suffix.end());
  }
  return out;
}

void tokenizer::impl::append_bytes(std::int32_t id, std::string& out) const {
  if (id < 0 || static_cast<std::size_t>(id) >= token_of.size()) {
    throw std::out_of_range("cotensor::lm::tokenizer: id " + std::to_string(id) +
                            " is past the vocabulary (" + std::to_string(token_of.size()) +
                            " ids)");
  }
  if (special[static_cast<std::size_t>(id)]) {
    return;
  }
  // A token's byte-level characters back to bytes; a token with any other character (an added
  // token) as its own UTF-8, as the ByteLevel decoder does.
  const std::string& token = token_of[static_cast<std::size_t>(id)];
  if (!detail::byte_level_to_bytes(token, out)) {
    out += token;
  }
}

std::string tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string raw;
  for (const std::int32_t id : ids) {
    impl_->append_bytes(id, raw);
  }
  return detail::utf8_lossy(raw);
}

std::string tokenizer::token_bytes(std::int32_t id) const {
  std::string out;
  impl_->append_bytes(id, out);  // checks the id
  if (impl_->special[static_cast<std::size_t>(id)]) {
    out = impl_->token_of[static_cast<std::size_t>(id)];  // an added token's text, as written
  }
  return out;
}

std::size_t tokenizer::vocab_size() const noexcept { return impl_->count; }

std::int32_t tokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->vocab.find(std::string(token));
  return it == impl_->vocab.end() ? -1 : it->second;
}

bool tokenizer::is_special(std::int32_t id) const noexcept {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->special.size() &&
         impl_->special[static_cast<std::size_t>(id)];
}

}  // namespace cotensor::lm
