#!/usr/bin/env python3
"""Check the import floors of `host/src`: no circle, and no arrow from a lower floor to a
higher one.

Rooms are `host/src`'s top-level modules, and separately the files inside `host/src/link`.
An arrow is a `use crate::…`, `use super::…` or inline `crate::…`/`super::…` path in one
room naming an item of another, followed through `pub use` re-exports to the file that
defines it. Comments, string literals and `#[cfg(test)]` code (test modules, test-only
files) are left out: a test may reach anywhere. A `pub use` of a module's own children (its
face) is no arrow.

The floors are declared below, lowest first; an arrow may go down or stay on its floor. A
room with no floor is an error too, so a new module or link file gets one when it is added,
and so is a declared room that is not there.

Prints each graph's rooms, arrows, back arrows and circles; exits 1 on any back arrow,
circle, room without a floor or floor naming no room. `-v` also lists every arrow. Python 3
standard library only; it reads the sources as text (no inline `mod x { … }` outside tests,
where `super::` would mean something else: it stops on one rather than guess).
"""

import re
import sys
from pathlib import Path

# `host/src`'s top-level modules, lowest floor first (main.rs's top comment says the same).
TOP_FLOORS = [
    ["config", "plugin", "gpu"],
    ["plan", "control"],
    ["link"],
    ["stage"],
    ["metrics"],
    ["supervisor"],
    ["main", "agent", "bench", "doctor"],
]

# The files of `host/src/link`, lowest floor first (link/mod.rs's top comment walks them).
LINK_FLOORS = [
    ["shm.rs", "header.rs", "stats.rs"],
    ["wait.rs"],
    ["error.rs", "wakes.rs"],
    ["check.rs", "queue.rs"],
    ["ring/map.rs"],
    ["ring/producer.rs", "ring/consumer.rs"],
    ["ring/mod.rs", "reclaim.rs"],
    ["backing/mod.rs"],
    ["backing/host.rs", "backing/staged.rs", "backing/device.rs"],
    ["backing/device/handshake.rs"],
    ["mod.rs"],
]

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "host" / "src"
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def blank(m):
    """The match's text with everything but newlines made spaces: offsets and lines stay."""
    return re.sub(r"[^\n]", " ", m.group(0))


def strip_comments_and_strings(text):
    pattern = re.compile(
        r"//[^\n]*"  # line and doc comments
        r"|/\*.*?\*/"  # block comments (not nested; none are in host/src)
        r'|r(#*)".*?"\1'  # raw strings
        r'|b?"(?:\\.|[^"\\])*"'  # strings
        r"|b?'(?:\\.|[^'\\])'",  # char literals ('"' would start a string otherwise)
        re.S,
    )
    return pattern.sub(blank, text)


