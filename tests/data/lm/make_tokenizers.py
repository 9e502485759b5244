"""Makes the tokenizer fixtures of tests/lm_tokenizer_test.cpp with Hugging Face `tokenizers`.

Three byte-level BPE tokenizers, trained on the repository's own Markdown (nothing downloaded),
laid out as the models' tokenizer.json files are:
- gpt2:   the ByteLevel pre-tokenizer with GPT-2's split regex, <|endoftext|>, no post-processing;
- llama3: a Split pre-tokenizer with Llama 3's regex (digits in runs of 1-3, case-insensitive
          contractions), ByteLevel without its regex, merges ignored for words in the vocabulary,
          <|begin_of_text|> prepended by a TemplateProcessing post-processor;
- qwen2:  Qwen2's regex (single digits), an NFC normalizer, <|endoftext|>, <|im_start|>, <|im_end|>.
And expected.json: for each tokenizer and each text of a corpus of hard cases (ASCII,
contractions, digits, whitespace runs, CJK, emoji with modifiers and joiners, combining marks,
special tokens inside text), the ids `encode` gives (special tokens added as by default) and the
text `decode` gives back with special tokens skipped.

Usage: bash tests/data/lm/make_tokenizers.sh (a venv of its own with tokenizers==0.23.3).
"""
import json
import pathlib
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "Hello, world! This is cotensor's tokenizer.",
    "I'm sure they'll say we've done it; THEY'RE RIGHT, it's DONE. don't",
    "12345 3.14159 2026-11-27 1000000 x2 v0.1",
    "a  b\t\tc\n\n\nd   \n  end  ",
    "   leading and trailing spaces   ",
    "日本語のテキストと中文的句子。한국어 문장.",
    "emoji: 👋🏽 👨‍👩‍👧 ❤️ 🇫🇷!",
    "combining: e\u0301 n\u0303 a\u030a, precomposed: é ñ å",
    "hello<|endoftext|>world <|endoftext|> again",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|>already has a BOS",
    "Mixed: naïve café Ελληνικά русский العربية עברית हिन्दी",
    "code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\r\nreturn sum;",
    "",
    " ",
    "\n",
    "ALLCAPS lowercase MiXeD 'quoted' \"double\" `tick`",
    "tabs\tand\u00a0non-breaking\u2003em-space\u3000ideographic",
    "zero\u200bwidth and soft\u00adhyphen",
    "vertical\x0btab, next\x85line and\u2028line separator  \x0b ",
    "math: x² + y³ = z½, Ⅻ, ٣٤٥ and ①②",
]


def train(pre, specials, vocab_size=1200, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    files = sorted(str(p) for p in ROOT.glob("docs/*.md")) + [str(ROOT / "README.md")]
    tok.train(files, trainer)
    return tok


def main():
    made = {}
    gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"])
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    made["gpt2"] = gpt2

    llama3 = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], ignore_merges=True)
    bos = llama3.token_to_id("<|begin_of_text|>")
    llama3.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    made["llama3"] = llama3

    qwen2 = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], normalizer=normalizers.NFC())
    qwen2.post_processor = processors.ByteLevel(trim_offsets=False)
    made["qwen2"] = qwen2

    expected = {"tokenizers": __import__("tokenizers").__version__, "cases": []}
    for name, tok in made.items():
        (HERE / name).mkdir(exist_ok=True)
        tok.save(str(HERE / name / "tokenizer.json"))
        for text in CORPUS:
            ids = tok.encode(text).ids
            expected["cases"].append({"tokenizer": name, "text": text, "ids": ids,
                                      "decoded": tok.decode(ids, skip_special_tokens=True)})
        expected.setdefault("vocab_size", {})[name] = tok.get_vocab_size(with_added_tokens=True)
    lines = ",\n".join(" " + json.dumps(c, ensure_ascii=False) for c in expected["cases"])
    (HERE / "expected.json").write_text(
        "{\"tokenizers\": " + json.dumps(expected["tokenizers"]) + ",\n\"vocab_size\": " +
        json.dumps(expected["vocab_size"]) + ",\n\"cases\": [\n" + lines + "\n]}\n")
    print(f"wrote {len(made)} tokenizers and {len(expected['cases'])} cases to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
