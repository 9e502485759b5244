"""Prints the markdown summary of a language-model benchmark run (bench/lm/run.sh's JSON lines).

Each figure is the median over the run's rounds. Tables:
- per model and dtype, decode and prefill tok/s of cotensor (one sequence), transformers and
  CTranslate2, with cotensor's ratio to each;
- cotensor's aggregate tok/s at each concurrency (all tokens over the wall time, and over the
  decode phase once every prompt is read) and the ratio of 16 sequences to 1;
- cotensor's prefix cache: a prompt's time to first token, then the same prompt's again;
- per model and peer, the bfloat16/float32 decode ratio, and the decode bandwidth: the weights'
  bytes in the dtype (each tensor of model.safetensors once, so a tied head counts once) times
  decode tok/s, in GB/s and as a share of the STREAM-like triad GB/s that cotensor_bench_lm
  --triad measured on the same machine.
A figure the run lacks (a peer skipped, no cotensor binary) shows as "-".

Usage: python3 bench/lm/summary.py RESULTS.jsonl MODELS_DIR
  (MODELS_DIR: where bench/lm/make_models.sh made the models, for their model.safetensors)
"""
import json
import pathlib
import statistics
import struct
import sys
from collections import defaultdict

IMPLS = ("cotensor", "transformers", "ctranslate2")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
CONCURRENCIES = (1, 4, 16, 64)


def weight_count(path):
    """The number of weights in a safetensors file, from its header."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    total = 0
    for name, tensor in header.items():
        if name != "__metadata__":
            count = 1
            for dim in tensor["shape"]:
                count *= dim
            total += count
    return total


def fmt(x, digits=1):
    return "-" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("Usage: ")[1])
    results, models_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    samples = defaultdict(list)  # (impl, model, dtype, concurrency, field) -> values
    triads = []
    shape = set()
    for line in results.read_text().splitlines():
        r = json.loads(line)
        if "triad_gb_s" in r:
            triads.append(r["triad_gb_s"])
            continue
        if "new" in r:
            shape.add((r["prompt"], r["new"]))
        key = (r["impl"], r["model"], r["dtype"], r.get("concurrency", 1))
        for field in ("decode_tok_s", "prefill_tok_s", "aggregate_tok_s",
                      "decode_aggregate_tok_s", "prefix_ttft_cold_ms", "prefix_ttft_warm_ms"):
            if r.get(field) is not None:
                samples[key + (field,)].append(r[field])
    pairs = sorted({(k[1], k[2]) for k in samples}, key=lambda p: (p[0], p[1] != "float32"))

    def get(impl, model, dtype, field, concurrency=1):
        values = samples.get((impl, model, dtype, concurrency, field))
        return statistics.median(values) if values else None

    triad = statistics.median(triads) if triads else None
    print(f"Prompt/new ids: {', '.join(f'{p}/{n}' for p, n in sorted(shape))}; "
          f"triad: {fmt(triad)} GB/s; medians over rounds.\n")

    for field, title in (("decode_tok_s", "Decode tok/s"), ("prefill_tok_s", "Prefill tok/s")):
        rows = []
        for model, dtype in pairs:
            v = [get(impl, model, dtype, field) for impl in IMPLS]
            rows.append([model, dtype, *map(fmt, v),
                         fmt(ratio(v[0], v[1]), 2), fmt(ratio(v[0], v[2]), 2)])
        print(f"{title}, one sequence:\n")
        print(table(["model", "dtype", *IMPLS, "cotensor/transformers", "cotensor/ctranslate2"],
                    rows) + "\n")

    for field, title in (("aggregate_tok_s", "all tokens / wall time, prompts included"),
                         ("decode_aggregate_tok_s", "tokens / time once every prompt is read")):
        rows = []
        for model, dtype in pairs:
            v = [get("cotensor", model, dtype, field, c) for c in CONCURRENCIES]
            if all(x is None for x in v):
                continue
            rows.append([model, dtype, *map(fmt, v), fmt(ratio(v[2], v[0]), 2)])
        if rows:
            print(f"cotensor aggregate tok/s by concurrency ({title}):\n")
            print(table(["model", "dtype", *map(str, CONCURRENCIES), "16/1"], rows) + "\n")

    rows = []
    for model, dtype in pairs:
        cold = get("cotensor", model, dtype, "prefix_ttft_cold_ms")
        warm = get("cotensor", model, dtype, "prefix_ttft_warm_ms")
        rows.append([model, dtype, fmt(cold, 2), fmt(warm, 2), fmt(ratio(cold, warm), 2)])
    print("cotensor prefix cache, time to first token (ms) of a prompt and of the same again:\n")
    print(table(["model", "dtype", "cold", "warm", "cold/warm"], rows) + "\n")

    rows = []
    for model in sorted({m for m, _ in pairs}):
        weights = weight_count(models_dir / model / "model.safetensors")
        for impl in IMPLS:
            f32 = get(impl, model, "float32", "decode_tok_s")
            bf16 = get(impl, model, "bfloat16", "decode_tok_s")
            row = [f"{model} ({weights / 1e6:.0f} M weights)", impl, fmt(ratio(bf16, f32), 2)]
            for dtype, tok_s in (("float32", f32), ("bfloat16", bf16)):
                gb_s = None if tok_s is None else weights * DTYPE_BYTES[dtype] * tok_s / 1e9
                share = ratio(gb_s, triad)
                row += [fmt(gb_s), "-" if share is None else f"{share:.0%}"]
            rows.append(row)
    print("Decode: bfloat16/float32, and weight bytes x decode tok/s against the triad:\n")
    print(table(["model", "impl", "bf16/f32", "f32 GB/s", "f32 % triad", "bf16 GB/s",
                 "bf16 % triad"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
