"""kill_mid_save.py PROGRAM TOKENS DIR KILLS: runs killed while they save, then one that completes.

Each run saves to DIR every step (resuming DIR's checkpoint once there is one)
and is killed with SIGKILL as soon as the temporary of its K-th checkpoint
file appears in DIR (K from 1 to 4, drawn with a fixed seed), so it dies
mid-save. A kill that came after the save had finished (no
temporary left behind) is not counted; runs go on until KILLS runs have died
leaving one. Then a run resumes DIR and trains 3 more steps to completion.
Printed: how many runs were killed mid-save, the temporaries they left, the
last run's exit status and whether it resumed, and what DIR holds afterwards
that is a temporary (nothing, when the debris was cleared).
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

prog, tokens, d, kills = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def temporaries():
    try:
        return sorted(n for n in os.listdir(d) if ".tmp." in n)
    except FileNotFoundError:
        return []


def resume():
    return ["--resume", d] if os.path.exists(os.path.join(d, "manifest.json")) else []


def saved_step():
    try:
        return json.load(open(os.path.join(d, "manifest.json")))["step"]
    except FileNotFoundError:
        return 0


rng = random.Random(7)
left, tries = [], 0
while len(left) < kills and tries < 200:
    tries += 1
    run = subprocess.Popen([prog, "--data", tokens, "--steps", "1000000", "--save", d, "--save-every", "1",
                            "--log-every", "1000000"] + resume(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    before = set(temporaries())  # a dead writer's, which this run clears at its start
    k, seen = rng.randint(1, 4), set()
    deadline = time.time() + 30
    while run.poll() is None and time.time() < deadline:
        seen |= set(temporaries()) - before
        if len(seen) >= k:
            run.send_signal(signal.SIGKILL)
            break
    else:
        run.kill()
    run.wait()
    mine = sorted(set(temporaries()) - before)
    if run.returncode == -signal.SIGKILL and mine:
        left.append(mine)
print(f"killed mid-save: {len(left)} runs, in {tries} tries")
print("left behind: " + " ".join(sorted({n.split(".tmp.")[0] + ".tmp.PID" for m in left for n in m})))
start = saved_step()
done = subprocess.run([prog, "--data", tokens, "--steps", str(start + 3), "--save", d, "--log-every", "1"] + resume(),
                      capture_output=True, text=True, timeout=600)
first = next((line.split()[1] for line in done.stderr.splitlines() if line.startswith("step ")), "none")
print(f"the run after: exit {done.returncode}, " +
      (f"resumed at the step after the last checkpoint" if start and first == f"{start + 1}/{start + 3}"
       else f"first step {first}, the checkpoint's {start}"))
print("temporaries in the directory: " + (" ".join(temporaries()) or "none"))
