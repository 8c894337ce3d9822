#!/usr/bin/env python3
"""The layers' include rules, checked on every build (CMake target fuyou_layers).

Each source file belongs to a part (PARTS: the longest matching prefix); a part may include
its own headers and those of the parts its arrows reach (ARROWS, followed transitively), and
everyone may include the declared compiler-runtime interface, runtime/abi/. The picture is
docs/ARCHITECTURE.md's. An include that breaks it fails the build with one line per include,
naming the file, the header and the rule, unless KNOWN lists it (a debt being paid off, with
its reason); a KNOWN entry that no longer occurs fails too, so the list only shrinks.

    python3 scripts/check_layers.py SOURCE_DIR
"""
import os
import re
import sys

PARTS = {
    "Tools": ["compiler/tools/"],
    "Toolchain": ["compiler/toolchain/"],
    "Importer": ["compiler/importer/"],
    "Passes": ["passes/"],
    "Dialects": ["dialects/"],
    "Abi": ["runtime/abi/"],
    "Exec": ["runtime/exec/"],
    "Optim": ["runtime/optim/"],
    "Store": ["runtime/store/"],
    "Device": ["runtime/device/"],
    "Support": ["runtime/data/", "runtime/io/", "runtime/trace/"],
    "Kernels": ["runtime/kernels/"],
    "Core": ["runtime/core/"],
    "RuntimeTools": ["runtime/tools/"],
}
ARROWS = {
    "Tools": ["Importer", "Passes", "Toolchain"],
    "Toolchain": ["Importer"],
    "Importer": ["Dialects"],
    "Passes": ["Dialects"],
    "Exec": ["Device", "Optim", "Store", "Support"],
    "Device": ["Kernels"],
    "Kernels": ["Core"],
    "Optim": ["Core"],
    "Store": ["Core"],
    "Support": ["Core"],
    "RuntimeTools": ["Exec"],  # the calibration tools measure the runtime's own parts
    "Abi": ["Core"],  # the program's API speaks in the core's tensors
}
# (file, header): why it is allowed for now.
KNOWN = {}
ROOTS = ("runtime/", "compiler/", "passes/", "dialects/")


def part_of(path):
    best = None
    for name, prefixes in PARTS.items():
        for p in prefixes:
            if path == p or path.startswith(p):
                if best is None or len(p) > best[1]:
                    best = (name, len(p))
    return best[0] if best else None


def reach(part):
    seen, todo = set(), [part]
    while todo:
        for q in ARROWS.get(todo.pop(), []):
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return seen


def main(src):
    errors, used = [], set()
    for root in ROOTS:
        for dirpath, _, files in os.walk(os.path.join(src, root)):
            for f in sorted(files):
                if not f.endswith((".h", ".cpp", ".cu", ".cuh", ".inc")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), src)
                me = part_of(path)
                if me is None:
                    continue
                with open(os.path.join(src, path), errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                        if not m:
                            continue
                        inc = m.group(1)
                        # The runtime's headers are included from runtime/; the compiler's from the root.
                        target = inc if inc.startswith(ROOTS) else "runtime/" + inc
                        if not os.path.exists(os.path.join(src, target)):
                            target = os.path.normpath(os.path.join(os.path.dirname(path), inc))
                            if not os.path.exists(os.path.join(src, target)):
                                continue  # generated (build tree) or a system header in quotes
                        them = part_of(target)
                        if them in (None, me, "Abi") or them in reach(me):
                            continue
                        if (path, inc) in KNOWN:
                            used.add((path, inc))
                            continue
                        errors.append(f"{path}:{n}: {me} includes {inc} ({them}): not below it in the layers "
                                      f"(docs/ARCHITECTURE.md)")
    for k in sorted(set(KNOWN) - used):
        errors.append(f"{k[0]}: no longer includes {k[1]}: take it out of scripts/check_layers.py's KNOWN")
    for e in errors:
        print("check_layers: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
