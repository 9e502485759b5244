#!/usr/bin/env python3
"""Loads cotensor traces into Chromium's own trace viewer and reports what the viewer made of them.

Run by hand (it needs a browser, so no test runs it), in the project's Python environment
(bash bench/peers/setup.sh; bench/README.md), which has websocket-client. On Debian:
    apt-get install -y chromium
    COTENSOR_TRACE=t1.json build/examples/01_backend_asynchrony
    .venv/bin/python3 bench/trace/check_viewer.py t1.json [more.json ...] [--chromium PATH]

It starts Chromium headless with a DevTools port and drives it over the DevTools protocol. Debian's
Chromium 156 no longer ships chrome://tracing (catapult's viewer), so it uses the viewer that
remains, the DevTools Performance panel: it opens devtools://devtools/bundled/trace_app.html and
parses each trace with the panel's own trace engine (models/trace:
`TraceModel.Model.createWithAllHandlers().parse(events)`), reading back the threads the panel
would draw (`Handlers.Threads.threadsInTrace`), their slices, the slices its tree builder kept,
and the flows it bound (`Flows.flows`). As import warnings it counts: exceptions and console
errors during the parse, slices left out of a thread's tree (a slice partially overlapping
another), and flows that did not bind to two slices.
Then, for every trace, it applies the rules of Perfetto's JSON importer as read from its source
(src/trace_processor/importers/json, sorter/trace_sorter.h, importers/common/slice_tracker.cc and
flow_tracker.cc): no displayTimeUnit, no tid 0, complete slices nest, each flow event finds its
slice on top of its thread's stack. This is a model, not Perfetto; the Perfetto UI is not run.

Prints a summary per trace; exits 1 if a viewer reports an import warning, or a trace has no
worker thread or no flow, or the Perfetto rules are broken; 2 if the viewer could not be loaded.
"""
import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from decimal import Decimal

try:
    import websocket  # Debian: python3-websocket
except ImportError:
    sys.exit("check_viewer.py needs python3-websocket: apt-get install python3-websocket")

CHUNK = 4 << 20  # characters of trace text per DevTools message

DEVTOOLS_IMPORT = r"""
(async () => {
  const text = window.__trace.join(''); window.__trace = [];
  const T = await import('./models/trace/trace.js');
  const model = T.TraceModel.Model.createWithAllHandlers();
  const errors = [];
  const saved = [console.error, console.warn];
  console.error = (...a) => errors.push('console.error: ' + a.join(' '));
  console.warn = (...a) => errors.push('console.warn: ' + a.join(' '));
  try { await model.parse(JSON.parse(text).traceEvents, {metadata: {}, isFreshRecording: false}); }
  catch (e) { errors.push('exception: ' + e); }
  finally { [console.error, console.warn] = saved; }
  const parsed = model.parsedTrace(model.size() - 1);
  if (!parsed) return JSON.stringify({threads: [], flows: {}, errors, other: []});
  const data = parsed.data;
  const inTree = data.Renderer.entryToNode;
  const threads = T.Handlers.Threads.threadsInTrace(data).map(t => ({
    pid: t.pid, process: data.Meta.processNames.get(t.pid)?.args?.name || '', tid: t.tid,
    name: t.name || '', slices: t.entries.length,
    kept: t.entries.filter(e => inTree.has(e)).length}));
  const flows = {};
  for (const flow of data.Flows.flows) {
    const kind = flow[0].name.startsWith('enqueue ') ? 'enqueue' : 'dependency';
    flows[kind] = (flows[kind] || 0) + 1;
  }
  // The panel's own warnings are about the traced program (long tasks...), not the import.
  const other = [...(data.Warnings.perWarning || new Map()).keys()];
  return JSON.stringify({threads, flows, errors, other});
})()
"""


class Browser:
    """Chromium headless, spoken to over the DevTools protocol."""

    def __init__(self, binary):
        self.profile = tempfile.mkdtemp(prefix="check_viewer_")
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.1)
        else:
            self.close()
            raise RuntimeError(f"{binary} did not open a DevTools port")
        port = open(port_file).read().split()[0]
        base = f"http://127.0.0.1:{port}"
        self.version = json.load(urllib.request.urlopen(base + "/json/version"))["Browser"]
        page = next(t for t in json.load(urllib.request.urlopen(base + "/json/list"))
                    if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=600,
                                              suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise RuntimeError(details.get("exception", {}).get("description") or details["text"])
        return result["result"].get("value")

    def open(self, url, settle=3.0):
        self.call("Page.navigate", url=url)
        time.sleep(settle)
        return self.evaluate("location.href")

    def send_text(self, text):
        self.evaluate("window.__trace = []")
        for i in range(0, len(text), CHUNK):
            self.evaluate(f"window.__trace.push({json.dumps(text[i:i + CHUNK])})")

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.profile, ignore_errors=True)


def open_viewer(browser):
    """Opens the DevTools frontend, whose trace engine check() runs."""
    href = browser.open("devtools://devtools/bundled/trace_app.html")
    if not href.startswith("devtools://"):
        raise RuntimeError(f"the DevTools frontend did not load (ended at {href})")


