"""Makes the chat-template fixtures of tests/lm_chat_template_test.cpp with Hugging Face
`transformers` (its own jinja2 environment: trim_blocks, lstrip_blocks, its tojson,
raise_exception and strftime_now).

- chat_templates/*.jinja are the templates: chatml_qwen2.5.jinja (Qwen2.5-Instruct's
  tokenizer_config.json "chat_template"), llama3.jinja (Meta-Llama-3-8B-Instruct's),
  llama3.1.jinja (Llama-3.1-8B-Instruct's) and features.jinja (no model's: it walks through the
  Jinja subset cotensor renders).
- qwen2-tiny/tokenizer_config.json and llama-tiny/tokenizer_config.json: the ChatML and Llama 3
  templates with their special tokens (make_models.py writes the same files through
  write_tokenizer_configs).
- chat_templates/expected.json: for each template and conversation, what
  `render_jinja_template` renders ("renders": template file, messages, add_generation_prompt,
  bos_token and eos_token, null when not passed, and the text), and for the two tiny models the
  ids of `apply_chat_template(messages, add_generation_prompt=True, tokenize=True)` ("ids").

Usage: bash tests/data/lm/make_chat_templates.sh (a venv of its own with transformers).
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
TEMPLATES = HERE / "chat_templates"

# The special tokens each template is rendered with (None: not passed, so undefined).
SPECIALS = {
    "chatml_qwen2.5.jinja": (None, "<|im_end|>"),
    "llama3.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "features.jinja": ("<s>", "</s>"),
}
# The tiny models' tokenizer_config.json: their template and special tokens.
MODELS = {"qwen2-tiny": "chatml_qwen2.5.jinja", "llama-tiny": "llama3.jinja"}


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    [msg("system", "You are a terse assistant."), msg("user", "What is 2 + 2?")],
    [msg("user", "Hello!")],
    [msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello. How can I help?"),
     msg("user", "Tell me a joke.")],
    [msg("user", "  日本語のテキスト 👋🏽 café — «ok»\u3000\n"), msg("assistant", "\u00a0réponse ✓ "),
     msg("user", "ß\tΣίσυφος")],
    [msg("system", ""), msg("user", "")],
    [msg("user",
         "{{ messages }} {% if x %} {# c #} <|im_end|> \\ 'q' \"dq\" {%- raw -%}")],
    [msg("user", "Weather in Paris?"), msg("assistant", "Let me look."),
     msg("tool", "{\"temp\": 20}"), msg("tool", "sunny"), msg("user", "Thanks")],
    [msg("user", "a"), msg("system", "b"), msg("user", "  c  ")],
]
# The conversations whose ids are recorded for the tiny models.
ID_CONVERSATIONS = [0, 2, 3, 5]


def write_tokenizer_configs():
    """Writes tokenizer_config.json (template, bos_token, eos_token) into the tiny models."""
    for model, template in MODELS.items():
        bos, eos = SPECIALS[template]
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": bos,
            "eos_token": eos,
            "chat_template": (TEMPLATES / template).read_text(encoding="utf-8"),
        }
        with open(HERE / model / "tokenizer_config.json", "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
            f.write("\n")


def main():
    from transformers import AutoTokenizer
    from transformers.utils.chat_template_utils import render_jinja_template

    write_tokenizer_configs()
    renders = []
    for template, (bos, eos) in SPECIALS.items():
        source = (TEMPLATES / template).read_text(encoding="utf-8")
        specials = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
        for messages in CONVERSATIONS:
            for add_generation_prompt in (True, False):
                text = render_jinja_template(
                    conversations=[messages], chat_template=source,
                    add_generation_prompt=add_generation_prompt, **specials)[0][0]
                renders.append({"template": template, "messages": messages,
                                "add_generation_prompt": add_generation_prompt,
                                "bos_token": bos, "eos_token": eos, "text": text})
    ids = []
    for model in MODELS:
        tok = AutoTokenizer.from_pretrained(str(HERE / model))
        for i in ID_CONVERSATIONS:
            out = tok.apply_chat_template(CONVERSATIONS[i], add_generation_prompt=True,
                                          tokenize=True)
            out = out["input_ids"] if hasattr(out, "keys") else out
            ids.append({"model": model, "messages": CONVERSATIONS[i], "ids": list(out)})
    with open(TEMPLATES / "expected.json", "w", encoding="utf-8") as f:
        json.dump({"transformers": __import__("transformers").__version__,
                   "jinja2": __import__("jinja2").__version__, "renders": renders, "ids": ids},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(renders)} renderings and {len(ids)} id lists to {TEMPLATES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
