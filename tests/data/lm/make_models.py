"""Makes the model fixtures of tests/lm_model_test.cpp with Hugging Face `transformers`.

gpt2-tiny/: a GPT2LMHeadModel, randomly initialised (seed 0), 2 layers, 4 heads, width 32, 64
positions, the vocabulary of tests/data/lm/gpt2/tokenizer.json (1,200 ids), saved as
`save_pretrained` saves it (config.json, model.safetensors, generation_config.json) with that
tokenizer.json beside it; and expected.safetensors: for a few texts, their ids (`ids_<i>`, int64)
and the float32 logits transformers computes for them (`logits_<i>`, [T, 1200]).

Usage: bash tests/data/lm/make_models.sh (a venv of its own with transformers; torch and
safetensors from the project's environment).
"""
import pathlib
import shutil
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import GPT2Config, GPT2LMHeadModel

HERE = pathlib.Path(__file__).resolve().parent
TEXTS = [
    "Hello, world!",
    "The engine orders ops by the buffers they read and write.",
    "a",
    "日本語 and emoji 👋🏽, 12345 tokens",
]


def main():
    tok = Tokenizer.from_file(str(HERE / "gpt2" / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2,
                        n_head=4, bos_token_id=eos, eos_token_id=eos)
    model = GPT2LMHeadModel(config).eval()
    out = HERE / "gpt2-tiny"
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out, safe_serialization=True)
    shutil.copy(HERE / "gpt2" / "tokenizer.json", out / "tokenizer.json")
    tensors = {}
    with torch.no_grad():
        for i, text in enumerate(TEXTS):
            ids = tok.encode(text).ids
            logits = model(torch.tensor([ids])).logits[0].float().contiguous()
            tensors[f"ids_{i}"] = torch.tensor(ids, dtype=torch.int64)
            tensors[f"logits_{i}"] = logits
    save_file(tensors, str(HERE / "gpt2-tiny-expected.safetensors"),
              metadata={"transformers": __import__("transformers").__version__,
                        "torch": torch.__version__})
    print(f"wrote {out} and the logits of {len(TEXTS)} texts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
