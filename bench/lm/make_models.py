"""Makes the randomly initialised models of the language-model benchmark (bench/lm/run.sh).

In $COTENSOR_CACHE/lm-bench/ (default ~/.cache/cotensor/lm-bench/), two Hugging Face model
folders, as `save_pretrained` writes them (config.json, generation_config.json, float32
model.safetensors: transformers 5 writes safetensors only), with a tokenizer beside each
(tokenizer.json, tokenizer_config.json):
- gpt2-small/: GPT2LMHeadModel in GPT-2 small's shape: width 768, 12 layers of 12 heads,
               1,024 positions, 50,257 ids (124 M parameters, the head tied to the embedding);
- qwen2-0.5b/: Qwen2ForCausalLM in Qwen2.5-0.5B's shape: width 896, 24 layers of 14 query heads
               sharing 2 key/value heads, SwiGLU of 4,864, RoPE theta 1e6, 151,936 ids, a tied
               head, 2,048 positions (494 M parameters).
Weights are drawn by transformers' own initialisation with seed 0. The tokenizer is a byte-level
BPE of 8,000 ids (GPT-2's pre-tokenizer and decoder, <|endoftext|>) trained here on the
repository's Markdown (docs/**/*.md and README.md), nothing downloaded; the models' vocabularies
are larger than the tokenizer's, and their end-of-sequence id is <|endoftext|>'s.

A folder is kept when its made_by.json names this script's VERSION; otherwise it is made again
(in <name>.partial, renamed when complete). Prints one line per folder.

Usage: bash bench/lm/make_models.sh (the venv of tests/data/lm/make_models.sh: transformers,
and torch and safetensors from the project's environment).
"""
import json
import os
import pathlib
import shutil
import sys
import time

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer
from transformers import (GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM)

VERSION = 1
ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = pathlib.Path(os.environ.get("COTENSOR_CACHE") or pathlib.Path.home() / ".cache/cotensor",
                   "lm-bench")
EOS = "<|endoftext|>"


def train_tokenizer():
    """A GPT-2-like byte-level BPE of 8,000 ids trained on the repository's Markdown."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = BpeTrainer(vocab_size=8000, special_tokens=[EOS], show_progress=False,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    files = sorted(str(p) for p in (ROOT / "docs").rglob("*.md")) + [str(ROOT / "README.md")]
    tok.train(files, trainer)
    return tok


def gpt2(eos):
    return GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12,
                                      n_head=12, bos_token_id=eos, eos_token_id=eos))


def qwen2(eos):
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=2048,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        use_sliding_window=False, bos_token_id=eos, eos_token_id=eos))


def is_current(folder):
    try:
        return json.loads((folder / "made_by.json").read_text())["version"] == VERSION
    except (OSError, ValueError, KeyError):
        return False


def make(name, make_model, tok):
    out = OUT / name
    if is_current(out):
        print(f"{out}: kept (version {VERSION})")
        return
    start = time.monotonic()
    partial = OUT / f"{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    torch.manual_seed(0)
    model = make_model(tok.token_to_id(EOS)).eval()
    model.save_pretrained(partial)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS,
                            unk_token=EOS).save_pretrained(partial)
    params = sum(p.numel() for p in model.parameters())
    (partial / "made_by.json").write_text(json.dumps({
        "version": VERSION, "script": "bench/lm/make_models.py", "seed": 0, "parameters": params,
        "transformers": transformers.__version__, "torch": torch.__version__}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    print(f"{out}: made, {params / 1e6:.1f} M parameters, {time.monotonic() - start:.0f} s")


def main():
    transformers.utils.logging.disable_progress_bar()
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = {"gpt2-small": gpt2, "qwen2-0.5b": qwen2}
    if all(is_current(OUT / name) for name in wanted):
        for name in wanted:
            print(f"{OUT / name}: kept (version {VERSION})")
        return 0
    tok = train_tokenizer()
    for name, make_model in wanted.items():
        make(name, make_model, tok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