def item_end(text, start):
    """End of the item starting at `start`: after its `;`, or after its `{ … }` block."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == ";" and depth == 0:
            return i + 1
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def strip_test_code(text):
    """Blank every `#[cfg(test)]` item; returns the text and the names of test-only `mod x;`."""
    test_mods = []
    attr = re.compile(r"#\[cfg\(test\)\]")
    while True:
        m = attr.search(text)
        if not m:
            return text, test_mods
        i = m.end()
        # Further attributes and whitespace before the item itself.
        while True:
            rest = re.match(r"\s*(#\[[^\]]*\])?", text[i:])
            if not rest.group(1):
                i += len(rest.group(0))
                break
            i += rest.end()
        end = item_end(text, i)
        decl = re.match(r"(pub(\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text[i:end])
        if decl:
            test_mods.append(decl.group(3))
        text = text[: m.start()] + re.sub(r"[^\n]", " ", text[m.start() : end]) + text[end:]


def split_top(s, sep=","):
    """Split `s` at `sep` outside braces."""
    parts, depth, cur = [], 0, ""
    for c in s:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def use_tree(tree, prefix=()):
    """The paths of a use tree, each with the name it binds: [(segments, name)]."""
    tree = re.sub(r"\s*::\s*", "::", tree.strip())
    tree = re.sub(r"\s+as\s+", " as ", tree)
    brace = tree.find("{")
    if brace >= 0 and tree.endswith("}"):
        head = tuple(s for s in tree[:brace].split("::") if s)
        out = []
        for part in split_top(tree[brace + 1 : -1]):
            out += use_tree(part, prefix + head)
        return out
    name = None
    if " as " in tree:
        tree, name = tree.split(" as ", 1)
    path = prefix + tuple(tree.split("::"))
    if path[-1] == "self":
        path = path[:-1]
    return [(path, name or (path[-1] if path else None))]


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of segments; () is the crate root
        self.file = file
        self.children = []
        self.test_children = []
        self.uses = []  # (line, segments, bound name, is pub)
        self.inline = []  # (line, segments)
        self.reexports = {}  # name -> absolute segments


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def read_module(path, file):
    mod = Module(path, file)
    raw = file.read_text()
    text = strip_comments_and_strings(raw)
    text, mod.test_children = strip_test_code(text)
    for m in re.finditer(r"(?<![A-Za-z0-9_])(pub(\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text):
        mod.children.append(m.group(3))
    inline_mod = re.search(r"(?<![A-Za-z0-9_])mod\s+(" + IDENT + r")\s*\{", text)
    if inline_mod:
        line = line_of(text, inline_mod.start())
        sys.exit(f"import-floors: {file.relative_to(SRC)}:{line}: inline module {inline_mod.group(1)}, not read")
    spans = []
    use = re.compile(r"(?<![A-Za-z0-9_])(pub(\([^)]*\))?\s+)?use\s+([^;]+);", re.S)
    for m in use.finditer(text):
        spans.append((m.start(), m.end()))
        for segs, name in use_tree(m.group(3)):
            mod.uses.append((line_of(text, m.start()), segs, name, bool(m.group(1))))
    masked = list(text)
    for a, b in spans:
        masked[a:b] = [" "] * (b - a)
    masked = "".join(masked)
    heads = ["crate", "super", "self"] + mod.children
    inline = re.compile(r"(?<![A-Za-z0-9_:])(" + "|".join(heads) + r")((?:\s*::\s*" + IDENT + r")+)")
    for m in inline.finditer(masked):
        segs = [m.group(1)] + [s.strip() for s in m.group(2).split("::") if s.strip()]
        mod.inline.append((line_of(masked, m.start()), tuple(segs)))
    return mod


def load_tree():
    modules = {}

    def walk(path, file, test):
        if test:
            return
        mod = read_module(path, file)
        modules[path] = mod
        base = file.parent if file.name in ("mod.rs", "main.rs") else file.with_suffix("")
        for child in mod.children:
            for candidate in (base / f"{child}.rs", base / child / "mod.rs"):
                if candidate.exists():
                    walk(path + (child,), candidate, child in mod.test_children)
                    break
            else:
                sys.exit(f"import-floors: no file for module {'::'.join(path + (child,))}")

    walk((), SRC / "main.rs", False)
    return modules


def absolute(mod, segs, modules):
    """`segs` as a path from the crate root, or None for another crate's."""
    if not segs:
        return None
    head, rest = segs[0], list(segs[1:])
    if head == "crate":
        return tuple(rest)
    if head in ("self", "super"):
        base = list(mod.path)
        while segs and segs[0] in ("self", "super"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
        return tuple(base) + tuple(segs)
    if mod.path + (head,) in modules:
        return mod.path + tuple(segs)
    return None


def resolve(path, modules, depth=0):
    """The module whose file defines `path`'s item (following `pub use`)."""
    k = len(path)
    while k > 0 and tuple(path[:k]) not in modules:
        k -= 1
    owner = modules.get(tuple(path[:k]))
    if owner is None:
        return None
    rest = path[k:]
    if rest and rest[0] in owner.reexports and depth < 16:
        target = owner.reexports[rest[0]]
        return resolve(tuple(target) + tuple(rest[1:]), modules, depth + 1)
    return owner.path


def edges(modules):
    for mod in modules.values():
        for _, segs, name, is_pub in mod.uses:
            target = absolute(mod, segs, modules)
            if is_pub and target is not None and name and name != "*":
                mod.reexports[name] = target
    out = []  # (from module, to module, line, names)
    for mod in modules.values():
        refs = [(line, absolute(mod, segs, modules), is_pub) for line, segs, _, is_pub in mod.uses]
        refs += [(line, absolute(mod, segs, modules), False) for line, segs in mod.inline]
        for line, target, is_pub in refs:
            if target is None:
                continue
            if target and target[-1] == "*":
                target = target[:-1]
            # A module's face: re-exporting its own children is no arrow.
            if is_pub and target[: len(mod.path)] == mod.path:
                continue
            to = resolve(target, modules)
            if to is None or to == mod.path:
                continue
            out.append((mod.path, to, line, "::".join(target)))
    return out


def evidence(refs, verbose):
    """`file:line name` per reference, in file order; the first few unless verbose."""
    refs = sorted(set(refs), key=lambda r: (r[0], r[1], r[2]))
    shown = [f"{f}:{line} {name}" for f, line, name in (refs if verbose else refs[:3])]
    more = len(refs) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


def rel(modules, path):
    return str(modules[path].file.relative_to(SRC))


def circles(nodes, arrows):
    """Strongly connected components of more than one room (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    succ = {n: sorted({b for a, b in arrows if a == n}) for n in nodes}
    counter = [0]

    def visit(n):
        index[n] = low[n] = counter[0]
        counter[0] += 1
        stack.append(n)
        on.add(n)
        for m in succ[n]:
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in on:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            comp = []
            while True:
                m = stack.pop()
                on.discard(m)
                comp.append(m)
                if m == n:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return found


def check(title, floors, rooms_of, modules, all_edges, verbose):
    floor_of = {room: k for k, group in enumerate(floors) for room in group}
    arrows = {}  # (from room, to room) -> [evidence]
    rooms = set()
    for mod in modules.values():
        room = rooms_of(mod)
        if room is not None:
            rooms.add(room)
    for a, b, line, name in all_edges:
        ra, rb = rooms_of(modules[a]), rooms_of(modules[b])
        if ra is None or rb is None or ra == rb:
            continue
        arrows.setdefault((ra, rb), []).append((rel(modules, a), line, name))
    problems = 0
    print(f"{title}: {len(rooms)} rooms, {len(arrows)} arrows")
    print("  floors, lowest first: " + " | ".join(" ".join(g) for g in floors))
    unplaced = sorted(r for r in rooms if r not in floor_of)
    for r in unplaced:
        print(f"  NO FLOOR: {r} (declare it in scripts/import-floors.py)")
        problems += 1
    for r in sorted(r for r in floor_of if r not in rooms):
        print(f"  NOT THERE: {r} has a floor in scripts/import-floors.py but no file")
        problems += 1
    back = [(a, b) for (a, b) in sorted(arrows) if a in floor_of and b in floor_of and floor_of[a] < floor_of[b]]
    print(f"  back arrows: {len(back) or 'none'}")
    for a, b in back:
        print(f"    {a} -> {b}: " + evidence(arrows[(a, b)], verbose))
    problems += len(back)
    loops = circles(rooms, set(arrows))
    print(f"  circles: {len(loops) or 'none'}")
    for comp in loops:
        inside = [(a, b) for (a, b) in sorted(arrows) if a in comp and b in comp]
        print("    " + " <-> ".join(comp))
        for a, b in inside:
            print(f"      {a} -> {b}: " + evidence(arrows[(a, b)], verbose))
    problems += len(loops)
    if verbose:
        print("  arrows:")
        for a, b in sorted(arrows):
            print(f"    {a} -> {b}: " + evidence(arrows[(a, b)], verbose))
    return problems


def main():
    verbose = "-v" in sys.argv[1:]
    modules = load_tree()
    all_edges = edges(modules)
    problems = check(
        "host/src", TOP_FLOORS, lambda m: m.path[0] if m.path else "main", modules, all_edges, verbose
    )
    link_dir = SRC / "link"
    problems += check(
        "host/src/link",
        LINK_FLOORS,
        lambda m: str(m.file.relative_to(link_dir)) if m.path[:1] == ("link",) else None,
        modules,
        all_edges,
        verbose,
    )
    if problems:
        print(f"import-floors: {problems} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
