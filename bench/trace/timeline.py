#!/usr/bin/env python3
"""Draws a cotensor trace (Chrome trace-event JSON, from COTENSOR_TRACE=path.json or
cotensor::trace::save) as a timeline picture: one row per thread (frontend threads first, then
backend workers), a bar per op or wait, and a thin line from each op's enqueue on the frontend to
its start on a worker, as in the figures of the d2l.ai chapter "Asynchronous Computation".

Needs matplotlib: the project's Python environment has it (bash bench/peers/setup.sh). Usage:
    .venv/bin/python3 bench/trace/timeline.py trace.json timeline.png [--title TEXT] [--links N]
The output format follows the file name (.png, .svg, .pdf).
The project's Python environment has matplotlib (bash bench/peers/setup.sh; bench/README.md):
    .venv/bin/python3 bench/trace/timeline.py trace.json timeline.png
"""
import argparse
import json
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("timeline.py needs matplotlib: run it with .venv/bin/python3 (bash bench/peers/setup.sh)")

COLOURS = {"enqueue": "#4c72b0", "op": "#dd8452", "wait": "#8c8c8c"}


def kind(event):
    """enqueue, op or wait: the bar colour of a slice."""
    if event.get("cat") == "op" and event["name"].startswith("enqueue "):
        return "enqueue"  # enqueue slices share the category "op" with the op they issue
    return event.get("cat")


def load(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    slices = [dict(e, kind=kind(e)) for e in events if e.get("ph") == "X"]
    # Waits that leave their thread free (async_wait) are async slices: a "b" and an "e" event
    # with one id. Draw them on the row of the thread that began them.
    begins = {}
    for e in events:
        key = (e.get("cat"), e.get("name"), e.get("id"))
        if e.get("ph") == "b":
            begins[key] = e
        elif e.get("ph") == "e" and key in begins:
            b = begins.pop(key)
            slices.append(dict(b, ph="X", dur=e["ts"] - b["ts"], kind=kind(b)))
    return names, slices


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("output")
    ap.add_argument("--title", default="")
    ap.add_argument("--links", type=int, default=60,
                    help="draw enqueue-to-start lines for at most this many ops (0: none)")
    args = ap.parse_args()

    names, slices = load(args.trace)
    if not slices:
        sys.exit(f"{args.trace}: no slices to draw")
    order = sorted(names, key=lambda t: (not names[t].startswith("frontend"), names[t]))
    row = {tid: i for i, tid in enumerate(order)}
    t0 = min(s["ts"] for s in slices)

    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.55 * len(order)))
    for cat, colour in COLOURS.items():
        rows = {}
        for s in slices:
            if s["kind"] == cat:
                rows.setdefault(row[s["tid"]], []).append(
                    ((s["ts"] - t0) / 1000.0, max(s["dur"], 0.5) / 1000.0))
        for r, spans in rows.items():
            ax.broken_barh(spans, (r - 0.35, 0.7), facecolors=colour, edgecolor="none",
                           label=cat if r == min(rows) else None)

    starts = {}
    for s in slices:
        if s["kind"] == "op":
            starts[s["args"]["op"]] = s
    links = 0
    for s in slices:
        if s["kind"] != "enqueue" or links >= args.links:
            continue
        op = starts.get(s["args"]["op"])
        if op is None:
            continue
        links += 1
        ax.plot([(s["ts"] + s["dur"] - t0) / 1000.0, (op["ts"] - t0) / 1000.0],
                [row[s["tid"]] + 0.35, row[op["tid"]] - 0.35],
                color="#55a868", linewidth=0.6, alpha=0.7)

    ax.set_yticks(range(len(order)), [names[t] for t in order])
    ax.invert_yaxis()
    ax.set_xlabel("time since the first event (ms)")
    ax.set_title(args.title or args.trace)
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"{args.output}: {len(slices)} slices on {len(order)} threads")


if __name__ == "__main__":
    main()