def ns(value):
    """Trace-event microseconds to integer nanoseconds, as Perfetto's tokenizer parses them."""
    return int(Decimal(str(value)) * 1000)


def perfetto_rules(doc):
    """Problems Perfetto's JSON importer would have with this trace (see the module doc)."""
    problems = collections.Counter()
    if "displayTimeUnit" in doc:
        problems["displayTimeUnit set (older trace processors then read ts as ns)"] += 1
    events = doc["traceEvents"]
    if any(e.get("tid") == 0 for e in events):
        problems["tid 0 (Perfetto's idle thread)"] += 1
    # The sorter: by ts; at one ts, events with a duration first, longest first; then file order.
    timed = []
    for i, e in enumerate(events):
        if "ts" in e:
            dur = ns(e["dur"]) if "dur" in e else None
            timed.append(((ns(e["ts"]), -dur if dur is not None else 1, i), e, dur))
    timed.sort(key=lambda item: item[0])
    stacks = collections.defaultdict(list)  # (pid, tid) -> [(start, dur)]
    open_flows = set()
    for (ts, _, _), e, dur in timed:
        stack = stacks[(e.get("pid"), e.get("tid"))]
        if e["ph"] == "X":
            while stack and (stack[-1][0] + stack[-1][1] < ts or (
                    stack[-1][0] + stack[-1][1] == ts and not (stack[-1][1] == 0 and dur == 0))):
                stack.pop()
            if any(ts < s + d < ts + dur for s, d in stack):
                problems["slice_drop_overlapping_complete_event"] += 1
                continue
            stack.append((ts, dur))
        elif e["ph"] in ("s", "f"):
            key = (e.get("id"), e.get("cat"), e.get("name"))
            if not stack:
                problems["flow_no_enclosing_slice"] += 1
            elif not stack[-1][0] <= ts <= stack[-1][0] + stack[-1][1]:
                problems["flow bound to a slice that ended before it (stale stack top)"] += 1
            if e["ph"] == "s":
                if key in open_flows:
                    problems["flow_duplicate_id"] += 1
                open_flows.add(key)
            else:
                if e.get("bp") != "e":
                    problems["flow end without \"bp\":\"e\" (binds the next slice)"] += 1
                if key not in open_flows:
                    problems["flow_end_without_start"] += 1
    return problems


def check(browser, path):
    text = open(path).read()
    doc = json.loads(text)
    events = doc["traceEvents"]
    in_file = collections.Counter(e["ph"] for e in events)
    browser.send_text(text)
    result = json.loads(browser.evaluate(DEVTOOLS_IMPORT))
    threads = result["threads"]
    flows = sum(result["flows"].values())
    issues = list(result["errors"])
    print(f"{path}: {len(events)} events in the file: {in_file['X']} slices, "
          f"{in_file['s']} flows, {in_file['b']} async slices")
    for t in sorted(threads, key=lambda t: (t["pid"], t["tid"])):
        kept = "" if t["kept"] == t["slices"] else f" ({t['slices'] - t['kept']} left out)"
        print(f"  pid {t['pid']} {t['process']!r} tid {t['tid']} {t['name']!r}: "
              f"{t['slices']} slices{kept}")
        if t["kept"] != t["slices"]:
            issues.append(f"{t['name']}: {t['slices'] - t['kept']} slices left out of the tree")
    print(f"  flows drawn: {flows} of {in_file['s']}"
          + "".join(f"; {n}: {c}" for n, c in sorted(result["flows"].items())))
    if flows < in_file["s"]:
        issues.append(f"{in_file['s'] - flows} flows did not bind to two slices")
    if result["other"]:
        print("  the viewer's warnings about the program (not the import): "
              + ", ".join(result["other"]))
    for issue in issues:
        print(f"  IMPORT WARNING: {issue}")
    failed = bool(issues)
    if not any(t["name"].startswith("worker") for t in threads):
        print("  FAIL: no worker thread")
        failed = True
    if flows == 0:
        print("  FAIL: no flow events")
        failed = True
    rules = perfetto_rules(doc)
    print("  Perfetto importer rules: " + (", ".join(f"{k}: {v}" for k, v in rules.items())
                                            if rules else "ok"))
    return failed or bool(rules)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = ap.parse_args()
    try:
        browser = Browser(args.chromium)
    except (OSError, RuntimeError) as e:
        print(f"cannot start {args.chromium}: {e}")
        return 2
    try:
        try:
            open_viewer(browser)
        except (RuntimeError, websocket.WebSocketException) as e:
            print(f"{browser.version}: the trace viewer could not be loaded: {e}")
            return 2
        print(f"viewer: DevTools Performance panel trace engine (models/trace), {browser.version}")
        failed = False
        for path in args.traces:
            failed = check(browser, path) or failed
        print("FAILED" if failed else "OK")
        return 1 if failed else 0
    finally:
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
