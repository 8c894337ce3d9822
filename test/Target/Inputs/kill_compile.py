"""kill_compile.py FUYOU_COMPILE MODEL OUT: a compile to OUT killed with SIGKILL
while its C++ compiler runs. Prints how many of the build's processes are left
a second later, and how many of its temporaries (OUT.tmp*) are on disk."""
import glob
import os
import signal
import subprocess
import sys
import time

fc, model, out = sys.argv[1:4]


def holding(text, but=None):
    """Pids of processes whose command line names `text`."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != but:
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        pids.append(int(d))
            except OSError:
                pass  # gone meanwhile
    return pids


compile_ = subprocess.Popen([fc, model, "-o", out], stderr=subprocess.DEVNULL)
deadline = time.time() + 60
while time.time() < deadline:  # until the build works on this compile's temporary
    if holding(out + ".tmp", but=compile_.pid):
        break
    time.sleep(0.005)
else:
    sys.exit("kill_compile: the build never started")
compile_.send_signal(signal.SIGKILL)
compile_.wait()
time.sleep(1)
print(f"left running: {len(holding(out + '.tmp'))}")
print(f"temporaries: {len(glob.glob(out + '.tmp*'))}")
