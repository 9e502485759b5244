#!/usr/bin/env python3
"""Sends cotensor_server malformed and hostile Open Inference Protocol requests over raw HTTP
and checks that each gets a 4xx status with a JSON body {"error": "..."}, and that the server
still answers GET /v2/health/ready with 200 after each one.

    .venv/bin/python3 tests/server/bad_requests_test.py build/examples/cotensor_server

Statuses expected (KServe v2: a failed request is 400, an unknown model or version 404): 400,
404 for an unknown model or version, 413 also accepted for a body past the server's limit.
The model is the shipped example (examples/server/export_model.py): `mlp`, INPUT0 FP32 [-1, 16],
max_batch_size 8. One line per case. Exits 0 on success, 1 on a failure, 77 (skipped) when
torch or safetensors is missing.
"""
import argparse
import http.client
import json
import os
import select
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import serverproc  # noqa: E402

sys.path.insert(0, str(serverproc.EXAMPLES_SERVER))

try:
    import torch

    import export_model
except ImportError as e:  # no virtual environment: skipped, not passed
    print(f"SKIPPED: {e}")
    sys.exit(77)

INFER = "/v2/models/mlp/infer"
BAD = {400}
MISSING = {404}
TOO_BIG = {400, 413}


def request(host, port, method, path, body=b"", headers=None, timeout=30.0):
    """One request on a fresh connection: (status, headers, body).

    The body goes out in chunks while watching for an early answer, so that a server that
    replies 413 before reading a large body is heard rather than seen as a reset."""
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
            f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        view = memoryview(body)
        sent = 0
        while sent < len(body):
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break  # the server answered before taking the whole body
            try:
                sent += sock.send(view[sent:sent + 65536])
            except (BrokenPipeError, ConnectionResetError):
                break
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        data = response.read()
        return response.status, dict(response.getheaders()), data
    finally:
        # SO_LINGER 0: close at once, no TIME_WAIT pile-up over many cases.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


def infer_json(data=None, shape=(1, 16), datatype="FP32", name="INPUT0", **extra):
    tensor = {"name": name, "shape": list(shape), "datatype": datatype,
              "data": [0.5] * 16 if data is None else data}
    body = {"inputs": [tensor]}
    body.update(extra)
    return json.dumps(body).encode()


def infer_binary(declared, payload, shape=(1, 16), header_length=None):
    """A binary-extension request: JSON header + `payload`; the header declares `declared`
    bytes of data and its own length as `header_length` (default: the true one)."""
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": list(shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": declared}}]}).encode()
    length = len(header) if header_length is None else header_length
    return header + payload, {"Inference-Header-Content-Length": str(length)}


def cases():
    """(name, method, path, body, headers, allowed statuses)."""
    zeros = bytes(64)  # [1, 16] FP32
    garbage = os.urandom(10 * 1024 * 1024)
    body_past, headers_past = infer_binary(64, bytes(32))
    body_short, headers_short = infer_binary(60, bytes(60))
    body_neg, headers_neg = infer_binary(-1, zeros)
    body_len, _ = infer_binary(64, zeros)
    return [
        ("malformed JSON", "POST", INFER, b'{"inputs": [{"name": "INPUT0",', {}, BAD),
        ("JSON that is not an object", "POST", INFER, b"[1, 2, 3]", {}, BAD),
        ("empty body", "POST", INFER, b"", {}, BAD),
        ("no inputs (empty list)", "POST", INFER, b'{"inputs": []}', {}, BAD),
        ("no inputs (no field)", "POST", INFER, b'{"id": "x"}', {}, BAD),
        ("two inputs", "POST", INFER, json.dumps({"inputs": [json.loads(infer_json())["inputs"][0]] * 2}).encode(), {}, BAD),
        ("wrong input name", "POST", INFER, infer_json(name="INPUT1"), {}, BAD),
        ("wrong datatype (FP64 for FP32)", "POST", INFER, infer_json(datatype="FP64"), {}, BAD),
        ("wrong datatype (INT32 for FP32)", "POST", INFER,
         infer_json(datatype="INT32", data=[1] * 16), {}, BAD),
        ("unknown datatype", "POST", INFER, infer_json(datatype="FLOAT32"), {}, BAD),
        ("shape and JSON data disagree (15 values)", "POST", INFER,
         infer_json(data=[0.5] * 15), {}, BAD),
        ("shape and JSON data disagree (17 values)", "POST", INFER,
         infer_json(data=[0.5] * 17), {}, BAD),
        ("shape and binary_data_size disagree", "POST", INFER, body_short, headers_short, BAD),
        ("binary_data_size past the body", "POST", INFER, body_past, headers_past, BAD),
        ("binary_data_size negative", "POST", INFER, body_neg, headers_neg, BAD),
        ("Inference-Header-Content-Length past the body", "POST", INFER, body_len,
         {"Inference-Header-Content-Length": str(len(body_len) + 1000)}, BAD),
        ("Inference-Header-Content-Length not a number", "POST", INFER, body_len,
         {"Inference-Header-Content-Length": "abc"}, BAD),
        ("Inference-Header-Content-Length negative", "POST", INFER, body_len,
         {"Inference-Header-Content-Length": "-5"}, BAD),
        ("Inference-Header-Content-Length splits the JSON", "POST", INFER, body_len,
         {"Inference-Header-Content-Length": "10"}, BAD),
        ("unknown model (infer)", "POST", "/v2/models/no_such_model/infer", infer_json(), {},
         MISSING),
        ("unknown model (metadata)", "GET", "/v2/models/no_such_model", b"", {}, MISSING),
        ("unknown version (infer)", "POST", "/v2/models/mlp/versions/9/infer", infer_json(), {},
         MISSING),
        ("unknown version (metadata)", "GET", "/v2/models/mlp/versions/9", b"", {}, MISSING),
        ("version not a number", "POST", "/v2/models/mlp/versions/abc/infer", infer_json(), {},
         {400, 404}),
        ("huge dims [1, 2**40]", "POST", INFER, infer_json(shape=(1, 2**40)), {}, TOO_BIG),
        ("dims whose product overflows [2**32, 2**32]", "POST", INFER,
         infer_json(shape=(2**32, 2**32)), {}, TOO_BIG),
        ("dims past int64 [1, 2**70]", "POST", INFER, infer_json(shape=(1, 2**70)), {}, BAD),
        ("negative dims [1, -16]", "POST", INFER, infer_json(shape=(1, -16)), {}, BAD),
        ("negative dims [-1, 16]", "POST", INFER, infer_json(shape=(-1, 16)), {}, BAD),
        ("fractional dims [1, 16.5]", "POST", INFER, infer_json(shape=(1, 16.5)), {}, BAD),
        ("huge batch [2**40, 16]", "POST", INFER, infer_json(shape=(2**40, 16)), {}, TOO_BIG),
        ("wrong rank [16]", "POST", INFER, infer_json(shape=(16,)), {}, BAD),
        ("wrong feature dim [1, 15]", "POST", INFER,
         infer_json(shape=(1, 15), data=[0.5] * 15), {}, BAD),
        ("batch past max_batch_size [9, 16]", "POST", INFER,
         infer_json(shape=(9, 16), data=[0.5] * 144), {}, BAD),
        ("strings for FP32", "POST", INFER, infer_json(data=["1.5"] * 16), {}, BAD),
        ("objects for FP32", "POST", INFER, infer_json(data=[{"x": 1}] * 16), {}, BAD),
        ("null data", "POST", INFER,
         json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                 "data": None}]}).encode(), {}, BAD),
        ("no data and no binary_data_size", "POST", INFER,
         json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16],
                                 "datatype": "FP32"}]}).encode(), {}, BAD),
        ("unknown output requested", "POST", INFER,
         infer_json(outputs=[{"name": "NO_SUCH_OUTPUT"}]), {}, BAD),
        ("10 MB of random garbage", "POST", INFER, garbage, {}, TOO_BIG),
        ("10 MB of garbage after a binary header", "POST", INFER, body_len + garbage,
         {"Inference-Header-Content-Length": str(len(body_len) - 64)}, TOO_BIG),
    ]


