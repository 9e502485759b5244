#!/usr/bin/env python3
"""Streaming load generator for OpenAI-compatible language-model servers (cotensor_server's
/v1/completions, vLLM's, anyone's): N concurrent streams, each a closed loop of a fixed number
of requests, every request `POST /v1/completions` with a prompt of P token ids, `max_tokens` M,
`ignore_eos: true`, `stream: true` and `stream_options.include_usage`.

    python3 bench/server/lm_load.py --url http://127.0.0.1:8000 --model gpt2-small \
        --concurrency 1,4,16,64 --prompt-tokens 128 --max-tokens 64 --requests-per-stream 4

Standard library only (asyncio and raw HTTP/1.1 sockets: chunked, Content-Length or
read-to-close bodies; one keep-alive connection per stream), so any python3 runs it.

Prints one JSON line per concurrency on stdout (progress on stderr):
  concurrency, requests, errors, output_tokens (the sum of usage.completion_tokens; the number
  of token chunks where a server sends no usage), duration_s (first request sent to last
  response done), output_tokens_per_s (all streams), requests_per_s, ttft_ms_p50/p99 (request
  sent to the first token's chunk), itl_ms_p50/p99/mean (the gaps between a
  stream's successive token chunks, all requests pooled; a chunk carrying several tokens, e.g.
  held back for a partial UTF-8 character, counts as one gap), e2e_ms_p50/p99,
  tpot_ms_p50 ((e2e - ttft) / (tokens - 1) per request), chunks, tokens_per_chunk,
  client_cpu_s (this process's CPU time: it shares the machine with the server), plus the
  parameters and --label's fields.
A token is counted per SSE chunk with a choice that has text or no finish_reason yet (vLLM and
cotensor send one per token; cotensor's last chunk, "" with the finish_reason, is not one);
usage.completion_tokens, when the last chunk has it, is used for the totals.

Prompts: token ids drawn from [--min-id, --max-id) by a generator seeded with the concurrency,
the stream and the request (--prompt-seed), so every request of a run has its own prompt (no
prefix cache helps) and two servers are given the same prompts.

--prefix-tokens K switches to the prefix-cache check instead: for each of --prefix-trials
prefixes of K ids, a request with prefix + 16 ids of its own, then one with the same prefix + 16
other ids, both max_tokens 1, one at a time after a warm-up of the same length; prints one JSON
line with ttft_first_ms, ttft_second_ms (medians) and ratio = second / first (target <= 0.3).
With --prefix-chat the same check goes through /v1/chat/completions: a system prompt of words
that the server's chat template and tokenizer make about K prompt tokens (the word count
fitted from two requests' usage.prompt_tokens), then two user messages of 16 words each after
the same system prompt (prompt_tokens_all: what the server counted).

--label 'engine=cotensor,dtype=float32' (or a JSON object) adds its fields to every line.
Exit status: 0, or 1 when a request failed (its error goes to stderr).
"""
import argparse
import asyncio
import json
import random
import sys
import time
import urllib.parse


# ---------------------------------------------------------------- HTTP/1.1 over asyncio
class HttpError(Exception):
    pass


