"""two_runs.py PROGRAM TOKENS DIR: two runs with one --save DIR.

The first trains 20000 steps saving to DIR; once its first step is logged, a
second run with the same --save is started: it must fail at once (printed:
its exit status, whether it took under a second, its stderr). The first then
finishes; its losses are compared with the same run made alone into DIR.alone
(printed: "first run: bit-identical to running alone" or what differs). Then
the first's lock is left by a run killed with SIGKILL mid-run, and a new run
into DIR must not be held up by it (printed: "after a killed run: exit N").
"""
import json
import os
import signal
import subprocess
import sys
import time

prog, tokens, d = sys.argv[1:4]
steps = "20000"


def losses(path):
    return [json.loads(line)["loss"] for line in open(path)]


first = subprocess.Popen([prog, "--data", tokens, "--steps", steps, "--log-every", "1", "--save", d,
                          "--log-json", d + ".first.jsonl"], stderr=subprocess.PIPE, text=True)
first.stderr.readline()  # its first step: the directory is held
t0 = time.time()
second = subprocess.run([prog, "--data", tokens, "--steps", "5", "--save", d], capture_output=True, text=True,
                        timeout=60)
took = time.time() - t0
print(f"second run: exit {second.returncode}, {'under' if took < 1 else 'over'} a second")
print(second.stderr.strip())
first.stderr.read()
print(f"first run: exit {first.wait(timeout=600)}")
subprocess.run([prog, "--data", tokens, "--steps", steps, "--log-every", "100000", "--save", d + ".alone",
                "--log-json", d + ".alone.jsonl"], capture_output=True, check=True, timeout=600)
same = losses(d + ".first.jsonl") == losses(d + ".alone.jsonl")
print("first run: " + ("bit-identical to running alone" if same else "DIFFERS from running alone"))

killed = subprocess.Popen([prog, "--data", tokens, "--steps", steps, "--log-every", "1", "--save", d],
                          stderr=subprocess.PIPE, text=True)
killed.stderr.readline()
killed.send_signal(signal.SIGKILL)
killed.wait()
after = subprocess.run([prog, "--data", tokens, "--steps", "3", "--save", d], capture_output=True, text=True,
                       timeout=60)
print(f"after a killed run: exit {after.returncode}")
