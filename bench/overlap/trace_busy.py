"""Busy time per stream, step by step, from a training program's --trace file.

A track's busy time in a window is the union of its slices inside the window,
less the union of its waits (slices whose name contains "wait": a compute
thread blocked on a group's update or a gradient slot, the optimizer blocked
on a read or on gradients). The "ssd" track holds the stores' busy periods
(at least one I/O in flight), so its union is the time the SSD was working.
The "steps" track gives the windows.

  python3 trace_busy.py TRACE [--warmup 3]
"""
import argparse
import json
import statistics


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def clip(intervals, lo, hi):
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def length(intervals):
    return sum(e - s for s, e in intervals)


def busy_us(work, waits, lo, hi):
    """Length of (union of work) minus (union of waits), inside [lo, hi)."""
    w = union(clip(work, lo, hi))
    total = length(w)
    for s, e in union(clip(waits, lo, hi)):  # subtract each wait's overlap with the work
        total -= sum(max(0.0, min(e, we) - max(s, ws)) for ws, we in w)
    return total


def load(path):
    events = json.load(open(path))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    tracks = {}
    for e in events:
        if e["ph"] != "X":
            continue
        t = tracks.setdefault(names[e["tid"]], {"work": [], "waits": []})
        span = (e["ts"], e["ts"] + e["dur"])
        t["waits" if "wait" in e["name"] else "work"].append(span)
    return tracks


def per_step(path, warmup):
    """[{step_ms, busy_ms: {track: ms}}] for the steps after `warmup`."""
    tracks = load(path)
    steps = sorted(tracks.pop("steps")["work"])
    rows = []
    for lo, hi in steps[warmup:]:
        busy = {name: busy_us(t["work"], t["waits"], lo, hi) / 1000 for name, t in tracks.items()}
        rows.append({"step_ms": (hi - lo) / 1000, "busy_ms": busy})
    return rows


def summary(rows):
    """Median step, median busy per track, and the overlap ratio step / max(busy) (medians)."""
    step = statistics.median(r["step_ms"] for r in rows)
    names = sorted({n for r in rows for n in r["busy_ms"]})
    busy = {n: statistics.median(r["busy_ms"].get(n, 0.0) for r in rows) for n in names}
    top = max(busy, key=busy.get)
    return {"step_ms": step, "busy_ms": busy, "largest": top, "ratio": step / busy[top]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    s = summary(per_step(a.trace, a.warmup))
    print(f"step {s['step_ms']:.1f} ms; busy " + ", ".join(f"{n} {v:.1f}" for n, v in s["busy_ms"].items()) +
          f"; step / {s['largest']} = {s['ratio']:.3f}")


if __name__ == "__main__":
    main()
