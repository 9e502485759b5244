"""Times the peers of cotensor::lm on one model: Hugging Face transformers and CTranslate2.

For a model folder of bench/lm/make_models.py, a dtype, a prompt of P random ids (drawn with
seed 0 from the tokenizer's ids) and N new ids, each peer generates greedily on the CPU with 2
threads, one sequence at a time, with a key/value cache, never stopping at an end-of-sequence
id: after one warm-up generation, R timed ones, each giving
- ttft: the time to the first new id (the forward over the prompt and its greedy pick),
- prefill tok/s = P / ttft, decode tok/s = (N - 1) / (total time - ttft),
and the median of each over the R. Prints one JSON line per peer:
  {"impl": "transformers"|"ctranslate2", "model": ..., "dtype": ..., "prompt": P, "new": N,
   "prefill_tok_s": ..., "decode_tok_s": ..., "ttft_ms": ...}
Messages (a peer skipped and why, a conversion) go to stderr.

- transformers: `generate` with the loaded model's generation config's eos_token_id set to None:
  no stopping criterion on end-of-sequence and no logits processor (min_new_tokens would add one
  that masks the end-of-sequence logit). A config of one's own passed to `generate` would not do:
  transformers 5 fills its None fields from the model's. The time to the first id is taken by a
  streamer.
- CTranslate2: the folder is converted once with its TransformersConverter into
  $COTENSOR_CACHE/lm-bench/ct2/, the vocabulary padded to the model's (CTranslate2 wants one
  token per row of the embedding; the models' tokenizer has fewer); `generate_tokens` with
  end_token set to the vocabulary's size, an id the model cannot produce, and min_length 0
  (min_length masks the end tokens' logits). CTranslate2 has no bfloat16 compute on a CPU
  (4.8.5: float32, int8, int8_float32): for bfloat16 it is skipped, with the reason.

Usage (the python3 of bench/lm/make_models.sh's environment):
  python3 bench/lm/peers.py MODEL_DIR [--dtype float32|bfloat16] [--prompt P] [--new N]
                            [--repeat R] [--impl transformers,ctranslate2]
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import sys
import time

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer

CACHE = pathlib.Path(os.environ.get("COTENSOR_CACHE") or pathlib.Path.home() / ".cache/cotensor")
THREADS = 2


def say(message):
    print(f"peers.py: {message}", file=sys.stderr, flush=True)


def figures(prompt, new, runs):
    """The medians of R (ttft, total) pairs in seconds, as the JSON line's figures."""
    return {"prefill_tok_s": round(statistics.median(prompt / t for t, _ in runs), 2),
            "decode_tok_s": round(statistics.median((new - 1) / (total - t) for t, total in runs),
                                  2),
            "ttft_ms": round(statistics.median(t for t, _ in runs) * 1e3, 2)}


class FirstToken(transformers.generation.BaseStreamer):
    """Notes when `generate` hands over its first new id (its first `put` is the prompt)."""

    def __init__(self):
        self.puts = 0
        self.at = None

    def put(self, value):
        self.puts += 1
        if self.puts == 2:
            self.at = time.perf_counter()

    def end(self):
        pass


