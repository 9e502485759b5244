#!/usr/bin/env python3
"""Drives cotensor_server's language-model routes with the clients people use: the `openai`
package (completions and chat, streamed and not) and raw HTTP for every bad input, the
Triton/KServe generate extension, /metrics, a client gone mid-stream, admission past the
limits, and a drain with SIGTERM.

    .venv/bin/python3 tests/server/lm_openai_test.py build/examples/cotensor_server

The models are the tiny random ones of tests/data/lm (made with `transformers`, see
make_models.sh): a temperature-0 completion must give, token for token, the ids that
`transformers`' greedy loop gave (recorded in <name>-expected.safetensors). One line per case.
Exits 0 on success, 1 on a failure, 77 (skipped) when the `openai` package is missing.
"""
import argparse
import http.client
import json
import math
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "lm"
sys.path.insert(0, str(HERE))
import serverproc  # noqa: E402

try:
    import openai
except ImportError as e:  # no virtual environment: skipped, not passed
    print(f"SKIPPED: {e}")
    sys.exit(77)

FAILURES = []


def case(name):
    def run(fn):
        try:
            fn()
            print(f"ok   {name}", flush=True)
        except Exception as e:  # noqa: BLE001: report every case
            FAILURES.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        return fn
    return run


def recorded(model):
    """The tensors recorded for `model` (<name>-expected.safetensors): name -> (dtype, shape,
    bytes)."""
    raw_bytes = (DATA / f"{model}-expected.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw_bytes[:8])
    header = json.loads(raw_bytes[8:8 + n])
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            begin, end = t["data_offsets"]
            out[name] = (t["dtype"], t["shape"], raw_bytes[8 + n + begin:8 + n + end])
    return out


def expected_ids(model):
    """The prompts and transformers' greedy continuations recorded for `model`."""
    return {name: list(struct.unpack(f"<{len(data) // 8}q", data))
            for name, (dtype, _, data) in recorded(model).items() if dtype == "I64"}


def expected_logits(model):
    """The last row of transformers' float32 logits after each recorded prompt of `model`: the
    scores of the first greedy token."""
    return {name: list(struct.unpack(f"<{shape[1]}f", data[-shape[1] * 4:]))
            for name, (dtype, shape, data) in recorded(model).items() if dtype == "F32"}


def log_softmax(row):
    top = max(row)
    total = math.log(sum(math.exp(x - top) for x in row))
    return [x - top - total for x in row]


def byte_decoder():
    """GPT-2's byte-to-unicode table, reversed (the tokenizers' ByteLevel decoder)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def decode(model_dir, ids):
    """`tokenizers`' decode(ids, skip_special_tokens=True) for a byte-level BPE file."""
    t = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = {i: s for s, i in t["model"]["vocab"].items()}
    special = {a["id"] for a in t["added_tokens"] if a["special"]}
    for a in t["added_tokens"]:
        vocab[a["id"]] = a["content"]
    table = byte_decoder()
    data = bytearray()
    for i in ids:
        if i in special:
            continue
        data += bytes(table[c] for c in vocab[i])
    return data.decode("utf-8", "replace")


def raw(server, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    payload = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    c.request(method, path, body=payload, headers={"Content-Type": "application/json",
                                                   **(headers or {})})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def events(data):
    """The `data:` payloads of a server-sent event stream."""
    out = []
    for block in data.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            out.append(block[len("data: "):])
    return out


def metric(text, name, labels):
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{labels} in /metrics")


def linked_model(src, dst, written=()):
    """dst/: a model folder of symlinks to tests/data/lm/src's files but those named in
    `written`, which the caller writes."""
    dst.mkdir()
    for f in (DATA / src).iterdir():
        if f.name not in written:
            os.symlink(f, dst / f.name)
    return dst


def make_repository(root):
    """gpt2, qwen (ChatML) and llama (Llama 3 template) from tests/data/lm, and `long`: the
    Llama one with a context of 4,096 (RoPE has no position weights), one running and one
    waiting sequence at most, so that a stream lasts long enough to leave or drain mid-way."""
    for name, src in (("gpt2", "gpt2-tiny"), ("qwen", "qwen2-tiny"), ("llama", "llama-tiny")):
        os.symlink(DATA / src, root / name)
    long = linked_model("llama-tiny", root / "long", written=("config.json",))
    config = json.loads((DATA / "llama-tiny" / "config.json").read_text())
    config["max_position_embeddings"] = LONG
    (long / "config.json").write_text(json.dumps(config))
    (long / "cotensor.json").write_text(json.dumps({"max_running": 1, "max_waiting": 1}))
    # `wide`: `long` with room for two running and two waiting, for the choices of one request.
    wide = linked_model("llama-tiny", root / "wide", written=("config.json",))
    (wide / "config.json").write_text(json.dumps(config))
    (wide / "cotensor.json").write_text(json.dumps({"max_running": 2, "max_waiting": 2}))
    # `short`: gpt2-tiny served with a context of 40 of its 64 positions (cotensor.json).
    short = linked_model("gpt2-tiny", root / "short")
    (short / "cotensor.json").write_text(json.dumps({"context_length": SHORT}))
    # `badchat`: gpt2-tiny with a chat template that uses a construct the renderer refuses.
    bad = linked_model("gpt2-tiny", root / "badchat", written=("tokenizer_config.json",))
    (bad / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}\n"
                          "{% macro greet(x) %}hi {{ x }}{% endmacro %}"}))


LONG = 4096
SHORT = 40
DRAINED = 600


def start_stream(server, model, max_tokens, receive_buffer=None, n=1):
    """A streaming completion of `n` choices on a raw socket (its SO_RCVBUF `receive_buffer`
    when given), its response head read: the socket."""
    s = socket.socket()
    if receive_buffer is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    s.connect((server.host, server.port))
    body = json.dumps({"model": model, "prompt": "a", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True, "temperature": 0, "n": n}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nContent-Length: " + str(len(body)).encode() +
              b"\r\n\r\n" + body)
    head = s.recv(64)
    assert head.startswith(b"HTTP/1.1 200"), head + s.recv(4096)
    return s


def long_figures(server, model="long"):
    """The `long` model's (or `model`'s) aborted requests, running and waiting sequences,
    KV-cache usage and generated tokens, from /metrics."""
    text = raw(server, "GET", "/metrics")[2].decode()
    return [metric(text, name, {"model": model}) for name in (
        "cotensor_lm_request_aborted_total", "cotensor_lm_num_requests_running",
        "cotensor_lm_num_requests_waiting", "cotensor_lm_kv_cache_usage_perc",
        "cotensor_lm_generation_tokens_total")]


