#!/usr/bin/env python3
"""The layering check: fails on an #include that runs against the project's layers.

Each folder of the project may include the project headers of the folders listed for it
below, and nothing else of the project (system and third-party headers are not checked).
The picture this encodes is drawn in docs/architecture.md ("Layers"). The rules themselves
must form no cycle, which the check also verifies, so no two folders can ever include each
other.

  python3 cmake/layering.py ROOT    check the tree at ROOT; exit 1 naming every violation
  python3 cmake/layering.py --self-test
                                    check that the checker catches a wrong include
"""
import os
import re
import sys
import tempfile

from source_checks import check_main

# folder -> the project folders its files may include (besides its own).
ALLOWED = {
    "codec": set(),
    "proto": set(),
    "runtime": {"proto"},
    "checkpoint": {"runtime", "kernels", "domain"},
    "kernels": set(),
    "domain": {"runtime", "kernels"},
    "ps": {"codec", "kernels", "domain", "runtime", "checkpoint", "proto"},
    "worker": {"kernels", "domain", "runtime", "checkpoint", "proto"},
    "coordinator": {"domain", "runtime", "checkpoint", "proto"},
    "export": {"checkpoint", "kernels", "runtime", "proto"},
    "cli": {"coordinator", "ps", "worker", "export", "kernels", "domain", "runtime", "checkpoint",
            "codec", "proto"},
}
# Folders that may include anything of the project: they test or measure the others.
ANYTHING = {"tests", "bench", "fuzz"}

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)
SOURCES = (".h", ".cc", ".cu", ".cuh")


def folders_acyclic():
    state = {}

    def visit(folder, path):
        if state.get(folder) == "done":
            return None
        if state.get(folder) == "open":
            return path + [folder]
        state[folder] = "open"
        for dep in sorted(ALLOWED.get(folder, ())):
            cycle = visit(dep, path + [folder])
            if cycle:
                return cycle
        state[folder] = "done"
        return None

    for folder in sorted(ALLOWED):
        cycle = visit(folder, [])
        if cycle:
            return "the rules have a cycle: " + " -> ".join(cycle)
    return None


def check(root):
    problems = []
    known = set(ALLOWED) | ANYTHING
    for folder in sorted(known):
        top = os.path.join(root, folder)
        if not os.path.isdir(top):
            continue
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for line_no, target in includes(text):
                    dep = target.split("/", 1)[0] if "/" in target else None
                    if dep is None or dep not in known or dep == folder:
                        continue  # a system, third-party or same-folder header
                    if folder in ANYTHING:
                        continue
                    if dep not in ALLOWED[folder]:
                        problems.append(f"{rel}:{line_no}: {folder}/ may not include {target} "
                                        f"({folder}/ may use: "
                                        f"{', '.join(sorted(ALLOWED[folder])) or 'nothing'})")
    return problems


def includes(text):
    for match in INCLUDE.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(1)


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        write("runtime/a.h", '#include "runtime/b.h"\n#include <vector>\n')
        write("ps/p.cc", '#include "runtime/a.h"\n#include "codec/c.h"\n')
        write("tests/t.cc", '#include "cli/x.h"\n')
        if check(root):
            print("self-test: a tree that keeps the layers was refused:", check(root))
            return 1
        write("runtime/bad.cc", '#include "runtime/a.h"\n\n#include "kernels/dlrm.h"\n')
        write("kernels/k.cc", '#include "runtime/spec.h"\n')
        write("domain/spec_config.cc", '#include "runtime/spec.h"\n')
        problems = check(root)
        wanted = ["runtime/bad.cc:3: runtime/ may not include kernels/dlrm.h",
                  "kernels/k.cc:1: kernels/ may not include runtime/spec.h"]
        for w in wanted:
            if not any(p.startswith(w) for p in problems):
                print("self-test: missed", repr(w), "in", problems)
                return 1
        if len(problems) != len(wanted):
            print("self-test: unexpected problems:", problems)
            return 1
    print("self-test: wrong includes are caught")
    return 0


def main(argv):
    cycle = folders_acyclic()
    if cycle:
        print(cycle)
        return 1
    return check_main(argv, __doc__, self_test, check,
                      lambda n: f"{n} include(s) against the layers (see docs/architecture.md)",
                      "every include keeps the layers")

if __name__ == "__main__":
    sys.exit(main(sys.argv))
