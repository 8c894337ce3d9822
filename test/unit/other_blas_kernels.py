"""other_blas_kernels.py TESTS: the runtime's tests that go through OpenBLAS, with the
kernels other x86-64 CPUs get.

OpenBLAS picks its kernels by CPU (Debian's is built for every x86-64 and chooses at
start-up): an AMD Zen 5 gets Haswell's, a Skylake-X server SkylakeX's, a Zen 4
Cooperlake's. What the tests check (one program's placements, resumes and thread counts
give the same bits; products match a double reference within the float bound) must hold
whichever is chosen. OPENBLAS_CORETYPE forces a choice; each one this CPU can run is
tried, so `make test` on one machine covers the kernels of the others.
"""
import os
import subprocess
import sys

tests = sys.argv[1]
flags = set()
for line in open("/proc/cpuinfo"):
    if line.startswith("flags"):
        flags = set(line.split(":", 1)[1].split())
        break

# (core type, the instruction sets its kernels use)
CORES = [("Sandybridge", {"avx"}), ("Haswell", {"avx2", "fma"}), ("Zen", {"avx2", "fma"}),
         ("SkylakeX", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
         ("Cooperlake", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"})]
FILTER = "Matmul.*:Determinism.*:Grad.*:Exec.*:ExecRuntime.*:Attention.*:LinearCrossEntropy.*"

ran, failed = [], []
for core, needs in CORES:
    if not needs <= flags:
        continue
    r = subprocess.run([tests, "--gtest_filter=" + FILTER, "--gtest_brief=1"],
                       env=dict(os.environ, OPENBLAS_CORETYPE=core, OPENBLAS_VERBOSE="2"),
                       capture_output=True, text=True)
    used = next((l.split(":", 1)[1].strip() for l in r.stdout.splitlines() + r.stderr.splitlines()
                 if l.startswith("Core:")), "?")
    ran.append(f"{core} (OpenBLAS core: {used})")
    if r.returncode != 0 or used != core:
        failed.append(core)
        sys.stdout.write(r.stdout[-3000:] + r.stderr[-2000:])
print("other BLAS kernels: ran " + ", ".join(ran))
if not ran:
    sys.exit("other BLAS kernels: this CPU has no AVX: no kernel tried")
if failed:
    sys.exit("other BLAS kernels: FAILED with " + ", ".join(failed))
