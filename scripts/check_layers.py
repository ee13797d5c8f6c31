#!/usr/bin/env python3
"""Checks that the library's includes follow its layers (docs/design.md, "Layers").

    scripts/check_layers.py [repo-root]

Every source and header under src/, algorithms/ and transports/ belongs to a component (by its
folder). Each component may include only the components listed for it below; an include of
anything else is an arrow running back up the layers and fails the check, naming the file, the
line and the rule. Two rules the layers imply are spelled out because they are the ones that
matter most:
  - src/base (the leaf utilities) includes nothing of chorus but itself;
  - nothing outside a transport's own folder includes that folder (the core reaches transports
    only through transports/transport.h and the registry).
It also reports cycles between folders (each algorithm family counts as a folder), which the
table rules out but a wrong table could let through. Exit status 0 when clean, 1 otherwise.
Tools, tests, benchmarks and fuzzers sit above everything and are not checked.
"""
import os
import re
import sys

# Components, lowest first, and what each may include (besides itself and the public headers).
ALLOWED = {
    "base": set(),
    "cost": {"base"},
    "topology": {"base"},
    "kernels": {"base"},
    "bootstrap": {"base"},
    "algorithms/common": {"base", "cost", "kernels"},
    "transport-contract": {"base", "cost"},
    "transport": {"base", "cost", "transport-contract"},
    "algorithms": {"base", "cost", "kernels", "algorithms/common"},
    "exec": {"base", "cost", "kernels", "algorithms/common", "algorithms", "transport-contract"},
    "tuning": {"base", "cost", "topology", "algorithms/common", "algorithms"},
    "core": {"base", "cost", "topology", "kernels", "bootstrap", "algorithms/common",
             "algorithms", "transport-contract", "exec", "tuning"},
    "api": {"base", "cost", "topology", "kernels", "bootstrap", "algorithms/common",
            "algorithms", "transport-contract", "exec", "tuning", "core"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def component(path):
    """(component, folder) of a repository-relative path, or (None, None) outside the library."""
    parts = path.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1], "src/" + parts[1]
    if parts[0] == "algorithms":
        if len(parts) == 2:  # algorithms/registry.{h,cc}
            return "algorithms", "algorithms"
        if parts[1] == "kernels":
            return "kernels", "algorithms/kernels"
        if parts[1] == "common":
            return "algorithms/common", "algorithms/common"
        return "algorithms", "algorithms/" + parts[1]
    if parts[0] == "transports":
        if len(parts) == 2:
            return "transport-contract", "transports"
        return "transport", "transports/" + parts[1]
    if parts[0] == "include":
        return "public", "include"
    return None, None


def sources(root):
    for top in ("src", "algorithms", "transports"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".h", ".cc", ".cu", ".hpp")):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def self_test():
    """The check must fail on each kind of arrow that runs back up, and pass a clean tree."""
    import tempfile

    def tree(files):
        d = tempfile.mkdtemp(prefix="check_layers.")
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
            with open(os.path.join(d, path), "w") as fh:
                fh.write(text)
        return d

    base = {"src/base/status.h": "", "src/core/comm.h": '#include "src/base/status.h"\n',
            "transports/transport.h": '#include "src/base/status.h"\n',
            "transports/tcp/tcp.h": '#include "transports/transport.h"\n'}
    bad = {
        "leaf utility includes the core": {"src/base/status.h": '#include "src/core/comm.h"\n'},
        "core includes a transport's folder": {"src/core/comm.h": '#include "transports/tcp/tcp.h"\n'},
        "contract includes the core": {"transports/transport.h": '#include "src/core/comm.h"\n'},
    }
    failures = 0
    if run(tree(base), quiet=True) != 0:
        print("self-test: a clean tree fails the check")
        failures += 1
    for what, change in bad.items():
        if run(tree({**base, **change}), quiet=True) == 0:
            print("self-test: not caught: " + what)
            failures += 1
    print(f"check_layers self-test: {len(bad) + 1 - failures} of {len(bad) + 1} cases right")
    return 1 if failures else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    return run(os.path.abspath(root))


def run(root, quiet=False):
    errors = []
    folders = {}  # folder -> folders it includes
    checked = 0
    for path in sorted(sources(root)):
        comp, folder = component(path)
        if comp is None or comp not in ALLOWED:
            errors.append(f"{path}: not in any layer (add its folder to scripts/check_layers.py)")
            continue
        checked += 1
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                if target.startswith("chorus/"):
                    target = "include/" + target
                if not os.path.exists(os.path.join(root, target)):
                    continue  # a system or generated header in quotes
                tcomp, tfolder = component(target)
                if tcomp is None:
                    errors.append(f"{path}:{lineno}: includes {target}, which is outside the library")
                    continue
                if tfolder != folder:
                    folders.setdefault(folder, set()).add(tfolder)
                if tcomp == "public":
                    continue
                if tcomp == "transport" and tfolder != folder:
                    errors.append(f"{path}:{lineno}: includes {target}: only {tfolder}/ itself may "
                                  "include a transport's folder (use transports/transport.h)")
                    continue
                if comp == "base" and tcomp != "base":
                    errors.append(f"{path}:{lineno}: includes {target}: src/base includes nothing above it")
                    continue
                if tcomp != comp and tcomp not in ALLOWED[comp]:
                    errors.append(f"{path}:{lineno}: includes {target}: {comp} may include only "
                                  f"{', '.join(sorted(ALLOWED[comp])) or 'itself'}, not {tcomp}")

    # Folder cycles (depth-first search over the folder graph).
    state, stack, cycles = {}, [], []

    def visit(f):
        state[f] = 1
        stack.append(f)
        for g in sorted(folders.get(f, ())):
            if state.get(g) == 1:
                cycles.append(stack[stack.index(g):] + [g])
            elif g not in state:
                visit(g)
        stack.pop()
        state[f] = 2

    for f in sorted(folders):
        if f not in state:
            visit(f)
    for c in cycles:
        errors.append("folder cycle: " + " -> ".join(c))

    if quiet:
        return 1 if errors else 0
    for e in errors:
        print(e)
    print(f"check_layers: {checked} files, {sum(len(v) for v in folders.values())} folder edges, "
          f"{len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
