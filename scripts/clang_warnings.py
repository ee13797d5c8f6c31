#!/usr/bin/env python3
"""Checks that clang compiles every C/C++ file of a configured build without a warning.

    scripts/clang_warnings.py BUILD_DIR

BUILD_DIR is a clang build configured with CMAKE_EXPORT_COMPILE_COMMANDS=ON (scripts/sanitize.sh
configures build-asan so). Files whose object that build already compiled (with -Werror) are
done; every other file is compiled with -fsyntax-only: clang's warnings come from its front end,
so this is the compile check (STYLE.md: clang builds the code warning-free) without the code
generation of targets that nothing runs under the sanitizers. Prints each failing file's
diagnostics and a count; exits 1 if any file fails.
"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys


def syntax_only(args):
    """The compile command without its outputs, checking syntax and warnings only."""
    out, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MT", "-MF", "-MQ"):
            skip = 1
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    return out + ["-fsyntax-only"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/clang_warnings.py BUILD_DIR")
    build = sys.argv[1]
    try:
        with open(os.path.join(build, "compile_commands.json")) as f:
            entries = json.load(f)
    except OSError as e:
        sys.exit(f"clang_warnings: {e} (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)")
    todo, done = [], 0
    for e in entries:
        args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
        if "clang" not in os.path.basename(args[0]):
            continue  # not a C/C++ file compiled by clang (nvcc)
        obj = args[args.index("-o") + 1] if "-o" in args else None
        if obj and os.path.exists(os.path.join(e["directory"], obj)):
            done += 1
            continue
        todo.append((e["directory"], e["file"], syntax_only(args)))

    def check(item):
        directory, path, args = item
        r = subprocess.run(args, cwd=directory, capture_output=True, text=True)
        return path, r.returncode, r.stdout + r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for path, rc, text in pool.map(check, todo):
            if rc != 0 or text.strip():
                failed += 1
                print(f"clang_warnings: {os.path.relpath(path)}:\n{text}", end="")
    print(f"clang_warnings: {len(todo) - failed} of {len(todo)} files clean with -fsyntax-only, "
          f"{done} compiled by the build")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
