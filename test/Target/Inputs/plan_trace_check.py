"""Checks fuyou-compile --plan-trace against the --emit=plan text of the
same plan: each stream's slices add up to its busy time, and the step's
slice is the predicted step. Prints one line per stream, then "ok"."""
import json
import re
import sys

trace, plan = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
events = trace["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
busy = {}
for e in events:
    if e["ph"] == "X":
        busy[names[e["tid"]]] = busy.get(names[e["tid"]], 0.0) + e["dur"] / 1000.0
step = re.search(r"predicted step: ([0-9.e+-]+) ms", plan).group(1)
if abs(busy.pop("predicted step") - float(step)) > 1e-3 * float(step):
    sys.exit(f"the step's slice is not the predicted {step} ms")
for stream, ms in re.findall(r"^  ([a-z-]+): busy ([0-9.e+-]+) ms", plan, re.M):
    got = busy.get("predicted " + stream, 0.0)
    if abs(got - float(ms)) > 1e-3 * max(float(ms), 1e-6):
        sys.exit(f"{stream}: the trace's slices add up to {got} ms, the plan says {ms}")
    print(f"{stream}: {ms} ms")
print("ok")
