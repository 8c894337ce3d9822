"""Starts `fuyou-compile MODEL -o OUT`, sends SIGNAL to the compile's own pid
(not to its process group, as a scheduler does) once its C++ build is
running, and prints what is left: the compile's exit, whether any process
is still building its temporaries, and the files beside OUT."""
import os
import signal
import subprocess
import sys
import time

model, out, sig = sys.argv[1], sys.argv[2], getattr(signal, "SIG" + sys.argv[3])


def building(tmp):
    """Processes whose command line names the compile's temporary program."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if tmp.encode() in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


compile_ = subprocess.Popen(["fuyou-compile", model, "-o", out], stderr=subprocess.DEVNULL)
tmp = f"{out}.tmp{compile_.pid}"
deadline = time.time() + 60
while not building(tmp):
    if compile_.poll() is not None or time.time() > deadline:
        sys.exit("the build never started")
    time.sleep(0.01)
os.kill(compile_.pid, sig)
rc = compile_.wait(timeout=60)
print("exit", f"by {signal.Signals(-rc).name}" if rc < 0 else rc)
time.sleep(0.5)
if building(tmp):
    print("a build is still running")
for name in sorted(os.listdir(os.path.dirname(out) or ".")):
    print("left", name)
