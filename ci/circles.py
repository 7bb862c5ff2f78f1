#!/usr/bin/env python3
"""Fails when files of one crate import each other in a loop, or a file of
the explorer imports one of a layer above its own.

    ci/circles.py            every crate of the workspace
    ci/circles.py vmm cli    these crates

docs/architecture.md's rule: a file imports only files below it, so no
file imports a file that imports it back. A file "imports" another when it
names that file's module by a `crate::`, `super::` or `self::` path, in a
`use` item or in code, or by the name a `use` gave a module; a `mod` declaration alone is structure, not an
import. Macros and glob imports can hide an edge: this is a reviewer's
check, run by `ci/test.sh` (every mode) before the tests.
"""
import os
import re
import sys

# The explorer's layers (docs/architecture.md), lowest first: folders of
# its src/. A file's layer is its folder; it imports only files of its own
# layer or below.
LAYERS = {"explorer": ["record", "run", "triage", "output"]}

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{[^;]*?\})")
COMMENT = re.compile(r"//[^\n]*")


def modules(src):
    """Each module path (a tuple of names) of the crate at src, and its file."""
    found = {}
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            parts = os.path.relpath(os.path.join(dirpath, name), src)[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts.pop()
            if parts in (["lib"], ["main"]):
                parts = []
            found[tuple(parts)] = os.path.join(dirpath, name)
    return found


def names_in(group):
    """The paths one `{...}` use group names, without the braces' nesting."""
    inner = group[1:-1]
    out, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [o for o in out if o]


def targets(module, text, mods):
    """The modules of this crate that `module`'s text names: by a path from
    `crate`, `super` or `self`, or by the name a `use` gave a module
    (`use crate::cmd;` then `cmd::schema::SchemaList`)."""
    text = COMMENT.sub("", text)
    out, aliases = set(), {}

    def name(path):
        # The longest prefix that is a module of the crate.
        while path and path not in mods:
            path = path[:-1]
        if path != module and path in mods and path != ():
            out.add(path)

    for root, rest in PATH.findall(text):
        base = {"crate": (), "self": module, "super": module[:-1]}[root]
        tails = [rest[2:]] if not rest.startswith("::{") else names_in(rest[2:])
        for tail in tails:
            path = base
            for part in re.split(r"::", tail.split("{")[0]):
                part = part.strip()
                if part in ("", "self", "*"):
                    break
                if part == "super":
                    path = path[:-1]
                    continue
                path = path + (part,)
            if path in mods and path:
                aliases[path[-1]] = path
            name(path)
    for alias, path in aliases.items():
        for rest in re.findall(r"(?<![\w:])" + alias + r"((?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
            name(path + tuple(rest[2:].split("::")))
    return out


def circles(crate):
    mods = modules(os.path.join(crate, "src"))
    edges = {}
    for m, f in mods.items():
        with open(f, encoding="utf-8") as fh:
            edges[m] = targets(m, fh.read(), mods)
    # Tarjan's strongly connected components.
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(mods):
        if v not in index:
            visit(v)
    return [[(mods[m], sorted(mods[t] for t in edges[m] if t in c)) for m in c] for c in out]


def upward(crate):
    """The imports of `crate` from a file to a file of a higher layer, and
    its files outside the layers' folders: (file, what is wrong)."""
    if crate not in LAYERS:
        return []
    order = LAYERS[crate]
    mods = modules(os.path.join(crate, "src"))
    layer = {m: order.index(m[0]) for m in mods if m and m[0] in order}
    out = []
    for m, f in sorted(mods.items()):
        if m == ():
            continue  # lib.rs: the crate's face, above every layer
        if m not in layer:
            out.append((f, f"is in no layer: move it into one of {crate}/src/{{{','.join(order)}}}/"))
            continue
        with open(f, encoding="utf-8") as fh:
            for t in sorted(targets(m, fh.read(), mods)):
                if layer.get(t, -1) > layer[m]:
                    out.append((f, f"(layer {layer[m] + 1}) imports {mods[t]} (layer {layer[t] + 1})"))
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    crates = sys.argv[1:] or sorted(
        d for d in os.listdir(".") if os.path.isfile(os.path.join(d, "Cargo.toml")) and os.path.isdir(os.path.join(d, "src"))
    )
    found = 0
    for crate in crates:
        for circle in circles(crate):
            found += 1
            print(f"ci/circles.py: {len(circle)} files of {crate} import each other in a loop:", file=sys.stderr)
            for f, to in circle:
                print(f"  {f} -> {', '.join(to)}", file=sys.stderr)
        for f, wrong in upward(crate):
            found += 1
            print(f"ci/circles.py: {f} {wrong}", file=sys.stderr)
    if found:
        print("ci/circles.py: move what both sides need below both (docs/architecture.md)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