def time_transformers(folder, dtype, ids, new, repeat):
    """R (ttft, total) pairs in seconds of transformers' greedy generation, after a warm-up."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=getattr(torch, dtype)).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    inputs = torch.tensor([ids])
    mask = torch.ones_like(inputs)
    runs = []
    with torch.inference_mode():
        for _ in range(repeat + 1):
            streamer = FirstToken()
            start = time.perf_counter()
            out = model.generate(inputs, attention_mask=mask, do_sample=False, num_beams=1,
                                 use_cache=True, max_new_tokens=new, streamer=streamer)
            total = time.perf_counter() - start
            if out.shape[1] != len(ids) + new:
                raise RuntimeError(f"transformers made {out.shape[1] - len(ids)} ids, not {new}")
            runs.append((streamer.at - start, total))
    return runs[1:]


class PaddedTokenizer:
    """A transformers tokenizer whose vocabulary is padded with <extra_id_i> to `size` ids."""

    def __init__(self, tokenizer, size):
        self._tokenizer = tokenizer
        self._size = size

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def get_vocab(self):
        vocab = dict(self._tokenizer.get_vocab())
        for i in range(len(vocab), self._size):
            vocab[f"<extra_id_{i}>"] = i
        return vocab


def ct2_model(folder, quantization):
    """The CTranslate2 conversion of `folder`, made once in the cache."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            size = transformers.AutoConfig.from_pretrained(model_name_or_path).vocab_size
            return PaddedTokenizer(tokenizer_class.from_pretrained(model_name_or_path, **kwargs),
                                   size)

    out = CACHE / "lm-bench" / "ct2" / f"{folder.name}-{quantization}-{ctranslate2.__version__}"
    made_by = out / "made_by.json"
    source = (folder / "made_by.json").read_text()
    if made_by.exists() and made_by.read_text() == source:
        return out
    start = time.monotonic()
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    Converter(str(folder), low_cpu_mem_usage=True).convert(str(partial),
                                                          quantization=quantization)
    (partial / "made_by.json").write_text(source)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    say(f"converted {folder.name} for CTranslate2 ({quantization}) into {out} in "
        f"{time.monotonic() - start:.0f} s")
    return out


def time_ctranslate2(folder, dtype, ids, new, repeat):
    """As time_transformers for CTranslate2; None, with the reason said, when it is missing or
    cannot compute in `dtype`."""
    try:
        import ctranslate2
    except ImportError as error:
        say(f"ctranslate2 skipped: it does not import ({error}); bash bench/lm/make_models.sh "
            "installs it")
        return None
    supported = ctranslate2.get_supported_compute_types("cpu")
    if dtype not in supported:
        say(f"ctranslate2 skipped for {folder.name} {dtype}: CTranslate2 "
            f"{ctranslate2.__version__} computes on this CPU only in {', '.join(sorted(supported))}")
        return None
    converted = ct2_model(folder, dtype)
    generator = ctranslate2.Generator(str(converted), device="cpu", compute_type=dtype,
                                      inter_threads=1, intra_threads=THREADS)
    vocabulary = json.loads((converted / "vocabulary.json").read_text())
    prompt = [vocabulary[i] for i in ids]
    never = len(vocabulary)
    runs = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        first = None
        made = 0
        for _step in generator.generate_tokens(prompt, max_length=new, min_length=0,
                                               end_token=[never]):
            made += 1
            if first is None:
                first = time.perf_counter()
        total = time.perf_counter() - start
        if made != new:
            raise RuntimeError(f"ctranslate2 made {made} ids, not {new}")
        runs.append((first - start, total))
    return runs[1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=pathlib.Path, help="a folder of make_models.py")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--prompt", type=int, default=128, help="prompt ids (P)")
    parser.add_argument("--new", type=int, default=64, help="new ids (N), at least 2")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (R)")
    parser.add_argument("--impl", default="transformers,ctranslate2",
                        help="comma-separated peers among transformers and ctranslate2")
    args = parser.parse_args()
    folder = args.model.resolve()
    if not (folder / "config.json").is_file() or not (folder / "tokenizer.json").is_file():
        parser.error(f"{folder} has no config.json and tokenizer.json: bash bench/lm/make_models.sh")
    if args.new < 2 or args.prompt < 1 or args.repeat < 1:
        parser.error("--new must be at least 2, --prompt and --repeat at least 1")
    impls = args.impl.split(",")
    for impl in impls:
        if impl not in ("transformers", "ctranslate2"):
            parser.error(f"unknown peer {impl!r}")
    torch.set_num_threads(THREADS)
    transformers.utils.logging.disable_progress_bar()
    vocab = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size()
    ids = np.random.default_rng(0).integers(0, vocab, size=args.prompt).tolist()
    timers = {"transformers": time_transformers, "ctranslate2": time_ctranslate2}
    for impl in impls:
        runs = timers[impl](folder, args.dtype, ids, args.new, args.repeat)
        if runs is None:
            continue
        print(json.dumps({"impl": impl, "model": folder.name, "dtype": args.dtype,
                          "prompt": args.prompt, "new": args.new,
                          **figures(args.prompt, args.new, runs)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
