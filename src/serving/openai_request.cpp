// The OpenAI routes' requests read (openai_request.hpp): the prompts of a completion, each fit
// to the context, the chat's messages rendered and tokenized, streaming, the fields that are
// refused rather than ignored.

#include "serving/openai_request.hpp"

namespace cotensor::serving::detail {

namespace {

// Refuses a prompt of `bytes` that must hold more tokens than the context before tokenizing
// it (no tokenizer's token is longer than a kibibyte).
void check_prompt_bytes(std::size_t bytes, std::int64_t context, std::string_view param) {
  const auto most = static_cast<std::size_t>(context) * 1024;
  if (bytes > most) {
    throw lm_request_error(400,
                           "the prompt's " + std::to_string(bytes) +
                               " bytes are past this model's context of " +
                               std::to_string(context) + " tokens",
                           std::string(param));
  }
}

}  // namespace

// The prompts of a completion request: a string, a list of ids, or a list of strings or of lists
// of ids (a batch).
std::vector<std::vector<std::int32_t>> completion_prompts(const json::value* p,
                                                          const lm::model& m,
                                                          std::int64_t context,
                                                          std::size_t most) {
  const lm::tokenizer& t = m.tokenizer();
  const auto encode = [&](const json::string& text) {
    check_prompt_bytes(text.size(), context, "prompt");
    return t.encode(text);
  };
  // `which`: the prompt's place in a batch, for the message ("" for a prompt alone).
  const auto ids = [&](const json::array& a, const std::string& which) {
    std::vector<std::int32_t> out;
    out.reserve(a.size());
    for (const auto& v : a) {
      if (!v.is_int64() || v.get_int64() < 0 ||
          v.get_int64() >= static_cast<std::int64_t>(t.vocab_size())) {
        throw lm_request_error(
            400, "'prompt'" + which + " holds an id that is not in the vocabulary", "prompt");
      }
      out.push_back(static_cast<std::int32_t>(v.get_int64()));
    }
    return out;
  };
  if (p == nullptr) {
    throw lm_request_error(400, "'prompt' is required", "prompt");
  }
  if (p->is_string()) {
    return {encode(p->get_string())};
  }
  const json::array* a = p->if_array();
  if (a != nullptr && !a->empty() && a->front().is_number()) {
    return {ids(*a, "")};
  }
  if (a != nullptr && !a->empty()) {
    const bool texts = a->front().is_string();
    if (a->size() > most) {
      throw lm_request_error(400,
                             "'prompt' holds " + std::to_string(a->size()) + " prompts, past the " +
                                 std::to_string(most) +
                                 " this model takes in one request (max_waiting sequences, n "
                                 "for each prompt)",
                             "prompt");
    }
    std::vector<std::vector<std::int32_t>> out;
    out.reserve(a->size());
    for (std::size_t i = 0; i < a->size(); ++i) {
      const json::value& v = (*a)[i];
      if (texts && v.is_string()) {
        out.push_back(encode(v.get_string()));
      } else if (!texts && v.is_array()) {
        out.push_back(ids(v.get_array(), "[" + std::to_string(i) + "]"));
      } else {
        break;
      }
    }
    if (out.size() == a->size()) {
      return out;
    }
  }
  throw lm_request_error(400,
                         "'prompt' must be a string, a list of token ids, or a list of strings "
                         "or of lists of token ids",
                         "prompt");
}

// The chat's messages, rendered with the model's template and tokenized as `transformers`'
// apply_chat_template does (no special tokens added: the template writes them).
std::vector<std::int32_t>
chat_prompt(const json::value* m, const lm::model& model, std::int64_t context) {
  if (m == nullptr || !m->is_array() || m->get_array().empty()) {
    throw lm_request_error(400, "'messages' must be a non-empty list", "messages");
  }
  std::vector<lm::chat_message> messages;
  std::size_t bytes = 0;
  for (const auto& v : m->get_array()) {
    const json::object* o = v.if_object();
    const json::value* role = o != nullptr ? o->if_contains("role") : nullptr;
    if (role == nullptr || !role->is_string()) {
      throw lm_request_error(400, "each message must be an object with a string 'role'",
                             "messages");
    }
    lm::chat_message msg{std::string(role->get_string()), {}};
    const json::value* content = o->if_contains("content");
    if (content != nullptr && content->is_string()) {
      msg.content = content->get_string();
    } else if (content != nullptr && content->is_array()) {
      // Content parts: the text ones, joined.
      for (const auto& part : content->get_array()) {
        const json::object* po = part.if_object();
        const json::value* type = po != nullptr ? po->if_contains("type") : nullptr;
        const json::value* text = po != nullptr ? po->if_contains("text") : nullptr;
        if (type == nullptr || *type != "text" || text == nullptr || !text->is_string()) {
          throw lm_request_error(400, "only text content parts are supported", "messages");
        }
        msg.content += text->get_string();
      }
    } else if (content != nullptr && !content->is_null()) {
      throw lm_request_error(400, "a message's 'content' must be a string or a list of parts",
                             "messages");
    }
    bytes += msg.content.size();
    messages.push_back(std::move(msg));
  }
  check_prompt_bytes(bytes, context, "messages");
  std::string text;
  try {
    text = model.render_chat(messages, true);
  } catch (const std::logic_error&) {
    throw lm_request_error(400, "this model has no chat template; use /v1/completions", "messages");
  } catch (const std::runtime_error& e) {
    throw lm_request_error(400, std::string("the chat template refused the messages: ") + e.what(),
                           "messages");
  }
  return model.tokenizer().encode(text, false);
}

// What a request may ask that is not served: refused with 400 naming the field, never ignored
// (an answer computed without it would be silently wrong).
void refuse_unsupported(const json::object& o) {
  const auto given = [&](std::string_view name) {
    const json::value* v = o.if_contains(name);
    return v != nullptr && !v->is_null();
  };
  const auto refuse = [](std::string_view name, std::string_view what) {
    throw lm_request_error(400, "'" + std::string(name) + "' " + std::string(what),
                           std::string(name));
  };
  if (given("best_of") && o.at("best_of") != 1) {
    refuse("best_of", "is not supported (only 1)");
  }
  for (const std::string_view name : {"tools", "functions"}) {
    if (given(name) && !(o.at(name).is_array() && o.at(name).get_array().empty())) {
      refuse(name, "(tool calling) is not supported");
    }
  }
  if (given("response_format")) {
    const json::value& f = o.at("response_format");
    const json::value* type = f.is_object() ? f.get_object().if_contains("type") : nullptr;
    if (type == nullptr || *type != "text") {
      refuse("response_format", "is not supported (only {\"type\": \"text\"})");
    }
  }
}

streaming read_streaming(const json::object& o) {
  streaming out;
  if (const json::value* v = o.if_contains("stream"); v != nullptr && !v->is_null()) {
    if (!v->is_bool()) {
      throw lm_request_error(400, "'stream' must be true or false", "stream");
    }
    out.stream = v->get_bool();
  }
  if (const json::value* v = o.if_contains("stream_options"); v != nullptr && !v->is_null()) {
    const json::value* u = v->is_object() ? v->get_object().if_contains("include_usage") : nullptr;
    if (!v->is_object() || (u != nullptr && !u->is_bool())) {
      throw lm_request_error(400, "'stream_options' must be {\"include_usage\": bool}",
                             "stream_options");
    }
    out.include_usage = u != nullptr && u->get_bool();
    if (!out.stream) {
      throw lm_request_error(400, "'stream_options' is only allowed with \"stream\": true",
                             "stream_options");
    }
  }
  return out;
}

std::vector<generation_request>
prompt_requests(const served_lm& s,
                const generation_request& r,
                const std::vector<std::vector<std::int32_t>>& prompts) {
  std::vector<generation_request> out;
  out.reserve(prompts.size());
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    generation_request one = r;
    one.prompt = prompts[p];
    try {
      fit_context(s, one);
    } catch (const lm_request_error& e) {
      if (prompts.size() == 1) {
        throw;
      }
      throw lm_request_error(e.status, "prompt " + std::to_string(p) + ": " + e.what(), e.param);
    }
    out.push_back(std::move(one));
  }
  return out;
}

std::vector<std::string> completion_prompt_texts(const json::value* p,
                                                 const std::vector<std::vector<std::int32_t>>& ids,
                                                 const lm::tokenizer& t) {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    // The prompt as written: a string alone, or the batch's i-th string.
    const json::value* written = p;
    if (p != nullptr && p->is_array() && i < p->get_array().size()) {
      written = &p->get_array()[i];
    }
    out.push_back(written != nullptr && written->is_string() ? std::string(written->get_string())
                                                             : t.decode(ids[i]));
  }
  return out;
}

}  // namespace cotensor::serving::detail
