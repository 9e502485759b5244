#!/usr/bin/env python3
"""The table of a bench/server/lm_compare.sh run: per model and dtype and concurrency, output
tokens/s of cotensor and vLLM and their ratio, TTFT and ITL, the prefix-cache check, and the
targets (at 16 streams: cotensor's tokens/s >= 1.5x vLLM's and >= 5x its own at 1 stream;
cotensor's ITL p99 at 16 streams <= 3x its 1-stream ITL p50; prefix-cache TTFT ratio <= 0.3,
by ids to /v1/completions and by a chat system prompt).
With several rounds each figure is the median over the rounds.

    python3 bench/server/lm_summary.py bench/results/<date>-...-lm-serving.jsonl [--run ID]

--run picks the run (lm_compare.sh prints its id); default: the file's last run. --all: all.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

ENGINES = ("cotensor", "vllm")


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def verdict(ok):
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--run")
    p.add_argument("--all", action="store_true")
    a = p.parse_args()
    lines = [json.loads(x) for x in open(a.file) if x.strip()]
    if not lines:
        sys.exit(f"{a.file}: empty")
    run = a.run or lines[-1].get("run")
    if not a.all:
        lines = [x for x in lines if x.get("run") == run]
    loads = defaultdict(list)  # (model, dtype, engine, concurrency) -> lines
    prefix = defaultdict(list)  # (model, dtype, engine) -> lines
    contexts = defaultdict(set)  # (model, dtype) -> the contexts served (lines since 2026-12-03)
    keys = []
    for x in lines:
        k = (x["model"], x["dtype"])
        if k not in keys:
            keys.append(k)
        if "context" in x:
            contexts[k].add(x["context"])
        if x.get("check") in ("prefix_cache", "prefix_cache_chat"):
            prefix[k + (x["engine"], x["check"])].append(x)
        else:
            loads[k + (x["engine"], x["concurrency"])].append(x)
    first = lines[0] if lines else {}
    print(f"run {run if not a.all else 'all'}: {first.get('cpu', '?')}, {first.get('cores', '?')} "
          f"cores, cotensor {first.get('versions', {}).get('cotensor', '?')}, vLLM "
          f"{first.get('versions', {}).get('vllm', '?')}"
          f"{' (quick)' if first.get('quick') else ''}")
    for model, dtype in keys:
        def m(engine, c, field):
            return med([x.get(field) for x in loads.get((model, dtype, engine, c), [])])

        cs = sorted({k[3] for k in loads if k[:2] == (model, dtype)})
        rounds = max((len(v) for k, v in loads.items() if k[:2] == (model, dtype)), default=0)
        ctx = sorted(contexts[(model, dtype)])
        served = f"context {'/'.join(map(str, ctx))}; " if ctx else ""
        print(f"\n{model} {dtype} ({served}{rounds} round(s); tokens/s all streams; ms)")
        print(f"{'streams':>7} {'cot tok/s':>10} {'vLLM tok/s':>10} {'cot/vLLM':>8} "
              f"{'TTFT50 cot':>10} {'vLLM':>7} {'ITL50 cot':>9} {'vLLM':>6} "
              f"{'ITL99 cot':>9} {'vLLM':>6} {'e2e50 cot':>9} {'vLLM':>7} {'errors':>6}")
        for c in cs:
            ct, vt = m("cotensor", c, "output_tokens_per_s"), m("vllm", c, "output_tokens_per_s")
            errors = sum(x.get("errors", 0) for e in ENGINES
                         for x in loads.get((model, dtype, e, c), []))
            print(f"{c:>7} {fmt(ct):>10} {fmt(vt):>10} "
                  f"{fmt(ct / vt if ct and vt else None, 2):>8} "
                  f"{fmt(m('cotensor', c, 'ttft_ms_p50')):>10} "
                  f"{fmt(m('vllm', c, 'ttft_ms_p50')):>7} "
                  f"{fmt(m('cotensor', c, 'itl_ms_p50')):>9} {fmt(m('vllm', c, 'itl_ms_p50')):>6} "
                  f"{fmt(m('cotensor', c, 'itl_ms_p99')):>9} {fmt(m('vllm', c, 'itl_ms_p99')):>6} "
                  f"{fmt(m('cotensor', c, 'e2e_ms_p50'), 0):>9} "
                  f"{fmt(m('vllm', c, 'e2e_ms_p50'), 0):>7} {errors:>6}")
        for e in ENGINES:
            tpc = [x.get("tokens_per_chunk") for k, v in loads.items()
                   if k[:3] == (model, dtype, e) for x in v]
            worst = max((t for t in tpc if t), default=None)
            if worst and worst > 1.05:
                print(f"warning: {e} sent {worst:.2f} tokens per chunk: its TTFT and ITL are "
                      "those of the tokens with text (lm_compare.sh pads the tokenizer by "
                      "default)")
        ratios = {}
        for check, what in (("prefix_cache", "-id completions prefix"),
                            ("prefix_cache_chat", "-token chat system prompt")):
            for e in ENGINES:
                px = prefix.get((model, dtype, e, check))
                if px:
                    ratios[e, check] = med([x.get("ratio") for x in px])
                    print(f"prefix cache {e:>8}: {px[0]['prefix_tokens']}{what}, TTFT first "
                          f"{fmt(med([x['ttft_first_ms'] for x in px]))} ms, second "
                          f"{fmt(med([x['ttft_second_ms'] for x in px]))} ms, "
                          f"ratio {fmt(ratios[e, check], 3)}")
        c16, v16 = m("cotensor", 16, "output_tokens_per_s"), m("vllm", 16, "output_tokens_per_s")
        c1 = m("cotensor", 1, "output_tokens_per_s")
        itl99_16, itl50_1 = m("cotensor", 16, "itl_ms_p99"), m("cotensor", 1, "itl_ms_p50")
        print("targets (cotensor):")
        r = c16 / v16 if c16 and v16 else None
        print(f"  16 streams tokens/s >= 1.5x vLLM's:            {fmt(r, 2) + 'x' if r else '-'}  "
              f"{verdict(None if r is None else r >= 1.5)}")
        r = c16 / c1 if c16 and c1 else None
        print(f"  16 streams tokens/s >= 5x its 1 stream:        {fmt(r, 2) + 'x' if r else '-'}  "
              f"{verdict(None if r is None else r >= 5)}")
        r = itl99_16 / itl50_1 if itl99_16 and itl50_1 else None
        print(f"  ITL p99 at 16 streams <= 3x 1-stream ITL p50:  {fmt(r, 2) + 'x' if r else '-'}  "
              f"({fmt(itl99_16)} vs {fmt(itl50_1)} ms)  {verdict(None if r is None else r <= 3)}")
        for check, what in (("prefix_cache", "ids"), ("prefix_cache_chat", "chat")):
            r = ratios.get(("cotensor", check))
            if r is not None or check == "prefix_cache":
                print(f"  prefix-cache TTFT second/first <= 0.3 ({what}): {fmt(r, 3)}   "
                      f"{verdict(None if r is None else r <= 0.3)}")


if __name__ == "__main__":
    main()