def run(server):
    host, port = server.host, server.port
    failures = []

    def ready():
        status, _, body = request(host, port, "GET", "/v2/health/ready")
        return status == 200, f"GET /v2/health/ready: {status} {body[:200]!r}"

    # The well-formed versions of the requests succeed, so the refusals below are meaningful.
    good_binary, good_headers = infer_binary(64, bytes(64))
    for what, body, headers in (("JSON", infer_json(), {}),
                                ("binary", good_binary, good_headers)):
        status, _, data = request(host, port, "POST", INFER, body, headers)
        if status != 200:
            failures.append(f"well-formed {what} request: {status} {data[:300]!r}")
        print(f"{'ok  ' if status == 200 else 'FAIL'} well-formed {what} request -> {status}")

    for name, method, path, body, headers, allowed in cases():
        problems = []
        try:
            status, _, data = request(host, port, method, path, body, headers)
        except (OSError, http.client.HTTPException) as e:
            status, data = None, b""
            problems.append(f"no response ({type(e).__name__}: {e})")
        if status is not None and status not in allowed:
            problems.append(f"status {status}, want {' or '.join(map(str, sorted(allowed)))}")
        if status is not None:
            try:
                parsed = json.loads(data)
                if not (isinstance(parsed, dict) and isinstance(parsed.get("error"), str)
                        and parsed["error"]):
                    problems.append(f"body is not {{\"error\": \"...\"}}: {data[:200]!r}")
            except ValueError:
                problems.append(f"body is not JSON: {data[:200]!r}")
        try:
            ok, why = ready()
            if not ok:
                problems.append(f"afterwards {why}")
        except (OSError, http.client.HTTPException) as e:
            problems.append(f"afterwards GET /v2/health/ready failed: {e}")
        error = ""
        if status is not None and not problems:
            error = json.loads(data)["error"]
        print(f"{'ok  ' if not problems else 'FAIL'} {name} -> {status}"
              + (f" {error[:100]!r}" if error else "")
              + ("".join(f"\n       {p}" for p in problems)))
        if problems:
            failures.append(f"{name}: {'; '.join(problems)}")
        if server.proc.poll() is not None:
            failures.append(f"the server exited ({server.proc.returncode}) after '{name}'")
            break
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("server", help="the cotensor_server binary")
    parser.add_argument("--verbose", action="store_true", help="echo the server's output")
    args = parser.parse_args()
    serverproc.check_binary(args.server)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cotensor_models_") as tmp:
        export_model.export(export_model.example_model(), Path(tmp), "mlp", [16], torch.float32)
        server = serverproc.ServerProcess(args.server, tmp, echo=args.verbose)
        try:
            server.start()
            print(f"server listening on {server.url}")
            failures = run(server)
            if server.proc.poll() is None:
                rc = server.terminate()
                if rc != 0:
                    failures.append(f"the server exited with {rc} after SIGTERM, want 0")
        except serverproc.ServerError as e:
            failures = [str(e)]
        finally:
            server.kill()
    if failures:
        print(f"FAIL: {len(failures)} case(s):\n  " + "\n  ".join(failures), file=sys.stderr)
        tail = server.stderr_lines()[-20:]
        if tail:
            print("server stderr (last lines):\n  " + "\n  ".join(tail), file=sys.stderr)
        return 1
    print(f"PASS ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