class Connection:
    """One keep-alive HTTP/1.1 connection, opened again when the server closed it."""

    def __init__(self, host, port, timeout):
        self.host, self.port, self.timeout = host, port, timeout
        self.reader = self.writer = None

    async def close(self):
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None

    async def _open(self):
        # asyncio sets TCP_NODELAY on its TCP transports.
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port,
                                                                 limit=1 << 22)

    async def post_stream(self, path, body):
        """Sends the POST; yields (arrival time, bytes) for each piece of the body."""
        payload = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode()
        for attempt in (0, 1):
            reused = self.writer is not None
            if not reused:
                await self._open()
            try:
                self.writer.write(head + payload)
                await self.writer.drain()
                status_line = await self.reader.readline()
                if not status_line:
                    raise ConnectionResetError("closed before the status line")
                break
            except (ConnectionError, OSError):
                await self.close()
                if reused and attempt == 0:
                    continue  # the server had closed the idle connection: once more
                raise
        parts = status_line.decode("latin-1").split(" ", 2)
        status = int(parts[1])
        headers = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        keep = headers.get("connection", "").lower() != "close"
        r = self.reader
        if headers.get("transfer-encoding", "").lower() == "chunked":
            async def body_iter():
                while True:
                    size_line = await r.readline()
                    if not size_line:
                        raise ConnectionResetError("closed inside a chunked body")
                    size = int(size_line.split(b";")[0].strip(), 16)
                    if size == 0:
                        while (await r.readline()) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return
                    data = await r.readexactly(size)
                    await r.readexactly(2)
                    yield time.perf_counter(), data
        elif "content-length" in headers:
            n = int(headers["content-length"])

            async def body_iter():
                left = n
                while left > 0:
                    data = await r.read(min(left, 1 << 16))
                    if not data:
                        raise ConnectionResetError("closed inside the body")
                    left -= len(data)
                    yield time.perf_counter(), data
        else:
            keep = False

            async def body_iter():
                while True:
                    data = await r.read(1 << 16)
                    if not data:
                        return
                    yield time.perf_counter(), data
        return status, headers, body_iter(), keep


def sse_events(buffer, data):
    """Appends data to buffer (a dict with 'b' bytes and 'data' lines); returns whole events."""
    buffer["b"] += data
    events = []
    while True:
        i = buffer["b"].find(b"\n")
        if i < 0:
            return events
        line = buffer["b"][:i].rstrip(b"\r")
        buffer["b"] = buffer["b"][i + 1:]
        if not line:
            if buffer["data"]:
                events.append(b"\n".join(buffer["data"]))
                buffer["data"] = []
        elif line.startswith(b"data:"):
            v = line[5:]
            buffer["data"].append(v[1:] if v.startswith(b" ") else v)


# ---------------------------------------------------------------- one request
def token_chunk(c):
    """Whether a streamed choice carries a token: text (a completion's `text`, a chat's
    `delta.content`), or no finish_reason yet (a token whose text is held back). Not one: a
    chat's opening delta with the role alone, and a last chunk with "" and the finish_reason
    alone (cotensor sends one; vLLM puts the finish_reason on the last token's chunk)."""
    if "delta" in c:
        d = c["delta"] or {}
        return bool(d.get("content")) or (c.get("finish_reason") is None and "role" not in d)
    return bool(c.get("text")) or c.get("finish_reason") is None


async def completion(conn, path, body):
    """One streamed completion. Returns a dict: ok, error, t_sent, token chunk times, usage."""
    out = {"ok": False, "error": None, "chunk_times": [], "usage_tokens": None,
           "prompt_tokens": None, "finish_reason": None}
    out["t_sent"] = time.perf_counter()
    try:
        # One timeout for the whole request (not one task per chunk: the client shares the
        # CPUs with the server it measures).
        await asyncio.wait_for(_completion(conn, path, body, out), conn.timeout)
    except (asyncio.TimeoutError, ConnectionError, OSError, HttpError, ValueError,
            asyncio.IncompleteReadError) as e:
        await conn.close()
        out["error"] = f"{type(e).__name__}: {e}"
    out["t_done"] = time.perf_counter()
    return out


async def _completion(conn, path, body, out):
    """The body of completion(): fills `out`."""
    status, headers, body_it, keep = await conn.post_stream(path, body)
    if status != 200:
        text = b"".join([d async for _, d in body_it])[:500]
        await conn.close()
        out["error"] = f"HTTP {status}: {text.decode(errors='replace')}"
        return
    buf = {"b": b"", "data": []}
    done = False
    async for t, data in body_it:
        for ev in sse_events(buf, data):
            if ev.strip() == b"[DONE]":
                done = True
                continue
            msg = json.loads(ev)
            if "error" in msg:
                raise HttpError(f"error event: {msg['error']}")
            choices = msg.get("choices") or []
            if any(token_chunk(c) for c in choices):
                out["chunk_times"].append(t)
            for c in choices:
                if c.get("finish_reason"):
                    out["finish_reason"] = c["finish_reason"]
            if msg.get("usage"):
                out["usage_tokens"] = msg["usage"].get("completion_tokens")
                out["prompt_tokens"] = msg["usage"].get("prompt_tokens")
    if not keep:
        await conn.close()
    if not done:
        raise HttpError("the stream ended without data: [DONE]")
    out["ok"] = True