def wait_aborted(server, aborted, timeout, model="long", more=1):
    """Waits until `long` (or `model`) has aborted `more` requests more than `aborted` and holds
    no sequence and no KV block; the generated tokens total then."""
    deadline = time.time() + timeout
    while True:
        done, running, waiting, usage, tokens = long_figures(server, model)
        if done == aborted + more and running == 0 and waiting == 0 and usage == 0:
            return tokens
        assert time.time() < deadline, (done, running, waiting, usage, tokens)
        time.sleep(0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("server")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        repo = Path(d)
        make_repository(repo)
        with serverproc.ServerProcess(args.server, repo, ["--threads", "2"]) as server:
            run_cases(server)
            drain(server)
        rc = server.returncode
        if rc != 0:
            FAILURES.append("exit status")
            print(f"FAIL exit status: {rc} after SIGTERM", flush=True)
        # A write timeout of 1.5 s, for a reader that stops reading.
        with serverproc.ServerProcess(args.server, repo,
                                      ["--threads", "2", "--timeout-ms", "1500"]) as server:
            run_slow_reader(server)
        # The same reader with the send buffer left to the system (--stream-send-buffer-bytes 0).
        with serverproc.ServerProcess(args.server, repo,
                                      ["--threads", "2", "--timeout-ms", "1500",
                                       "--stream-send-buffer-bytes", "0"]) as server:
            run_system_send_buffer(server)
    if FAILURES:
        print(f"{len(FAILURES)} case(s) FAILED: {', '.join(FAILURES)}")
        return 1
    print("all cases passed")
    return 0


def run_cases(server):
    client = openai.OpenAI(base_url=f"http://{server.url}/v1", api_key="none", max_retries=0)
    greedy = expected_ids("gpt2-tiny")

    @case("GET /v1/models lists the language models")
    def _():
        ids = sorted(m.id for m in client.models.list().data)
        assert ids == ["gpt2", "llama", "long", "qwen", "short", "wide"], ids

    @case("cotensor.json's context_length: the served context, in /v1/models and the errors")
    def _():
        cards = {m["id"]: m for m in json.loads(raw(server, "GET", "/v1/models")[2])["data"]}
        assert cards["gpt2"]["max_model_len"] == 64 and cards["short"]["max_model_len"] == SHORT
        meta = json.loads(raw(server, "GET", "/v2/models/short/config")[2])
        assert meta["context_length"] == SHORT, meta
        prompt = greedy["ids_0"]
        room = SHORT - len(prompt)
        # Up to the context: gpt2's greedy ids; one more is a 400 that names the context.
        r = client.completions.create(model="short", prompt=prompt, max_tokens=room,
                                      temperature=0, extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == room and r.choices[0].finish_reason == "length"
        full = client.completions.create(model="gpt2", prompt=prompt, max_tokens=room,
                                         temperature=0, extra_body={"ignore_eos": True})
        assert r.choices[0].text == full.choices[0].text
        status, _, data = raw(server, "POST", "/v1/completions",
                              {"model": "short", "prompt": prompt, "max_tokens": room + 1})
        message = json.loads(data)["error"]["message"]
        assert status == 400 and str(SHORT) in message and "context" in message, (status, data)
        # The generate extension refuses past it too.
        status, _, data = raw(server, "POST", "/v2/models/short/generate",
                              {"text_input": "a b c", "parameters": {"max_tokens": SHORT}})
        assert status == 400 and str(SHORT) in json.loads(data)["error"], (status, data)

    @case("bench/server/lm_load.py drives it: a load level and both prefix-cache checks")
    def _():
        load = HERE.parent.parent / "bench" / "server" / "lm_load.py"
        base = [sys.executable, str(load), "--url", f"http://{server.url}"]
        out = subprocess.run(base + ["--model", "gpt2", "--concurrency", "2",
                                     "--requests-per-stream", "2", "--prompt-tokens", "8",
                                     "--max-tokens", "4", "--max-id", "200"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        level = json.loads(out)
        assert level["errors"] == 0 and level["requests"] == 4, level
        assert level["output_tokens"] == 16 and level["ttft_ms_p50"] > 0, level
        for chat in ([], ["--prefix-chat"]):
            # `long`: Llama 3's template, a context of 4,096.
            out = subprocess.run(base + ["--model", "long", "--prefix-tokens", "300",
                                         "--prefix-trials", "1", "--max-id", "200"] + chat,
                                 capture_output=True, text=True, timeout=120, check=True).stdout
            check = json.loads(out)
            assert check["check"] == ("prefix_cache_chat" if chat else "prefix_cache"), check
            assert check["ttft_first_ms"] > 0 and check["ttft_second_ms"] > 0, check
            if chat:
                # The system prompt fitted to ~300 tokens, the user's 16 words and the template
                # after it.
                assert 300 < check["prompt_tokens_all"][0] < 500, check

    @case("temperature 0 completion = transformers' greedy ids, for every recorded prompt of "
          "the three models")
    def _():
        for model, folder in (("gpt2", "gpt2-tiny"), ("llama", "llama-tiny"),
                              ("qwen", "qwen2-tiny")):
            recorded = greedy if folder == "gpt2-tiny" else expected_ids(folder)
            for i in range(4):
                prompt, want = recorded[f"ids_{i}"], recorded[f"greedy_{i}"]
                n = min(len(want), 64 - len(prompt))
                r = client.completions.create(model=model, prompt=prompt, max_tokens=n,
                                              temperature=0, extra_body={"ignore_eos": True})
                assert r.usage.prompt_tokens == len(prompt), (model, r.usage)
                assert r.usage.completion_tokens == n, (model, r.usage)
                assert r.choices[0].finish_reason == "length", (model, r.choices[0])
                text = decode(DATA / folder, want[:n])
                assert r.choices[0].text == text, (model, i, r.choices[0].text, text)

    @case("logit_bias and the penalties: a forced token always comes, a banned one never, on "
          "every route")
    def _():
        prompt, want = greedy["ids_0"], greedy["greedy_0"]
        kw = dict(model="gpt2", prompt=prompt, max_tokens=8, temperature=0,
                  extra_body={"ignore_eos": True})
        plain = client.completions.create(**kw).choices[0].text
        assert plain == decode(DATA / "gpt2-tiny", want[:8])
        forced = client.completions.create(**kw, logit_bias={"42": 100}).choices[0].text
        assert forced == decode(DATA / "gpt2-tiny", [42] * 8), forced
        # Greedy's first token banned: another comes first. Every id but three banned (gpt2-tiny
        # scores 1,200; the last, 1199, may be named): sampled, only those three come.
        r = client.completions.create(**kw, logit_bias={str(want[0]): -100}, logprobs=0)
        assert r.choices[0].logprobs.tokens[0] != decode(DATA / "gpt2-tiny", [want[0]]), r
        banned = {str(i): -100 for i in range(1200) if i not in (5, 6, 7)}
        r = client.completions.create(**{**kw, "temperature": 1.0, "seed": 4}, logit_bias=banned,
                                      logprobs=0)
        allowed = {decode(DATA / "gpt2-tiny", [i]) for i in (5, 6, 7)}
        assert set(r.choices[0].logprobs.tokens) <= allowed, r.choices[0].logprobs.tokens
        # Penalties change greedy's text (gpt2-tiny repeats itself without them).
        for penalty in ({"presence_penalty": 2, "frequency_penalty": 2},
                        {"extra_body": {"ignore_eos": True, "repetition_penalty": 3.0}}):
            text = client.completions.create(**{**kw, **penalty}).choices[0].text
            assert text != plain, penalty
        chat = client.chat.completions.create(
            model="qwen", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
            temperature=0, logit_bias={"42": 100}, extra_body={"ignore_eos": True})
        assert chat.choices[0].message.content == decode(DATA / "qwen2-tiny", [42] * 4), chat
        status, _, data = raw(server, "POST", "/v2/models/gpt2/generate",
                              {"text_input": "Hello", "parameters": {
                                  "max_tokens": 3, "temperature": 0, "ignore_eos": True,
                                  "logit_bias": {"42": 100}}})
        assert status == 200, data
        assert json.loads(data)["text_output"].endswith(decode(DATA / "gpt2-tiny", [42] * 3)), data

    @case("a streamed completion gives the same text, one id, usage, then [DONE]")
    def _():
        kw = dict(model="gpt2", prompt="Hello, world", max_tokens=20, temperature=0,
                  extra_body={"ignore_eos": True})
        whole = client.completions.create(**kw)
        chunks = list(client.completions.create(**kw, stream=True,
                                                stream_options={"include_usage": True}))
        assert len({c.id for c in chunks}) == 1
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == whole.choices[0].text, (text, whole.choices[0].text)
        finals = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert finals[-1] == "length" and all(f is None for f in finals[:-1]), finals
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20
        status, headers, body = raw(server, "POST", "/v1/completions",
                                    {**kw.pop("extra_body"), **kw, "stream": True})
        assert status == 200 and headers["Content-Type"] == "text/event-stream"
        assert events(body)[-1] == "[DONE]"

    @case("seeded sampling repeats itself; stop strings are trimmed")
    def _():
        kw = dict(model="gpt2", prompt="Once upon", max_tokens=24, temperature=0.8, seed=7,
                  extra_body={"ignore_eos": True})
        a, b = (client.completions.create(**kw).choices[0].text for _ in range(2))
        assert a == b
        whole = client.completions.create(model="gpt2", prompt="Once upon", max_tokens=24,
                                          temperature=0, extra_body={"ignore_eos": True})
        text = whole.choices[0].text
        stop = text[5:8]
        assert len(stop) == 3, text
        r = client.completions.create(model="gpt2", prompt="Once upon", max_tokens=24,
                                      temperature=0, stop=[stop],
                                      extra_body={"ignore_eos": True})
        assert r.choices[0].finish_reason == "stop", r.choices[0]
        assert r.choices[0].text == text[:text.index(stop)], (r.choices[0].text, text)
        streamed = "".join(c.choices[0].text for c in client.completions.create(
            model="gpt2", prompt="Once upon", max_tokens=24, temperature=0, stop=stop,
            stream=True, extra_body={"ignore_eos": True}))
        assert streamed == r.choices[0].text, (streamed, r.choices[0].text)

    @case("top_k 1 and a tiny top_p sample greedily; chat's max_completion_tokens, its usage chunk")
    def _():
        kw = dict(model="gpt2", prompt="Once upon", max_tokens=16)
        greedy_text = client.completions.create(**kw, temperature=0,
                                                extra_body={"ignore_eos": True}).choices[0].text
        hot = dict(kw, temperature=1.5, seed=3)
        sampled = client.completions.create(**hot, extra_body={"ignore_eos": True})
        assert sampled.choices[0].text != greedy_text, "a hot seeded sample is the greedy text"
        for top in ({"extra_body": {"ignore_eos": True, "top_k": 1}},
                    {"top_p": 1e-6, "extra_body": {"ignore_eos": True}}):
            r = client.completions.create(**hot, **top)
            assert r.choices[0].text == greedy_text, (top, r.choices[0].text, greedy_text)
        msgs = [{"role": "user", "content": "hi"}]
        chat = dict(model="qwen", messages=msgs, temperature=0, extra_body={"ignore_eos": True})
        r = client.chat.completions.create(**chat, max_completion_tokens=3)
        assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length", r
        # Both given: max_completion_tokens, which OpenAI's chat API has in place of the
        # deprecated max_tokens (vLLM reads them so too).
        status, _, data = raw(server, "POST", "/v1/chat/completions",
                              {"model": "qwen", "messages": msgs, "temperature": 0,
                               "ignore_eos": True, "max_tokens": 5, "max_completion_tokens": 2})
        assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 2, data
        chunks = list(client.chat.completions.create(**chat, max_completion_tokens=3,
                                                     stream=True,
                                                     stream_options={"include_usage": True}))
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3, chunks[-1]
        assert chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens, chunks[-1].usage
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == r.choices[0].message.content, (text, r.choices[0].message.content)

    @case("chat completions render the model's template (ChatML, Llama 3), streamed and not")
    def _():
        # No max_tokens: what the context leaves (vLLM's default), ending with "length".
        r = client.chat.completions.create(model="qwen", temperature=0,
                                           messages=[{"role": "user", "content": "hi"}],
                                           extra_body={"ignore_eos": True})
        assert r.usage.prompt_tokens + r.usage.completion_tokens == 64, r.usage
        assert r.choices[0].finish_reason == "length"
        for model in ("qwen", "llama"):
            msgs = [{"role": "user", "content": "hi"}]
            r = client.chat.completions.create(model=model, messages=msgs, max_tokens=2,
                                               temperature=0)
            assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
            assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 4, r.usage
            chunks = list(client.chat.completions.create(model=model, messages=msgs,
                                                         max_tokens=2, temperature=0,
                                                         stream=True))
            assert chunks[0].choices[0].delta.role == "assistant"
            assert len({c.id for c in chunks}) == 1, [c.id for c in chunks]
            text = "".join(c.choices[0].delta.content or "" for c in chunks)
            assert text == r.choices[0].message.content, (text, r.choices[0].message.content)
            assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason

    @case("n choices: each its own sample under seed + i, whole and streamed alike, usage summed")
    def _():
        kw = dict(model="gpt2", prompt="Once upon", max_tokens=10, temperature=1.5, seed=11,
                  extra_body={"ignore_eos": True})
        r = client.completions.create(**kw, n=3, logprobs=2)
        assert [c.index for c in r.choices] == [0, 1, 2], r.choices
        texts = [c.text for c in r.choices]
        assert len(set(texts)) == 3, texts
        # Choice i is the one-choice answer under seed + i; the prompt counts once.
        for i, c in enumerate(r.choices):
            one = client.completions.create(**dict(kw, seed=11 + i), logprobs=2)
            assert r.usage.prompt_tokens == one.usage.prompt_tokens, (r.usage, one.usage)
            assert r.usage.completion_tokens == 3 * one.usage.completion_tokens == 30, r.usage
            alone = one.choices[0]
            assert c.text == alone.text, (i, c.text, alone.text)
            assert c.logprobs.tokens == alone.logprobs.tokens, i
            assert c.logprobs.text_offset == alone.logprobs.text_offset, i
            assert c.finish_reason == "length"
        # Streamed: every choice's chunks, interleaved, join to its text; one finish each.
        chunks = list(client.completions.create(**kw, n=3, stream=True,
                                                stream_options={"include_usage": True}))
        joined = {i: "" for i in range(3)}
        finishes = {i: [] for i in range(3)}
        for ch in chunks[:-1]:
            (c,) = ch.choices
            joined[c.index] += c.text
            if c.finish_reason:
                finishes[c.index].append(c.finish_reason)
        assert [joined[i] for i in range(3)] == texts, (joined, texts)
        assert all(f == ["length"] for f in finishes.values()), finishes
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 30, chunks[-1]
        # Chat: a role for every choice, then each choice's content; greedy choices agree.
        msgs = [{"role": "user", "content": "hi"}]
        chat = dict(model="qwen", messages=msgs, max_tokens=4, extra_body={"ignore_eos": True})
        greedy_r = client.chat.completions.create(**chat, temperature=0, n=2)
        contents = [c.message.content for c in greedy_r.choices]
        assert len(contents) == 2 and contents[0] == contents[1], contents
        streamed = list(client.chat.completions.create(**chat, temperature=0, n=2, stream=True))
        roles = [ch.choices[0].index for ch in streamed if ch.choices[0].delta.role]
        assert roles == [0, 1], roles
        for i in range(2):
            text = "".join(ch.choices[0].delta.content or "" for ch in streamed
                           if ch.choices[0].index == i)
            assert text == contents[i], (i, text, contents[i])
        # More choices than `long` queues (max_waiting 1) can never be taken whole: 400.
        body = {"model": "long", "prompt": "a", "max_tokens": 200, "ignore_eos": True}
        status, _, data = raw(server, "POST", "/v1/completions", {**body, "n": 2})
        err = json.loads(data)["error"]
        assert status == 400 and err["param"] == "n" and "max_waiting" in err["message"], data
        # `wide` (2 running, 2 waiting): a 2-choice stream holds both running places and a
        # stream waits; of two more choices the first waits, the second finds the queue full, and
        # the request is refused whole (503), none left behind.
        aborted = long_figures(server, "wide")[0]
        streams = [start_stream(server, "wide", LONG - 8, n=2)]
        deadline = time.time() + 30
        while long_figures(server, "wide")[1:3] != [2, 0]:
            assert time.time() < deadline, long_figures(server, "wide")
            time.sleep(0.05)
        streams.append(start_stream(server, "wide", LONG - 8))
        status, headers, data = raw(server, "POST", "/v1/completions",
                                    {**body, "model": "wide", "n": 2})
        assert status == 503 and headers["Retry-After"] == "1", (status, data)
        for st in streams:
            st.close()
        wait_aborted(server, aborted, 30, "wide", 3)  # the streams'; the refused never began
        status, _, data = raw(server, "POST", "/v1/completions", {**body, "n": 1})
        assert status == 200 and len(json.loads(data)["choices"]) == 1, (status, data)

    @case("a batch of prompts: n choices of each, in order, each as its prompt alone gives it")
    def _():
        prompts = ["Once upon", "The cat sat on", "a"]
        kw = dict(model="gpt2", max_tokens=6, temperature=1.5, seed=5, logprobs=1,
                  extra_body={"ignore_eos": True})
        r = client.completions.create(**kw, prompt=prompts, n=2)
        assert [c.index for c in r.choices] == list(range(6)), r.choices
        alone = [client.completions.create(**dict(kw, seed=5 + k % 2), prompt=prompts[k // 2])
                 for k in range(6)]
        for k, c in enumerate(r.choices):
            assert c.text == alone[k].choices[0].text, (k, c.text, alone[k].choices[0].text)
            assert c.logprobs.tokens == alone[k].choices[0].logprobs.tokens, k
        assert r.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone[::2]), r.usage
        assert r.usage.completion_tokens == 36, r.usage
        # Streamed: each choice's chunks join to its text.
        joined = {}
        for ch in client.completions.create(**kw, prompt=prompts, n=2, stream=True):
            for c in ch.choices:
                joined[c.index] = joined.get(c.index, "") + c.text
        assert [joined[k] for k in range(6)] == [c.text for c in r.choices], joined
        # Lists of ids, greedy, echoed: each choice its own prompt's text, then its completion.
        ids = [greedy["ids_1"], greedy["ids_1"][:3]]
        g = dict(model="gpt2", max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
        both = client.completions.create(**g, prompt=ids, echo=True)
        for k, c in enumerate(both.choices):
            one = client.completions.create(**g, prompt=ids[k]).choices[0]
            assert c.text == decode(DATA / "gpt2-tiny", ids[k]) + one.text, (k, c.text, one.text)
        assert both.usage.prompt_tokens == len(ids[0]) + len(ids[1]), both.usage
        # Scored as lm-evaluation-harness batches them (echo, max_tokens 0, logprobs): each
        # prompt's listing is its own.
        scored = client.completions.create(model="gpt2", prompt=ids, max_tokens=0, echo=True,
                                           logprobs=1)
        for k, c in enumerate(scored.choices):
            one = client.completions.create(model="gpt2", prompt=ids[k], max_tokens=0, echo=True,
                                            logprobs=1).choices[0]
            assert c.logprobs.tokens == one.logprobs.tokens, k
            assert c.logprobs.token_logprobs[0] is None, k
            assert all(abs(a - b) < 1e-4 for a, b in zip(c.logprobs.token_logprobs[1:],
                                                          one.logprobs.token_logprobs[1:])), k
            assert len(c.logprobs.tokens) == len(ids[k]), (k, c.logprobs.tokens)
        # Refused whole, naming the prompt: a mixed list, an empty prompt among others, and
        # more prompts than `long` queues at once (max_waiting 1).
        for body, param, words in (
                ({"model": "gpt2", "prompt": ["a", [1, 2]]}, "prompt", "list of strings"),
                ({"model": "gpt2", "prompt": ["a", ""]}, "prompt", "prompt 1: "),
                ({"model": "gpt2", "prompt": [[1], [2, 10**9]]}, "prompt", "'prompt'[1]"),
                ({"model": "long", "prompt": ["a", "b"]}, "prompt", "max_waiting")):
            status, _, data = raw(server, "POST", "/v1/completions", body)
            err = json.loads(data)["error"]
            assert status == 400 and err["param"] == param and words in err["message"], data

    @case("echo: the prompt before the text, its tokens' log-probabilities (max_tokens 0 too), "
          "whole and streamed alike")
    def _():
        prompt, want = greedy["ids_1"], greedy["greedy_1"]
        first = log_softmax(expected_logits("gpt2-tiny")["logits_1"])
        # The generated tokens' log-probabilities, then the same ids as a prompt scored whole.
        gen = client.completions.create(model="gpt2", prompt=prompt, max_tokens=len(want),
                                        temperature=0, logprobs=2,
                                        extra_body={"ignore_eos": True})
        scored = client.completions.create(model="gpt2", prompt=prompt + want, max_tokens=0,
                                           echo=True, logprobs=2)
        c = scored.choices[0]
        assert c.text == decode(DATA / "gpt2-tiny", prompt + want), c.text
        assert c.finish_reason == "length" and scored.usage.completion_tokens == 0, scored
        lp, n = c.logprobs, len(prompt)
        assert len(lp.tokens) == len(lp.token_logprobs) == len(prompt + want), lp
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, lp
        assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset), lp.text_offset
        assert abs(lp.token_logprobs[n] - first[want[0]]) < 1e-4, (lp.token_logprobs[n],
                                                                   first[want[0]])
        glp = gen.choices[0].logprobs
        assert lp.tokens[n:] == glp.tokens, (lp.tokens, glp.tokens)
        assert all(abs(a - b) < 1e-4 for a, b in zip(lp.token_logprobs[n:], glp.token_logprobs))
        assert [set(t) for t in lp.top_logprobs[n:]] == [set(t) for t in glp.top_logprobs]
        # A text prompt: echoed as written, then the completion; its listing the prompt's tokens
        # and then the completion's, offsets counting on; streamed, the prompt comes first.
        kw = dict(model="gpt2", prompt="Once upon a time", max_tokens=4, temperature=0,
                  echo=True, logprobs=1, extra_body={"ignore_eos": True})
        whole = client.completions.create(**kw).choices[0]
        plain = client.completions.create(**dict(kw, echo=False)).choices[0]
        assert whole.text == "Once upon a time" + plain.text, (whole.text, plain.text)
        k = len(whole.logprobs.tokens) - len(plain.logprobs.tokens)
        assert "".join(whole.logprobs.tokens[:k]) == "Once upon a time", whole.logprobs.tokens
        assert whole.logprobs.tokens[k:] == plain.logprobs.tokens
        assert [o - len("Once upon a time") for o in whole.logprobs.text_offset[k:]] == \
            plain.logprobs.text_offset, (whole.logprobs.text_offset, plain.logprobs.text_offset)
        chunks = list(client.completions.create(**kw, stream=True))
        assert chunks[0].choices[0].text == "Once upon a time", chunks[0]
        assert "".join(ch.choices[0].text for ch in chunks) == whole.text
        listed = [ch.choices[0].logprobs for ch in chunks if ch.choices[0].logprobs]
        assert sum((x.tokens for x in listed), []) == whole.logprobs.tokens
        assert sum((x.text_offset for x in listed), []) == whole.logprobs.text_offset
        # max_tokens 0 streamed: the prompt, then the end.
        only = list(client.completions.create(**dict(kw, max_tokens=0), stream=True))
        assert only[0].choices[0].text == "Once upon a time", only
        assert only[-1].choices[0].finish_reason == "length", only[-1]
        assert "".join(ch.choices[0].text for ch in only) == "Once upon a time", only
        # The end-of-sequence id that stops a choice is listed last (its text empty in `text`)
        # and counted, as vLLM lists and counts it: lm-evaluation-harness drops the listing's
        # last token as the generated one.
        for seed in range(60):
            r = client.completions.create(model="gpt2", prompt="Once upon", max_tokens=40,
                                          temperature=5, seed=seed, logprobs=1)
            if r.choices[0].finish_reason == "stop":
                break
        c = r.choices[0]
        assert c.finish_reason == "stop", c
        assert c.logprobs.tokens[-1] == "<|endoftext|>" and c.logprobs.token_logprobs[-1] < 0, c
        assert r.usage.completion_tokens == len(c.logprobs.tokens), (r.usage, c.logprobs)
        assert "<|endoftext|>" not in c.text, c.text
        streamed = list(client.completions.create(model="gpt2", prompt="Once upon", max_tokens=40,
                                                  temperature=5, seed=seed, logprobs=1,
                                                  stream=True))
        tokens = sum((ch.choices[0].logprobs.tokens for ch in streamed
                      if ch.choices[0].logprobs), [])
        assert tokens == c.logprobs.tokens, (tokens, c.logprobs.tokens)
        # Without logprobs: the text alone; n choices each echo it.
        two = client.completions.create(**dict(kw, logprobs=None, n=2))
        assert [ch.text for ch in two.choices] == [whole.text] * 2, two.choices
        assert all(ch.logprobs is None for ch in two.choices)

    @case("logprobs on /v1/completions: transformers' log-softmax, whole and streamed alike")
    def _():
        prompt, want = greedy["ids_1"], greedy["greedy_1"]
        first = log_softmax(expected_logits("gpt2-tiny")["logits_1"])
        text_of = lambda i: decode(DATA / "gpt2-tiny", [i])  # noqa: E731
        kw = dict(model="gpt2", prompt=prompt, max_tokens=12, temperature=0, logprobs=3,
                  extra_body={"ignore_eos": True})
        r = client.completions.create(**kw)
        lp = r.choices[0].logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 12, lp
        assert lp.tokens == [text_of(i) for i in want[:12]], (lp.tokens, want[:12])
        # The first token's figures are those of transformers' logits after the prompt.
        assert abs(lp.token_logprobs[0] - first[want[0]]) < 1e-4, (lp.token_logprobs[0],
                                                                    first[want[0]])
        likeliest = sorted(range(len(first)), key=lambda i: (-first[i], i))[:3]
        assert set(lp.top_logprobs[0]) == {text_of(i) for i in likeliest}, lp.top_logprobs[0]
        for i in likeliest:
            assert abs(lp.top_logprobs[0][text_of(i)] - first[i]) < 1e-4
        for token, own, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            # Greedy: each token is the likeliest of its listing, which holds it.
            assert own <= 0 and abs(top[token] - own) < 1e-6 and own >= max(top.values()) - 1e-6
            assert 1 <= len(top) <= 4, top
        # Each token's offset is where its text starts in the completion's.
        text = r.choices[0].text
        assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset), lp.text_offset
        for token, at in zip(lp.tokens, lp.text_offset):
            assert "\ufffd" in token or text[at:].startswith(token), (token, at, text)
        if "\ufffd" not in text:
            assert "".join(lp.tokens) == text
        chunks = list(client.completions.create(**kw, stream=True))
        listed = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs]
        assert sum((x.tokens for x in listed), []) == lp.tokens
        assert sum((x.text_offset for x in listed), []) == lp.text_offset
        streamed = sum((x.token_logprobs for x in listed), [])
        assert all(abs(a - b) < 1e-6 for a, b in zip(streamed, lp.token_logprobs)), streamed
        # 0: each token's own alone; none asked: null.
        own = client.completions.create(**dict(kw, logprobs=0)).choices[0].logprobs
        assert [list(t) for t in own.top_logprobs] == [[t] for t in lp.tokens], own.top_logprobs
        plain = dict(kw)
        del plain["logprobs"]
        assert client.completions.create(**plain).choices[0].logprobs is None

    @case("logprobs on chat: each token, its bytes and its likeliest, whole and streamed alike")
    def _():
        kw = dict(model="qwen", messages=[{"role": "user", "content": "hi"}], temperature=0,
                  max_tokens=4, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
        r = client.chat.completions.create(**kw)
        content = r.choices[0].logprobs.content
        assert len(content) == r.usage.completion_tokens == 4, content
        for t in content:
            assert bytes(t.bytes).decode("utf-8", "replace") == t.token, t
            assert len(t.top_logprobs) == 2, t
            assert t.top_logprobs[0].token == t.token, t  # greedy: the likeliest
            assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6, t
            assert t.top_logprobs[1].logprob <= t.logprob <= 0, t
        if "\ufffd" not in r.choices[0].message.content:
            assert "".join(t.token for t in content) == r.choices[0].message.content
        chunks = list(client.chat.completions.create(**kw, stream=True))
        streamed = [t for c in chunks if c.choices[0].logprobs
                    for t in c.choices[0].logprobs.content]
        assert [t.token for t in streamed] == [t.token for t in content]
        assert all(abs(a.logprob - b.logprob) < 1e-6 for a, b in zip(streamed, content))
        # logprobs alone: no alternatives; not asked: null.
        alone = client.chat.completions.create(**dict(kw, top_logprobs=None))
        assert all(t.top_logprobs == [] for t in alone.choices[0].logprobs.content)
        assert client.chat.completions.create(
            **dict(kw, logprobs=False, top_logprobs=None)).choices[0].logprobs is None

    @case("the generate extension: /generate and /generate_stream, advertised in GET /v2")
    def _():
        status, _, body = raw(server, "GET", "/v2")
        assert status == 200 and "generate" in json.loads(body)["extensions"]
        params = {"max_tokens": 12, "temperature": 0, "ignore_eos": True}
        want = client.completions.create(model="gpt2", prompt="abc", max_tokens=12,
                                         temperature=0, extra_body={"ignore_eos": True})
        status, _, body = raw(server, "POST", "/v2/models/gpt2/generate",
                              {"text_input": "abc", "parameters": params})
        out = json.loads(body)
        assert status == 200 and out["text_output"] == want.choices[0].text, out
        assert out["model_name"] == "gpt2" and out["finish_reason"] == "length"
        status, headers, body = raw(server, "POST", "/v2/models/gpt2/generate_stream",
                                    {"text_input": "abc", "parameters": params})
        assert status == 200 and headers["Content-Type"] == "text/event-stream"
        parts = [json.loads(e) for e in events(body)]
        assert "".join(p["text_output"] for p in parts) == want.choices[0].text
        assert parts[-1]["done"] is True and all(not p["done"] for p in parts[:-1])
        for path in ("/v2/models/gpt2", "/v2/models/gpt2/ready", "/v2/models/gpt2/config"):
            status, _, body = raw(server, "GET", path)
            assert status == 200 and json.loads(body)["name"] == "gpt2", (path, body)

    @case("bad requests: a 4xx in OpenAI's error shape, and the server serves on")
    def _():
        cases = [
            (b"{not json", 400, None),
            (b"[1, 2]", 400, None),
            ({"prompt": "x"}, 400, "model"),
            ({"model": "nope", "prompt": "x"}, 404, "model"),
            ({"model": "gpt2", "prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
            ({"model": "gpt2", "prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
            ({"model": "gpt2", "prompt": "x", "temperature": "hot"}, 400, "temperature"),
            ({"model": "gpt2", "prompt": "x", "top_p": 0}, 400, "top_p"),
            ({"model": "gpt2", "prompt": "x", "top_k": -2}, 400, "top_k"),
            ({"model": "gpt2", "prompt": "x", "stop": 5}, 400, "stop"),
            ({"model": "gpt2", "prompt": "x", "n": 0}, 400, "n"),
            ({"model": "gpt2", "prompt": "x", "n": 17}, 400, "n"),
            ({"model": "gpt2", "prompt": "x", "n": 1.5}, 400, "n"),
            ({"model": "gpt2", "prompt": "x", "logprobs": 21}, 400, "logprobs"),
            ({"model": "gpt2", "prompt": "x", "logprobs": -1}, 400, "logprobs"),
            ({"model": "gpt2", "prompt": "x", "top_logprobs": 2}, 400, "top_logprobs"),
            ({"model": "gpt2", "prompt": "x", "stream": "yes"}, 400, "stream"),
            ({"model": "gpt2", "prompt": ""}, 400, "prompt"),
            ({"model": "gpt2", "prompt": 7}, 400, "prompt"),
            ({"model": "gpt2", "prompt": [1, 99999]}, 400, "prompt"),
            ({"model": "gpt2", "prompt": []}, 400, "prompt"),
            ({"model": "gpt2", "prompt": "word " * 80}, 400, "prompt"),
            ({"model": "gpt2", "prompt": "x", "max_tokens": 100}, 400, "max_tokens"),
            ({"model": "gpt2", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
            ({"model": "gpt2", "prompt": "x", "stream_options": {"include_usage": True}}, 400,
             "stream_options"),
            ({"model": "gpt2", "prompt": "x", "stop": ["s"] * 17}, 400, "stop"),
            ({"model": "gpt2", "prompt": "x", "stop": "s" * 1025}, 400, "stop"),
            ({"model": "gpt2", "prompt": "x" * (64 * 1024 + 1)}, 400, "prompt"),
            ({"model": "gpt2", "prompt": "x", "presence_penalty": 2.5}, 400, "presence_penalty"),
            ({"model": "gpt2", "prompt": "x", "frequency_penalty": "x"}, 400, "frequency_penalty"),
            ({"model": "gpt2", "prompt": "x", "repetition_penalty": 0}, 400,
             "repetition_penalty"),
            ({"model": "gpt2", "prompt": "x", "best_of": 3}, 400, "best_of"),
            ({"model": "gpt2", "prompt": "x", "logit_bias": [5]}, 400, "logit_bias"),
            ({"model": "gpt2", "prompt": "x", "logit_bias": {"five": 1}}, 400, "logit_bias"),
            ({"model": "gpt2", "prompt": "x", "logit_bias": {"5": 101}}, 400, "logit_bias"),
            ({"model": "gpt2", "prompt": "x", "logit_bias": {"5": "1"}}, 400, "logit_bias"),
            ({"model": "gpt2", "prompt": "x", "logit_bias": {"99999": 1}}, 400, "logit_bias"),
            ({"model": "gpt2", "prompt": "x", "logit_bias": {"1200": 1}}, 400, "logit_bias"),
            ({"model": "gpt2", "prompt": "x", "logit_bias": {"1": 1, "01": 2}}, 400, "logit_bias"),
            ({"model": "gpt2", "prompt": "x", "repetition_penalty": 1e-50}, 400,
             "repetition_penalty"),
            ({"model": "gpt2", "prompt": "x", "tools": [{"type": "function"}]}, 400, "tools"),
            ({"model": "gpt2", "prompt": "x", "response_format": {"type": "json_object"}}, 400,
             "response_format"),
        ]
        for body, want, param in cases:
            status, _, data = raw(server, "POST", "/v1/completions", body)
            err = json.loads(data)["error"]
            assert status == want, (body, status, data)
            assert isinstance(err["message"], str) and err["code"] == want, err
            assert err["type"] == "invalid_request_error", err
            assert err["param"] == param, (body, err)
            assert raw(server, "GET", "/v1/models")[0] == 200
        # Past the context (gpt2-tiny's 64 positions): the error says so, with the number.
        for body in ({"model": "gpt2", "prompt": "word " * 80},
                     {"model": "gpt2", "prompt": "x", "max_tokens": 100}):
            message = json.loads(raw(server, "POST", "/v1/completions", body)[2])["error"]["message"]
            assert "context" in message and "64" in message, (body, message)
        # n = 1, said outright, is served.
        status, _, data = raw(server, "POST", "/v1/completions",
                              {"model": "gpt2", "prompt": "x", "max_tokens": 2, "n": 1})
        assert status == 200 and len(json.loads(data)["choices"]) == 1, (status, data)
        for body in ({"model": "gpt2", "messages": "hi"}, {"model": "gpt2", "messages": []},
                     {"model": "gpt2", "messages": [{"content": "hi"}]},
                     {"model": "gpt2", "messages": [{"role": "user", "content": "hi"}]}):
            status, _, data = raw(server, "POST", "/v1/chat/completions", body)
            assert status == 400 and json.loads(data)["error"]["param"] == "messages", data
        status, headers, data = raw(server, "GET", "/v1/completions")
        assert status == 405 and headers["Allow"] == "POST", (status, headers)
        assert json.loads(data)["error"]["code"] == 405, data
        assert raw(server, "POST", "/v1/nothing", {})[0] == 404
        status, _, data = raw(server, "POST", "/v2/models/gpt2/generate", {"text_input": 3})
        assert status == 400 and "text_input" in json.loads(data)["error"], data
        # Chat's logprobs: a flag, top_logprobs 0 to 20 with it; the generate extension has none.
        chat = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}
        for extra, param in (({"logprobs": 2}, "logprobs"), ({"top_logprobs": 2}, "top_logprobs"),
                             ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                             ({"echo": True}, "echo")):
            status, _, data = raw(server, "POST", "/v1/chat/completions", {**chat, **extra})
            assert status == 400 and json.loads(data)["error"]["param"] == param, (extra, data)
        status, _, data = raw(server, "POST", "/v2/models/gpt2/generate",
                              {"text_input": "a", "parameters": {"logprobs": 2}})
        assert status == 400 and "logprobs" in json.loads(data)["error"], data
        status, _, data = raw(server, "POST", "/v2/models/gpt2/generate",
                              {"text_input": "a", "parameters": {"n": 2}})
        assert status == 400 and "'n'" in json.loads(data)["error"], data
        with_openai = None
        try:
            client.completions.create(model="nope", prompt="x")
        except openai.NotFoundError as e:
            with_openai = e
        assert with_openai is not None

    @case("a chat template it cannot render: the model is refused at load, naming the construct")
    def _():
        said = [line for line in server.stderr_lines() if "model 'badchat' not loaded" in line]
        assert len(said) == 1, server.stderr_lines()
        assert "the statement 'macro' is not supported" in said[0], said[0]
        assert "line 2" in said[0], said[0]
        status, _, data = raw(server, "POST", "/v1/chat/completions",
                              {"model": "badchat", "messages": [{"role": "user", "content": "hi"}]})
        err = json.loads(data)["error"]
        assert status == 404 and err["code"] == 404, (status, data)
        assert "badchat" in err["message"] and err["param"] == "model", err
        assert raw(server, "GET", "/v2/models/badchat/ready")[0] >= 400

    @case("a client gone mid-stream cancels its sequence and frees its blocks")
    def _():
        aborted = long_figures(server)[0]
        s = start_stream(server, "long", LONG - 8)
        s.recv(4096)  # a first event
        s.close()
        tokens = wait_aborted(server, aborted, 30)
        assert tokens < LONG - 8, tokens  # it stopped early
        assert raw(server, "GET", "/v1/models")[0] == 200
        # Two choices of one stream: both cancelled (each counts as aborted).
        aborted = long_figures(server, "wide")[0]
        s = start_stream(server, "wide", LONG - 8, n=2)
        s.recv(4096)
        s.close()
        tokens = wait_aborted(server, aborted, 30, "wide", 2)
        assert tokens < 2 * (LONG - 8), tokens

    def overflow(running, waiting):
        results = []
        lock = threading.Lock()

        def one():
            r = raw(server, "POST", "/v1/completions",
                    {"model": "long", "prompt": "a b c", "max_tokens": 5, "temperature": 0,
                     "ignore_eos": True})
            with lock:
                results.append(r)
        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r[0] for r in results] == [503] * 4, [r[0] for r in results]
        for status, headers, data in results:
            assert headers.get("Retry-After") == "1", (headers, data)
            assert json.loads(data)["error"]["code"] == 503, data
        running.close()  # the waiting one gets in and runs to its end
        body = b""
        while not body.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):  # the last chunk
            more = waiting.recv(65536)
            assert more, body[-300:]
            body += more
        status, _, data = raw(server, "POST", "/v1/completions",
                              {"model": "long", "prompt": "a", "max_tokens": 5})
        assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 5, data

    @case("past the running and waiting limits: 503 with Retry-After; a waiting stream has its head")
    def _():
        running = start_stream(server, "long", LONG - 8)  # holds the one running place,
        while b"data: " not in running.recv(4096):  # once its first token shows it admitted
            pass
        waiting = start_stream(server, "long", 8)  # its 200 came while it waits for room
        try:
            overflow(running, waiting)
        finally:
            running.close()
            waiting.close()

    @case("/metrics: latency histograms, token counters, the generators' figures")
    def _():
        text = raw(server, "GET", "/metrics")[2].decode()
        for name in ("cotensor_lm_time_to_first_token_seconds_count",
                     "cotensor_lm_inter_token_latency_seconds_count",
                     "cotensor_lm_e2e_request_latency_seconds_count",
                     "cotensor_lm_prompt_tokens_total", "cotensor_lm_generation_tokens_total",
                     "cotensor_lm_steps_total"):
            assert metric(text, name, {"model": "gpt2"}) > 0, name
        assert metric(text, "cotensor_lm_num_requests_waiting", {"model": "gpt2"}) == 0
        metric(text, "cotensor_lm_prefix_cache_hits_total", {"model": "gpt2"})


def run_slow_reader(server):
    @case("a reader that stops reading: its sequence pauses, the write timeout cancels it")
    def _():
        figures = long_figures(server)
        aborted, before = figures[0], figures[4]
        # A small receive window: what the client does not read waits in the server's send
        # buffer, which the listener holds to 64 KiB while it streams (Linux would let it grow
        # to megabytes, enough for the whole stream of ~200-byte events).
        s = start_stream(server, "long", LONG - 8, receive_buffer=4096)
        try:  # then nothing more is read
            made = wait_aborted(server, aborted, 120) - before
            # It paused once the buffers and its `max_unread` tokens were full, far short of
            # the stream's end, and the write that waited past 1.5 s ended it.
            assert 64 < made < (LONG - 8) // 2, made
        finally:
            s.close()
        status, _, data = raw(server, "POST", "/v1/completions",
                              {"model": "long", "prompt": "a", "max_tokens": 5})
        assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 5, data


def run_system_send_buffer(server):
    @case("--stream-send-buffer-bytes 0: the system's send buffer takes the whole stream")
    def _():
        figures = long_figures(server)
        aborted, before = figures[0], figures[4]
        s = start_stream(server, "long", LONG - 8, receive_buffer=4096)
        try:  # nothing read: Linux grows the send buffer to megabytes, past the stream's ~0.8 MB
            deadline = time.time() + 120
            while True:
                done, running, waiting, usage, tokens = long_figures(server)
                if running == 0 and waiting == 0 and usage == 0:
                    break
                assert time.time() < deadline, (done, running, waiting, usage, tokens)
                time.sleep(0.05)
            assert done == aborted and tokens - before == LONG - 8, (done, aborted, tokens - before)
        finally:
            s.close()


def drain(server):
    """SIGTERM with a stream in flight: the stream ends whole, then the server exits 0."""
    name = "SIGTERM drains: the stream in flight ends with [DONE], then exit 0"
    try:
        c = http.client.HTTPConnection(server.host, server.port, timeout=60)
        # Long enough to be in flight at the signal, short enough to end within the drain's
        # 30 s under the sanitizers.
        c.request("POST", "/v1/completions",
                  json.dumps({"model": "long", "prompt": "a", "max_tokens": DRAINED,
                              "stream": True, "ignore_eos": True,
                              "stream_options": {"include_usage": True}}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read()[:300])
        first = r.read1(16)
        server.proc.send_signal(15)
        body = first + r.read()
        got = events(body)
        assert got[-1] == "[DONE]", (len(got), body[-200:], server.stderr_lines())
        assert json.loads(got[-2])["usage"]["completion_tokens"] == DRAINED, got[-2]
        server.proc.wait(timeout=60)
        print(f"ok   {name}", flush=True)
    except Exception as e:  # noqa: BLE001
        FAILURES.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
