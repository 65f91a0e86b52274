#!/usr/bin/env python3
"""calls.py - which source file of a module calls (or reads) which other,
from the object files' symbol tables (nm: what each defines, what it
needs), and every cycle among them.

    python3 deploy/calls.py BUILD_DIR agent api

Prints, per file, the files of the listed modules whose symbols it uses,
then the strongly connected groups of more than one file (a cycle: files
that call each other, directly or around), and exits 1 when there is one.
"""
import os
import subprocess
import sys


def objects(build, module):
    d = os.path.join(build, "CMakeFiles", f"hr_{module}.dir", module)
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".o"))


def symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, needed = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBR":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            needed.add(parts[1])
    return defined, needed


def sccs(nodes, edges):
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main():
    build, modules = sys.argv[1], sys.argv[2:]
    owner, need = {}, {}
    for m in modules:
        for o in objects(build, m):
            name = f"{m}/{os.path.basename(o)[:-2]}"
            d, u = symbols(o)
            for s in d:
                owner[s] = name
            need[name] = u
    edges = {f: sorted({owner[s] for s in u if s in owner and owner[s] != f})
             for f, u in need.items()}
    for f in sorted(edges):
        print(f"{f} -> {', '.join(edges[f]) if edges[f] else '(none)'}")
    cyc = [c for c in sccs(sorted(edges), edges) if len(c) > 1]
    if not cyc:
        print(f"no cycle among the {len(edges)} files of {', '.join(modules)}")
        return 0
    for c in cyc:
        print("cycle: " + " <-> ".join(c))
    return 1


if __name__ == "__main__":
    sys.exit(main())