# ---------------------------------------------------------------- statistics
def pct(values, p):
    """The p-th percentile, linear between closest ranks (numpy's default)."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def ms(x):
    return None if x is None else round(x * 1000.0, 3)


def prompt_ids(args, *seed):
    rng = random.Random(repr((args.prompt_seed,) + seed))  # str seeds: the same every run
    return [rng.randrange(args.min_id, args.max_id) for _ in range(args.prompt_tokens)]


def request_body(args, prompt, max_tokens):
    body = {"model": args.model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": args.temperature, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.temperature > 0:
        body["seed"] = args.seed
    return body


# ---------------------------------------------------------------- the load
async def run_level(args, host, port, path, concurrency):
    results = []

    async def stream(i):
        conn = Connection(host, port, args.timeout)
        try:
            for j in range(args.requests_per_stream):
                body = request_body(args, prompt_ids(args, concurrency, i, j), args.max_tokens)
                r = await completion(conn, path, body)
                results.append(r)
                if not r["ok"]:
                    print(f"lm_load.py: stream {i} request {j}: {r['error']}", file=sys.stderr)
                    if args.stop_on_error:
                        return
        finally:
            await conn.close()

    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(stream(i) for i in range(concurrency)))
    t1, cpu1 = time.perf_counter(), time.process_time()
    ok = [r for r in results if r["ok"]]
    ttft, itl, e2e, tpot = [], [], [], []
    tokens = chunks = 0
    for r in ok:
        ct = r["chunk_times"]
        n = r["usage_tokens"] if r["usage_tokens"] is not None else len(ct)
        tokens += n
        chunks += len(ct)
        if ct:
            ttft.append(ct[0] - r["t_sent"])
            itl.extend(b - a for a, b in zip(ct, ct[1:]))
        e2e.append(r["t_done"] - r["t_sent"])
        if ct and n > 1:
            tpot.append((ct[-1] - ct[0]) / (n - 1))
    duration = t1 - t0
    return {
        "concurrency": concurrency, "requests": len(results), "errors": len(results) - len(ok),
        "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens,
        "temperature": args.temperature, "output_tokens": tokens,
        "duration_s": round(duration, 3),
        "output_tokens_per_s": round(tokens / duration, 2) if duration > 0 else None,
        "requests_per_s": round(len(ok) / duration, 3) if duration > 0 else None,
        "ttft_ms_p50": ms(pct(ttft, 50)), "ttft_ms_p99": ms(pct(ttft, 99)),
        "itl_ms_p50": ms(pct(itl, 50)), "itl_ms_p99": ms(pct(itl, 99)),
        "itl_ms_mean": ms(sum(itl) / len(itl)) if itl else None,
        "e2e_ms_p50": ms(pct(e2e, 50)), "e2e_ms_p99": ms(pct(e2e, 99)),
        "tpot_ms_p50": ms(pct(tpot, 50)),
        "chunks": chunks, "tokens_per_chunk": round(tokens / chunks, 3) if chunks else None,
        "client_cpu_s": round(cpu1 - cpu0, 3),
    }


async def warm_up(args, host, port, path):
    conn = Connection(host, port, args.warmup_timeout)
    try:
        for k in range(args.warmup):
            r = await completion(conn, path, request_body(
                args, prompt_ids(args, "warm-up", k), min(args.max_tokens, 8)))
            if not r["ok"]:
                raise SystemExit(f"lm_load.py: the warm-up request failed: {r['error']}")
    finally:
        await conn.close()


async def prefix_check(args, host, port, path):
    """TTFT of prefix+A (the prefix new to the server) and then prefix+B (the prefix seen)."""
    conn = Connection(host, port, args.warmup_timeout)
    firsts, seconds = [], []
    total = args.prefix_tokens + 16
    saved = args.prompt_tokens
    try:
        args.prompt_tokens = total
        r = await completion(conn, path, request_body(args, prompt_ids(args, "pc-warm"), 1))
        if not r["ok"]:
            raise SystemExit(f"lm_load.py: the warm-up request failed: {r['error']}")
        for trial in range(args.prefix_trials):
            args.prompt_tokens = args.prefix_tokens
            prefix = prompt_ids(args, "prefix", trial)
            args.prompt_tokens = 16
            ttfts = []
            for side in ("a", "b"):
                r = await completion(conn, path, request_body(
                    args, prefix + prompt_ids(args, "suffix", trial, side), 1))
                if not r["ok"] or not r["chunk_times"]:
                    raise SystemExit(f"lm_load.py: prefix check request: {r['error']}")
                ttfts.append(r["chunk_times"][0] - r["t_sent"])
            firsts.append(ttfts[0])
            seconds.append(ttfts[1])
            print(f"lm_load.py: prefix trial {trial}: first {ttfts[0] * 1e3:.1f} ms, "
                  f"second {ttfts[1] * 1e3:.1f} ms", file=sys.stderr)
    finally:
        args.prompt_tokens = saved
        await conn.close()
    return {"check": "prefix_cache", "prefix_tokens": args.prefix_tokens, "suffix_tokens": 16,
            **ttft_pairs(args, firsts, seconds)}


def ttft_pairs(args, firsts, seconds):
    """A prefix check's figures: the trials' first and second times to first token, their
    medians and second / first."""
    a, b = pct(firsts, 50), pct(seconds, 50)
    return {"trials": args.prefix_trials, "ttft_first_ms": ms(a), "ttft_second_ms": ms(b),
            "ttft_first_ms_all": [ms(x) for x in firsts],
            "ttft_second_ms_all": [ms(x) for x in seconds],
            "ratio": round(b / a, 4) if a else None}


# Words of the chat check's system prompts (English, so that a BPE trained on text makes few
# tokens of each).
WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from "
    "or one had by word but not what all were we when your can said there use an each which "
    "she do how their if will up other about out many then them these so some her would make "
    "like him into time has look two more write go see number no way could people my than "
    "first water been call who oil its now find long down day did get come made may part "
    "answer question model server request token cache prefix stream system user assistant "
    "always never careful helpful brief clear polite reply explain detail example rule").split()


def words(n, *seed):
    rng = random.Random(repr(("words",) + seed))
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chat_body(args, system, user, max_tokens):
    body = request_body(args, None, max_tokens)
    del body["prompt"]
    body["messages"] = [{"role": "system", "content": system},
                        {"role": "user", "content": user}]
    return body


async def chat_prefix_check(args, host, port, path):
    """The prefix check through /v1/chat/completions: a system prompt of about
    --prefix-tokens tokens (words, their count fitted from the server's usage.prompt_tokens),
    then two user messages of 16 words each after it, one request at a time; prompt_tokens_all
    holds each trial's whole prompt (the template's tokens and the user's included)."""
    conn = Connection(host, port, args.warmup_timeout)

    async def ask(system, user):
        r = await completion(conn, path, chat_body(args, system, user, 1))
        if not r["ok"] or not r["chunk_times"] or r["prompt_tokens"] is None:
            raise SystemExit(f"lm_load.py: chat prefix check request: {r['error'] or r}")
        return r

    firsts, seconds, prompt_tokens = [], [], []
    try:
        # The tokens of n system words, from two requests: the template's and the user's
        # tokens, then so many per word.
        bare = (await ask("", words(16, "fit", "user")))["prompt_tokens"]
        probe = 200
        per_word = ((await ask(words(probe, "fit"), words(16, "fit", "user")))["prompt_tokens"]
                    - bare) / probe
        n = max(1, round(args.prefix_tokens / per_word))
        await ask(words(n, "pc-warm"), words(16, "pc-warm", "user"))
        for trial in range(args.prefix_trials):
            system = words(n, "system", trial)
            ttfts = []
            for side in ("a", "b"):
                r = await ask(system, words(16, "user", trial, side))
                ttfts.append(r["chunk_times"][0] - r["t_sent"])
            prompt_tokens.append(r["prompt_tokens"])
            firsts.append(ttfts[0])
            seconds.append(ttfts[1])
            print(f"lm_load.py: chat prefix trial {trial} ({r['prompt_tokens']} prompt tokens): "
                  f"first {ttfts[0] * 1e3:.1f} ms, second {ttfts[1] * 1e3:.1f} ms",
                  file=sys.stderr)
    finally:
        await conn.close()
    return {"check": "prefix_cache_chat", "prefix_tokens": args.prefix_tokens,
            "system_words": n, "prompt_tokens_all": prompt_tokens, "user_words": 16,
            **ttft_pairs(args, firsts, seconds)}


def parse_label(text):
    if not text:
        return {}
    text = text.strip()
    if text.startswith("{"):
        return json.loads(text)
    out = {}
    for item in text.split(","):
        if item:
            k, sep, v = item.partition("=")
            out[k.strip()] = v.strip() if sep else True
    return out


async def main_async(args):
    u = urllib.parse.urlsplit(args.url)
    if u.scheme != "http":
        raise SystemExit("lm_load.py: only http:// URLs")
    host, port = u.hostname, u.port or 80
    base = u.path.rstrip("/")
    path = (base if base.endswith("/v1") else base + "/v1") + "/completions"
    label = parse_label(args.label)
    common = {**label, "model": args.model, "url": args.url}
    if args.prefix_tokens:
        if args.prefix_chat:
            line = await chat_prefix_check(args, host, port, path.removesuffix("/completions") +
                                           "/chat/completions")
        else:
            line = await prefix_check(args, host, port, path)
        print(json.dumps({**common, **line}), flush=True)
        return 0
    await warm_up(args, host, port, path)
    failed = False
    for c in args.concurrency:
        print(f"lm_load.py: {c} stream(s) x {args.requests_per_stream} request(s)",
              file=sys.stderr, flush=True)
        line = await run_level(args, host, port, path, c)
        failed |= line["errors"] > 0
        print(json.dumps({**common, **line}), flush=True)
    return 1 if failed else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000",
                   help="the server's base URL (with or without /v1)")
    p.add_argument("--model", required=True, help="the model name the server knows")
    p.add_argument("--concurrency", default="1,4,16,64",
                   type=lambda s: [int(x) for x in s.split(",") if x])
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--requests-per-stream", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1, help="the sampling seed at temperature > 0")
    p.add_argument("--prompt-seed", type=int, default=0)
    p.add_argument("--min-id", type=int, default=1, help="prompt ids from here ...")
    p.add_argument("--max-id", type=int, default=8000,
                   help="... up to here, exclusive (the lm-bench tokenizers have 8,000 ids)")
    p.add_argument("--warmup", type=int, default=1, help="requests before the first level")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--warmup-timeout", type=float, default=120.0,
                   help="seconds for a warm-up request (a server that hangs fails fast)")
    p.add_argument("--stop-on-error", action="store_true")
    p.add_argument("--prefix-tokens", type=int, default=0,
                   help="run the prefix-cache check with a prefix of this many ids instead")
    p.add_argument("--prefix-trials", type=int, default=3)
    p.add_argument("--prefix-chat", action="store_true",
                   help="the prefix check as a chat: a system prompt of about --prefix-tokens "
                        "tokens shared by two user messages (the model needs a chat template)")
    p.add_argument("--label", default="", help="k=v,k=v or a JSON object added to each line")
    args = p.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
