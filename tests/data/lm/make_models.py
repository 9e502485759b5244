"""Makes the model fixtures of tests/lm_model_test.cpp with Hugging Face `transformers`.

Three tiny models, randomly initialised (seed 0), saved as `save_pretrained` saves them
(config.json, model.safetensors, generation_config.json) with a tokenizer.json of
tests/data/lm/ beside each, 1,200 ids, and for llama-tiny and qwen2-tiny the tokenizer_config.json
(chat template, special tokens) of make_chat_templates.py:
- gpt2-tiny/:  GPT2LMHeadModel, 2 layers, 4 heads, width 32, 64 positions (the gpt2 tokenizer);
- llama-tiny/: LlamaForCausalLM, 2 layers, 4 query heads sharing 2 key/value heads, width 32,
               SwiGLU of 64, RoPE (theta 10000), RMSNorm, an untied head (the llama3 tokenizer);
- qwen2-tiny/: Qwen2ForCausalLM, the same with biases on q, k and v, RoPE theta 1e6 and a tied
               head (the qwen2 tokenizer).
And <name>-expected.safetensors: for a few texts, their ids (`ids_<i>`, int64), the float32
logits transformers computes for them (`logits_<i>`, [T, 1200]) and the 32 ids a greedy
generation adds to them (`greedy_<i>`, int64: each the first largest logit of the whole sequence
so far, end-of-sequence ids included, as with `ignore_eos`; for these texts the same ids as
`generate(do_sample=False, max_new_tokens=32)` gives, checked 2026-12-02 with transformers 5.24.0:
none reaches an end-of-sequence id).

Usage: bash tests/data/lm/make_models.sh (a venv of its own with transformers; torch and
safetensors from the project's environment).
"""
import pathlib
import shutil
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

HERE = pathlib.Path(__file__).resolve().parent
TEXTS = [
    "Hello, world!",
    "The engine orders ops by the buffers they read and write.",
    "a",
    "日本語 and emoji 👋🏽, 12345 tokens",
]


def save(name, tokenizer_name, make_model):
    tok = Tokenizer.from_file(str(HERE / tokenizer_name / "tokenizer.json"))
    torch.manual_seed(0)
    model = make_model(tok).eval()
    out = HERE / name
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(HERE / tokenizer_name / "tokenizer.json", out / "tokenizer.json")
    tensors = {}
    with torch.no_grad():
        for i, text in enumerate(TEXTS):
            ids = tok.encode(text).ids
            logits = model(torch.tensor([ids])).logits[0].float().contiguous()
            tensors[f"ids_{i}"] = torch.tensor(ids, dtype=torch.int64)
            tensors[f"logits_{i}"] = logits
            sequence = list(ids)
            for _ in range(32):
                sequence.append(int(model(torch.tensor([sequence])).logits[0, -1].argmax()))
            tensors[f"greedy_{i}"] = torch.tensor(sequence[len(ids):], dtype=torch.int64)
    save_file(tensors, str(HERE / f"{name}-expected.safetensors"),
              metadata={"transformers": __import__("transformers").__version__,
                        "torch": torch.__version__})
    print(f"wrote {out} and the logits of {len(TEXTS)} texts")


def gpt2(tok):
    eos = tok.token_to_id("<|endoftext|>")
    return GPT2LMHeadModel(GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=32,
                                      n_layer=2, n_head=4, bos_token_id=eos, eos_token_id=eos))


def llama(tok):
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=tok.token_to_id("<|begin_of_text|>"),
        eos_token_id=tok.token_to_id("<|end_of_text|>")))


def qwen2(tok):
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=True, use_sliding_window=False,
        bos_token_id=tok.token_to_id("<|endoftext|>"),
        eos_token_id=tok.token_to_id("<|im_end|>")))


def main():
    save("gpt2-tiny", "gpt2", gpt2)
    save("llama-tiny", "llama3", llama)
    save("qwen2-tiny", "qwen2", qwen2)
    # Their chat templates and special tokens, as make_chat_templates.py writes them.
    from make_chat_templates import write_tokenizer_configs
    write_tokenizer_configs()
    return 0


if __name__ == "__main__":
    sys.exit(main())
