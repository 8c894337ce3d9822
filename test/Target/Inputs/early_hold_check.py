"""For train.test's held hand-over: around the last step's "early rows out"
span of each trace, the launches before and after it; and whether the two
runs' losses are the same. Usage: HOLD.jsonl HOLD.json NOHOLD.jsonl NOHOLD.json"""
import json
import sys


def around(trace):
    events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = sorted((e for e in events if e.get("ph") == "X"), key=lambda e: e["ts"])
    # The program's own track: the one the hand-over is on.
    track = next(e["tid"] for e in spans if e["name"].startswith("early rows out"))
    names = [e["name"].split(",")[0] for e in spans if e["tid"] == track and not e["name"].startswith("wait for")]
    k = max(i for i, n in enumerate(names) if n == "early rows out")
    return names[k - 2:k + 2]


def losses(log):
    return [json.loads(line)["loss"] for line in open(log)]


hold_log, hold_trace, no_log, no_trace = sys.argv[1:5]
print("held:", ", ".join(around(hold_trace)))
print("not held:", ", ".join(around(no_trace)))
print("losses", "identical" if losses(hold_log) == losses(no_log) else "DIFFER")
