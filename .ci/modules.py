#!/usr/bin/env python3
"""The structure check (DECISIONS "Structure (31 items 4 and 7)"): module cycles and the
crate dependency rule. Python 3 standard library only; run from the repository root:

    python3 .ci/modules.py                  # the check (exit 1 on a violation)
    python3 .ci/modules.py --graph          # ... and print the crate dependency graph
    python3 .ci/modules.py -v               # ... and a witness loop for every cycle
    python3 .ci/modules.py --write-baseline # rewrite .ci/module-cycles.txt (shrink only)
    python3 .ci/modules.py --self-test      # the check's own tests, on fake crates
    python3 .ci/modules.py --root DIR       # another tree (DIR/crates/*/Cargo.toml)

Module cycles. Every crate under crates/*/ gets a module graph per target (the library at
src/lib.rs, named `crate::...`; a binary such as src/main.rs, named `main:crate::...`).
The modules are found the way rustc finds them: from the crate root, through `mod x;`
declarations (`x.rs` or `x/mod.rs`, or a `#[path = "..."]`). A module is a file; an inline
`mod x { ... }` block is part of its file (paths inside it are still resolved from where
they stand, so its `super::` is the file's own module).

Test-only code is left out, since a cycle through tests is harmless: an item, `mod x;` or
`mod x { }` under a `#[cfg(test)]` attribute (or a cfg that needs `test`, such as
`all(test, unix)`) is skipped, and so is the file it names and everything below it.

An edge A -> B exists when module A names a path into module B: a `use` (every leaf of a
grouped `use crate::{a, b::c}`, globs included), or a path in code, in a type, or in an
attribute (`crate::b::f()`, `super::X`, `self::x::Y`, and a relative path whose first
segment is a module declared in, or a name imported into, the scope where it stands, as in
lib.rs's `pub use config::Config`). A path goes to the longest existing module prefix; a
name that the module there only imports (a `use`, `pub use` included) is followed to the
module it comes from, so `crate::Config`, re-exported at the root from `config`, is an edge
to `config` and not to the root. A `mod x;` declaration is not an edge: a parent declaring
its child and the child using `super::X` is the normal shape, and it is a cycle only when
the parent also names a path into the child (e.g. `pub use child::Y`) while the child names
something defined in the parent. Comments, doc links and strings are not paths; neither
are `$crate::` (macros) and `pub(in crate::x)` (visibility).

A cycle is a strongly connected component (Tarjan) of more than one module. Crates in
STRICT must have none; the others may keep the cycles listed in .ci/module-cycles.txt and
no other: a new cycle, or a listed one that grew, fails; a listed cycle that shrank or is
gone fails too until the list is rewritten (--write-baseline), so the list only shrinks.

The dependency rule. Each crate's `[dependencies]` (and `[target.*.dependencies]`; not
dev- or build-dependencies; optional ones count) on `muster-*` crates, followed
transitively, must keep: adapters (ADAPTERS) off one another and off muster-server;
muster-gate and the plumbing (PLUMBING) off muster-server, the adapters and the client
(GATE_FORBIDDEN); every crate off muster-server except SERVER_USERS.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict, deque

# --- the rules ------------------------------------------------------------------------------

# Crates that must have no module cycle, whatever the baseline says. Every crate that is
# split out of muster-server joins this set (DECISIONS "Structure"); a crate added later is
# strict in effect as well, since the baseline never gains an entry (--write-baseline
# refuses to add one).
STRICT = {
    "muster-gate",
    "muster-hub",
    "muster-http",
    "muster-api",
    "muster-dashboard",
    "muster-consul",
    "muster-federation",
    "muster-xds",
    # The server itself, once its last cycle went with the split.
    "muster-server",
}

# The adapters: ways in that turn a protocol into calls on the server's parts. None may
# depend on another, nor on muster-server.
ADAPTERS = {"muster-api", "muster-xds", "muster-dns", "muster-proxy", "muster-dashboard", "muster-consul", "muster-federation"}

SERVER = "muster-server"

# The crates that may depend on muster-server: exactly today's set.
SERVER_USERS = {
    # The binary: `muster serve` runs the server.
    "muster",
    # A library crate, an explicit exception: the live lab (`muster lab --live`) starts an
    # in-process server next to its callers (DESIGN X2, D3).
    "muster-lab",
    # The in-process test server (`muster_testkit::server`, its optional `server` feature)
    # that the server's, the client's, the proxy's and the command line's tests share: a
    # test-only crate (TEST_ONLY), so the server reaches no shipped crate through it.
    # muster-bench does not depend on the server and may not start to.
    "muster-testkit",
}

# Crates that only tests and benchmarks may use: no crate lists them as a dependency (a
# dev-dependency is what they are for).
TEST_ONLY = {"muster-testkit"}

# What the gate (the front door) may not depend on: it is below every adapter.
GATE = "muster-gate"
GATE_FORBIDDEN = {SERVER, "muster-client"} | ADAPTERS

# Shared plumbing split out of muster-server, below the adapters (DECISIONS "Structure"): the
# watch hub and the HTTP transport. None may depend on an adapter, the client or the gate's
# forbidden set.
PLUMBING = {"muster-hub", "muster-http"}

BASELINE_HEADER = """\
# Module cycles that muster's crates have today (.ci/modules.py; DECISIONS "Structure").
# One line per cycle: the crate, then the cycle's modules, sorted. This list may only
# shrink: a cycle not listed here fails CI, and so does a listed one that shrank or is gone
# (rewrite the list with `python3 .ci/modules.py --write-baseline`, which never adds a
# line). Crates in the script's STRICT set may not appear here.
"""

# --- Rust tokens ----------------------------------------------------------------------------


class Tok:
    __slots__ = ("kind", "val", "line")

    def __init__(self, kind, val, line):
        self.kind = kind  # "id", "str", "num", "p" (punctuation; "::" is one token)
        self.val = val
        self.line = line

    def __repr__(self):
        return f"{self.kind}:{self.val}@{self.line}"


IDENT_START = re.compile(r"[A-Za-z_\u0080-\U0010ffff]")
IDENT_CHAR = re.compile(r"[A-Za-z0-9_\u0080-\U0010ffff]")


def tokenize(src):
    """Identifiers, string literals, numbers and punctuation; comments dropped."""
    toks = []
    i, n, line = 0, len(src), 1

    def skip_string(j):  # j at the opening quote; returns the index after the closing one
        nonlocal line
        j += 1
        while j < n and src[j] != '"':
            if src[j] == "\\":
                j += 1
            if j < n and src[j] == "\n":
                line += 1
            j += 1
        return j + 1

    def skip_raw(j):  # j at the first '#' or '"' after r / br / cr
        nonlocal line
        hashes = 0
        while j < n and src[j] == "#":
            hashes += 1
            j += 1
        if j >= n or src[j] != '"':
            return None
        close = '"' + "#" * hashes
        end = src.find(close, j + 1)
        end = n if end < 0 else end
        line += src.count("\n", j, end)
        return end + len(close)

    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    if src[j] == "\n":
                        line += 1
                    j += 1
            i = j
        elif c == '"':
            start, start_line = i, line
            i = skip_string(i)
            toks.append(Tok("str", src[start + 1 : i - 1], start_line))
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}') or a lifetime / label ('a).
            if i + 1 < n and src[i + 1] == "\\":
                j = i + 3  # past the escaped character, which may be a quote
                while j < n and src[j] != "'":
                    j += 1
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                i += 3
            else:
                i += 1
                while i < n and IDENT_CHAR.match(src[i]):
                    i += 1
        elif c.isdigit():
            while i < n and (IDENT_CHAR.match(src[i]) or (src[i] == "." and i + 1 < n and src[i + 1].isdigit())):
                i += 1
            toks.append(Tok("num", "", line))
        elif IDENT_START.match(c):
            j = i
            while j < n and IDENT_CHAR.match(src[j]):
                j += 1
            word = src[i:j]
            if word in ("r", "br", "cr") and j < n and src[j] in '#"':
                if src[j] == "#" and j + 1 < n and IDENT_START.match(src[j + 1]) and word == "r":
                    k = j + 1  # a raw identifier: r#type
                    while k < n and IDENT_CHAR.match(src[k]):
                        k += 1
                    toks.append(Tok("id", src[j + 1 : k], line))
                    i = k
                    continue
                start_line = line
                end = skip_raw(j)
                if end is not None:
                    toks.append(Tok("str", "", start_line))
                    i = end
                    continue
            if word in ("b", "c") and j < n and src[j] == '"':
                start_line = line
                i = skip_string(j)
                toks.append(Tok("str", "", start_line))
                continue
            if word == "b" and j < n and src[j] == "'":
                k = j + 1
                if k < n and src[k] == "\\":
                    k += 1
                k += 1
                while k < n and src[k] != "'":
                    k += 1
                i = k + 1
                continue
            toks.append(Tok("id", word, line))
            i = j
        elif src.startswith("::", i):
            toks.append(Tok("p", "::", line))
            i += 2
        else:
            toks.append(Tok("p", c, line))
            i += 1
    return toks


# --- one file: declarations, paths, imports ---------------------------------------------------


def cfg_needs_test(attr):
    """True when `attr` (an attribute's tokens) is a cfg that holds only under test."""
    if len(attr) < 2 or attr[0].val != "cfg" or attr[1].val != "(":
        return False
    pos = 2

    def pred():
        nonlocal pos
        if pos >= len(attr) or attr[pos].kind != "id":
            return ("?", [])
        name = attr[pos].val
        pos += 1
        if pos < len(attr) and attr[pos].val == "=":
            pos += 2
            return ("kv", [])
        args = []
        if pos < len(attr) and attr[pos].val == "(":
            pos += 1
            while pos < len(attr) and attr[pos].val != ")":
                args.append(pred())
                if pos < len(attr) and attr[pos].val == ",":
                    pos += 1
                elif pos < len(attr) and attr[pos].val != ")":
                    pos += 1  # something unexpected: step over it
            pos += 1
            return (name, args)
        return (name, None)

    def test_only(p):
        name, args = p
        if name == "test" and args is None:
            return True
        if name == "all":
            return any(test_only(a) for a in args)
        if name == "any":
            return bool(args) and all(test_only(a) for a in args)
        return False  # not(...), feature = "...", unix, ...

    return test_only(pred())


def path_attr(attrs):
    for a in attrs:
        if len(a) >= 3 and a[0].val == "path" and a[1].val == "=" and a[2].kind == "str":
            return a[2].val
    return None


class FileScan:
    """What one source file says: its `mod x;` declarations, the inline modules, every path
    it names, and its imports. Scopes are tuples of inline module names inside the file."""

    def __init__(self):
        self.decls = []  # (inline scope, name, #[path] or None, line)
        self.inline = []  # inline scopes (tuples), test-only ones left out
        self.paths = []  # (inline scope, segments, line)
        self.imports = []  # (inline scope, bound name, segments)
        self.test_only = False  # a `#![cfg(test)]` file
        self.test_mods = 0  # `mod x;` / `mod x { }` under a test-only cfg, left out


def match_close(toks, i):
    """Index of the bracket closing the one at toks[i]."""
    depth = 0
    for k in range(i, len(toks)):
        v = toks[k].val if toks[k].kind == "p" else None
        if v in ("(", "[", "{"):
            depth += 1
        elif v in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return k
    return len(toks) - 1


def skip_item(toks, i):
    """The index after the item (or statement, field, arm) starting at toks[i]."""
    depth = 0
    for k in range(i, len(toks)):
        v = toks[k].val if toks[k].kind == "p" else None
        if v in ("(", "[", "{"):
            depth += 1
        elif v in (")", "]", "}"):
            depth -= 1
            if depth < 0:
                return k  # the enclosing block ends: not ours
            if depth == 0 and v == "}":
                return k + 1
        elif v == ";" and depth == 0:
            return k + 1
    return len(toks)


def parse_use_tree(toks, k, prefix):
    """Leaves of the use tree at toks[k]: [(segments, alias or None)], next index."""
    segs = list(prefix)
    if k < len(toks) and toks[k].val == "::" and toks[k].kind == "p":
        segs.append("::")  # `use ::ext::x`: an extern crate
        k += 1
    while k < len(toks):
        t = toks[k]
        if t.kind == "p" and t.val == "{":
            k += 1
            leaves = []
            while k < len(toks) and not (toks[k].kind == "p" and toks[k].val == "}"):
                before = k
                got, k = parse_use_tree(toks, k, segs)
                leaves += got
                if k < len(toks) and toks[k].val == ",":
                    k += 1
                elif k == before:
                    k += 1  # not a use tree: step over it
            return leaves, k + 1
        if t.kind == "p" and t.val == "*":
            return [(segs + ["*"], None)], k + 1
        if t.kind == "id":
            segs.append(t.val)
            k += 1
            if k < len(toks) and toks[k].kind == "p" and toks[k].val == "::":
                k += 1
                continue
            alias = None
            if k + 1 < len(toks) and toks[k].val == "as":
                alias = toks[k + 1].val
                k += 2
            return [(segs, alias)], k
        return [], k
    return [], k


def read_path(toks, i):
    """The segments of the path starting at identifier toks[i], and the index after it."""
    segs = [toks[i].val]
    k = i + 1
    while k + 1 < len(toks) and toks[k].kind == "p" and toks[k].val == "::" and toks[k + 1].kind == "id":
        segs.append(toks[k + 1].val)
        k += 2
    return segs, k


def scan_file(src):
    toks = tokenize(src)
    fs = FileScan()
    inline = []  # [(name, brace depth inside it)]
    attrs = []
    brace = 0
    i, n = 0, len(toks)

    def scope():
        return tuple(name for name, _ in inline)

    def scan_paths(lo, hi):  # paths inside an attribute's tokens
        k = lo
        while k < hi:
            t = toks[k]
            if t.kind == "id" and k + 1 < hi and toks[k + 1].val == "::" and (k == lo or toks[k - 1].val not in ("::", "$", ".")):
                segs, k = read_path(toks, k)
                fs.paths.append((scope(), segs, t.line))
            else:
                k += 1

    while i < n:
        t = toks[i]
        if t.kind == "p" and t.val == "#":
            j = i + 1
            inner = j < n and toks[j].val == "!"
            if inner:
                j += 1
            if j < n and toks[j].val == "[":
                k = match_close(toks, j)
                attr = toks[j + 1 : k]
                scan_paths(j + 1, k)
                if inner:
                    if brace == 0 and cfg_needs_test(attr):
                        fs.test_only = True
                else:
                    attrs.append(attr)
                i = k + 1
                continue
        if attrs and any(cfg_needs_test(a) for a in attrs):
            k = i
            if k < n and toks[k].val == "pub":
                k += 1
                if k < n and toks[k].val == "(":
                    k = match_close(toks, k) + 1
            if k < n and toks[k].kind == "id" and toks[k].val == "mod":
                fs.test_mods += 1
            i = skip_item(toks, i)
            attrs = []
            continue
        if t.kind == "id" and t.val == "pub":
            i += 1
            if i < n and toks[i].val == "(":
                i = match_close(toks, i) + 1  # pub(crate), pub(in crate::x): not a use
            continue
        if t.kind == "id" and t.val == "mod" and i + 2 < n and toks[i + 1].kind == "id" and toks[i + 2].val in (";", "{"):
            name = toks[i + 1].val
            if toks[i + 2].val == ";":
                fs.decls.append((scope(), name, path_attr(attrs), t.line))
            else:
                brace += 1
                inline.append((name, brace))
                fs.inline.append(scope())
            attrs = []
            i += 3
            continue
        attrs = []
        if t.kind == "id" and t.val == "use" and i + 1 < n and (toks[i + 1].kind == "id" or toks[i + 1].val in ("::", "{")):
            leaves, k = parse_use_tree(toks, i + 1, [])
            for segs, alias in leaves:
                if segs and segs[-1] == "self":
                    segs = segs[:-1]
                if not segs:
                    continue
                fs.paths.append((scope(), segs, t.line))
                bound = alias if alias is not None else segs[-1]
                if bound not in ("*", "_", "::", "crate", "super", "self"):
                    fs.imports.append((scope(), bound, segs))
            i = k
            continue
        if t.kind == "id" and i + 1 < n and toks[i + 1].val == "::" and toks[i + 1].kind == "p":
            prev = toks[i - 1].val if i > 0 and toks[i - 1].kind == "p" else None
            if prev not in ("::", "$", "."):
                segs, i = read_path(toks, i)
                fs.paths.append((scope(), segs, t.line))
                continue
        if t.kind == "p" and t.val == "{":
            brace += 1
        elif t.kind == "p" and t.val == "}":
            brace -= 1
            while inline and inline[-1][1] > brace:
                inline.pop()
        i += 1
    return fs


# --- a crate: the module tree and its graph ---------------------------------------------------


class Target:
    """One crate target's module graph."""

    def __init__(self, label):
        self.label = label  # "" for the library, "main" for src/main.rs, ...
        self.files = {}  # module (tuple) -> file path
        self.scans = {}  # module -> FileScan
        self.scopes = {}  # scope (module + inline names) -> the module holding it
        self.children = defaultdict(set)  # scope -> names of the modules declared in it
        self.imports = defaultdict(dict)  # scope -> bound name -> (segments, scope)
        self.edges = {}  # (from module, to module) -> (file, line) of the first path
        self.skipped_tests = 0  # test-only modules left out
        self.missing = []  # declared modules whose file is not there

    def name(self, mod):
        text = "::".join(("crate",) + mod)
        return f"{self.label}:{text}" if self.label else text


def load_target(root_file, label):
    tg = Target(label)
    queue = [((), root_file, True)]  # module, file, mod-rs (its children live beside it)
    while queue:
        mod, path, mod_rs = queue.pop()
        if mod in tg.files:
            continue  # a second declaration under another cfg
        with open(path, encoding="utf-8") as f:
            fs = scan_file(f.read())
        if fs.test_only:
            tg.skipped_tests += 1
            continue
        tg.files[mod] = path
        tg.scans[mod] = fs
        tg.scopes[mod] = mod
        for sc in fs.inline:
            tg.scopes[mod + sc] = mod
            tg.children[mod + sc[:-1]].add(sc[-1])
        here = os.path.dirname(path)
        own_dir = here if mod_rs else os.path.join(here, os.path.splitext(os.path.basename(path))[0])
        for sc, name, explicit, _line in fs.decls:
            if explicit is not None:
                base = here if not sc else os.path.join(own_dir, *sc)
                candidates = [(os.path.join(base, explicit), True)]
            else:
                base = os.path.join(own_dir, *sc)
                candidates = [(os.path.join(base, name + ".rs"), False), (os.path.join(base, name, "mod.rs"), True)]
            found = [(p, m) for p, m in candidates if os.path.isfile(p)]
            if not found:
                tg.missing.append(candidates[0][0])
                continue
            tg.children[mod + sc].add(name)
            queue.append((mod + sc + (name,), found[0][0], found[0][1]))
    for mod, fs in tg.scans.items():
        tg.skipped_tests += fs.test_mods
        for imp_scope, bound, segs in fs.imports:
            tg.imports[mod + imp_scope].setdefault(bound, (segs, mod + imp_scope))
    return tg


def absolutize(tg, segs, scope, depth=0):
    """The path `segs`, written in `scope`, from the crate root; None if it leaves the crate."""
    if depth > 16 or not segs:
        return None
    first = segs[0]
    if first == "crate":
        return list(segs[1:])
    if first in ("self", "super"):
        base, k = list(scope), 0
        while k < len(segs) and segs[k] in ("self", "super"):
            if segs[k] == "super":
                if not base:
                    return None
                base.pop()
            k += 1
        return base + list(segs[k:])
    if first == "::":
        return None
    if first in tg.children.get(scope, ()):
        return list(scope) + list(segs)
    imported = tg.imports.get(scope, {}).get(first)
    if imported is not None and imported[0] != segs:
        head = absolutize(tg, imported[0], imported[1], depth + 1)
        return None if head is None else head + list(segs[1:])
    return None  # an extern crate, a prelude name, a local item, a type parameter


def resolve(tg, segs):
    """The module an absolute path lands in, following imports; None if outside the crate."""
    seen = set()
    while True:
        k = len(segs)
        while k > 0 and tuple(segs[:k]) not in tg.scopes:
            k -= 1
        scope = tuple(segs[:k])
        if k < len(segs):
            name = segs[k]
            imported = tg.imports.get(scope, {}).get(name)
            if imported is not None and (scope, name) not in seen:
                seen.add((scope, name))
                head = absolutize(tg, imported[0], imported[1])
                if head is None:
                    return None
                segs = head + list(segs[k + 1 :])
                continue
        return tg.scopes[scope]


def build_edges(tg):
    for mod, fs in tg.scans.items():
        for sc, segs, line in fs.paths:
            ab = absolutize(tg, segs, mod + sc)
            if ab is None:
                continue
            to = resolve(tg, ab)
            if to is None or to == mod:
                continue
            tg.edges.setdefault((mod, to), (tg.files[mod], line))


def tarjan(nodes, succ):
    """Strongly connected components, iteratively."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(succ.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(succ.get(w, ()))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def cycles_of(tg):
    succ = defaultdict(list)
    for a, b in sorted(tg.edges):
        succ[a].append(b)
    comps = tarjan(sorted(tg.files), succ)
    return [sorted(c) for c in comps if len(c) > 1]


def witness(tg, members, start=None):
    """A shortest loop through `start` (the cycle's first module unless given), with where
    each step is named."""
    inside = set(members)
    start = members[0] if start is None else start
    succ = defaultdict(list)
    for a, b in sorted(tg.edges):
        if a in inside and b in inside:
            succ[a].append(b)
    prev = {}
    q = deque([start])
    while q:
        v = q.popleft()
        for w in succ[v]:
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                path.reverse()
                path.append(start)
                return [(path[j], path[j + 1], tg.edges[(path[j], path[j + 1])]) for j in range(len(path) - 1)]
            if w not in prev:
                prev[w] = v
                q.append(w)
    return []


# --- crates ---------------------------------------------------------------------------------


def read_toml_lines(path):
    """(section, key, value) for the `key = value` lines of a Cargo.toml: a small reader for
    what this script needs (no tomllib before Python 3.11)."""
    out = []
    section = ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line, quoted = "", None
            for ch in raw:
                if quoted:
                    if ch == quoted:
                        quoted = None
                elif ch in "\"'":
                    quoted = ch
                elif ch == "#":
                    break
                line += ch
            line = line.strip()
            m = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?$", line)
            if m:
                section = m.group(1)
                continue
            m = re.match(r"^([A-Za-z0-9_.\-\"']+)\s*=\s*(.*)$", line)
            if m:
                out.append((section, m.group(1).replace('"', "").replace("'", ""), m.group(2)))
    return out


def is_dep_section(section):
    return section == "dependencies" or re.match(r"^target\..+\.dependencies$", section) is not None


class Crate:
    def __init__(self, name, dir):
        self.name = name
        self.dir = dir
        self.deps = set()  # muster-* crates in [dependencies]
        self.targets = []
        self.lines = 0
        self.cycles = []  # [(target, [module names])]


def package_of(value, key):
    m = re.search(r"package\s*=\s*[\"']([^\"']+)[\"']", value)
    return m.group(1) if m else key


def load_crate(cdir):
    rows = read_toml_lines(os.path.join(cdir, "Cargo.toml"))
    name = next((v.strip().strip("\"'") for s, k, v in rows if s == "package" and k == "name"), None)
    if name is None:
        return None  # a virtual manifest
    cr = Crate(name, cdir)
    for section, key, value in rows:
        if is_dep_section(section):
            dep = package_of(value, key.split(".")[0])
        elif section.startswith("dependencies."):
            dep = section[len("dependencies.") :]
            if key == "package":
                cr.deps.discard(dep)
                dep = value.strip().strip("\"'")
        else:
            continue
        if dep.startswith("muster-") or dep == "muster":
            cr.deps.add(dep)
    lib = os.path.join(cdir, "src", "lib.rs")
    bins = []
    for section, key, value in rows:
        if key == "path" and section == "lib":
            lib = os.path.join(cdir, value.strip().strip("\"'"))
        if key == "path" and section == "bin":
            bins.append(os.path.join(cdir, value.strip().strip("\"'")))
    main = os.path.join(cdir, "src", "main.rs")
    if os.path.isfile(main):
        bins.append(main)
    bindir = os.path.join(cdir, "src", "bin")
    if os.path.isdir(bindir):
        for entry in sorted(os.listdir(bindir)):
            p = os.path.join(bindir, entry)
            if entry.endswith(".rs"):
                bins.append(p)
            elif os.path.isfile(os.path.join(p, "main.rs")):
                bins.append(os.path.join(p, "main.rs"))
    roots = []
    if os.path.isfile(lib):
        roots.append((lib, ""))
    seen = set()
    for b in bins:
        b = os.path.normpath(b)
        if b in seen or not os.path.isfile(b):
            continue
        seen.add(b)
        stem = os.path.splitext(os.path.basename(b))[0]
        parent = os.path.basename(os.path.dirname(b))
        label = parent if stem == "main" and parent != "src" else stem  # src/bin/x/main.rs: x
        roots.append((b, label))
    for path, label in roots:
        tg = load_target(path, label)
        build_edges(tg)
        cr.targets.append(tg)
        for members in cycles_of(tg):
            cr.cycles.append((tg, [tg.name(m) for m in members], members))
    for dirpath, _dirs, files in os.walk(os.path.join(cdir, "src")):
        for fn in files:
            if fn.endswith(".rs"):
                with open(os.path.join(dirpath, fn), encoding="utf-8") as f:
                    cr.lines += sum(1 for _ in f)
    return cr


def load_crates(root):
    crates = {}
    base = os.path.join(root, "crates")
    for entry in sorted(os.listdir(base)):
        cdir = os.path.join(base, entry)
        if os.path.isfile(os.path.join(cdir, "Cargo.toml")):
            cr = load_crate(cdir)
            if cr is not None:
                crates[cr.name] = cr
    return crates


# --- verdicts -------------------------------------------------------------------------------


def reach(crates, start):
    """Every muster crate `start` depends on, directly or not, with the chain to it."""
    chains = {}
    q = deque([(start, [start])])
    while q:
        v, chain = q.popleft()
        for d in sorted(crates[v].deps) if v in crates else ():
            if d not in chains and d != start:
                chains[d] = chain + [d]
                q.append((d, chain + [d]))
    return chains


def dependency_violations(crates):
    out = []
    for name in sorted(crates):
        chains = reach(crates, name)
        forbidden = {}
        if name not in SERVER_USERS:
            forbidden[SERVER] = "only " + ", ".join(sorted(SERVER_USERS)) + " may depend on " + SERVER
        if name == GATE:
            for d in GATE_FORBIDDEN:
                forbidden.setdefault(d, "the gate may not depend on the server, an adapter or the client")
        if name in PLUMBING:
            for d in GATE_FORBIDDEN:
                forbidden.setdefault(d, "shared plumbing may not depend on the server, an adapter or the client")
        if name in ADAPTERS:
            for d in ADAPTERS - {name}:
                forbidden.setdefault(d, "an adapter may not depend on another adapter")
            forbidden[SERVER] = "an adapter may not depend on " + SERVER
        for d in sorted(TEST_ONLY & set(crates[name].deps)):
            out.append(f"{name} depends on {d} (directly): {d} is for tests only (a dev-dependency)")
        for d in sorted(forbidden):
            if d in chains:
                chain = chains[d]
                how = "directly" if len(chain) == 2 else "through " + " -> ".join(chain)
                out.append(f"{name} depends on {d} ({how}): {forbidden[d]}")
    return out


def read_baseline(path):
    entries = []
    if not os.path.isfile(path):
        return entries
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) >= 3:
                entries.append((line[0], tuple(sorted(line[1:]))))
    return entries


def current_cycles(crates):
    return sorted((name, tuple(sorted(names))) for name in crates for _tg, names, _m in crates[name].cycles)


def cycle_verdicts(crates, baseline):
    """Messages for every cycle that breaks the rule (empty: the cycles pass)."""
    out = []
    now = current_cycles(crates)
    base = set(baseline)
    for crate, members in now:
        text = " ".join(members)
        if crate in STRICT:
            out.append((crate, members, f"{crate}: a module cycle in a strict crate ({len(members)} modules): {text}"))
            continue
        if (crate, members) in base:
            continue
        mine = set(members)
        bigger = [b for c, b in base if c == crate and mine < set(b)]
        smaller = [b for c, b in base if c == crate and set(b) < mine]
        if bigger:
            out.append((crate, members, f"{crate}: a listed cycle shrank to {len(members)} modules; "
                                         f"rewrite the baseline (--write-baseline): {text}"))
        elif smaller:
            grew = sorted(mine - set().union(*map(set, smaller)))
            out.append((crate, members, f"{crate}: a listed cycle grew to {len(members)} modules (new: {' '.join(grew)}): {text}"))
        else:
            out.append((crate, members, f"{crate}: a new module cycle ({len(members)} modules): {text}"))
    nowset = set(now)
    for crate, members in sorted(base - nowset):
        if crate in STRICT:
            out.append((crate, None, f"{crate}: listed in the baseline but strict; remove its lines: {' '.join(members)}"))
            continue
        if any(c == crate and (set(m) < set(members) or set(members) < set(m)) for c, m in now):
            continue  # reported above: it shrank, or it grew
        out.append((crate, None, f"{crate}: a listed cycle is fixed, remove it from the baseline: {' '.join(members)}"))
    return out


def write_baseline(crates, path):
    old = set(read_baseline(path))
    now = [(c, m) for c, m in current_cycles(crates) if c not in STRICT]
    if os.path.isfile(path):
        added = [(c, m) for c, m in now if (c, m) not in old and not any(oc == c and set(m) < set(om) for oc, om in old)]
        if added:
            for c, m in added:
                print(f"refused: {c} would gain a cycle: {' '.join(m)}", file=sys.stderr)
            print("the baseline only shrinks; fix the cycle (or, deliberately, delete the file and regenerate it)", file=sys.stderr)
            return 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(BASELINE_HEADER)
        for c, m in now:
            f.write(c + " " + " ".join(m) + "\n")
    print(f"wrote {path}: {len(now)} cycles (was {len(old)})")
    return 0


def print_summary(crates):
    print("== module graph (paths through crate::, super::, self::, declared modules and imports; test-only modules left out)")
    print(f"{'crate':<20} {'modules':>7} {'test-only':>9} {'src lines':>9} {'cycles':>6} {'largest':>7}")
    total = 0
    for name in sorted(crates):
        cr = crates[name]
        mods = sum(len(tg.files) for tg in cr.targets)
        tests = sum(tg.skipped_tests for tg in cr.targets)
        largest = max((len(n) for _t, n, _m in cr.cycles), default=0)
        total += len(cr.cycles)
        flag = "  (strict)" if name in STRICT else ""
        print(f"{name:<20} {mods:>7} {tests:>9} {cr.lines:>9} {len(cr.cycles):>6} {largest or '':>7}{flag}")
        for tg in cr.targets:
            for path in tg.missing:
                print(f"  warning: a declared module's file is missing: {path}")
    print(f"total cycles: {total}")
    return total


def print_cycles(crates, verbose):
    for name in sorted(crates):
        cr = crates[name]
        if not cr.cycles:
            continue
        print(f"{name}: {len(cr.cycles)} cycle(s)")
        for tg, names, members in sorted(cr.cycles, key=lambda c: -len(c[1])):
            print(f"  [{len(names)}] " + " ".join(names))
            if verbose:
                print_witness(tg, members)


def print_witness(tg, members, indent="      ", start=None):
    for a, b, (path, line) in witness(tg, members, start):
        print(f"{indent}{tg.name(a)} -> {tg.name(b)}   ({path}:{line})")


def print_graph(crates):
    print("== crate dependency graph ([dependencies] on muster-* crates)")
    for name in sorted(crates):
        deps = sorted(crates[name].deps)
        tags = []
        if name in ADAPTERS:
            tags.append("adapter")
        if name in STRICT:
            tags.append("strict")
        tag = f" [{', '.join(tags)}]" if tags else ""
        print(f"  {name}{tag} -> {', '.join(deps) if deps else '(none)'}")


def check(root, baseline_path, graph=False, verbose=False):
    crates = load_crates(root)
    print_summary(crates)
    print_cycles(crates, verbose)
    failures = 0
    baseline = read_baseline(baseline_path)
    print(f"== module cycles against {os.path.relpath(baseline_path, root)} ({len(baseline)} listed)")
    verdicts = cycle_verdicts(crates, baseline)
    by_members = {(c, tuple(n)): (tg, m) for c in crates for tg, n, m in crates[c].cycles}
    listed = {}
    for crate, members in baseline:
        listed.setdefault(crate, set()).update(members)
    for crate, members, msg in verdicts:
        print("FAIL: " + msg)
        if members is not None and (crate, members) in by_members:
            tg, mods = by_members[(crate, members)]
            # Through a module the baseline does not list for the crate, when there is one.
            new = [m for m in mods if tg.name(m) not in listed.get(crate, ())]
            print("  a loop in it:")
            print_witness(tg, mods, "    ", new[0] if new else None)
        failures += 1
    if not verdicts:
        print("ok: no cycle beyond the baseline, none in " + ", ".join(sorted(STRICT)))
    if graph:
        print_graph(crates)
    print("== the crate dependency rule")
    violations = dependency_violations(crates)
    for msg in violations:
        print("FAIL: " + msg)
        failures += 1
    if not violations:
        print("ok: adapters (" + ", ".join(sorted(ADAPTERS)) + ") depend on no adapter nor the server; "
              f"{GATE}, {', '.join(sorted(PLUMBING))} on none of {', '.join(sorted(GATE_FORBIDDEN))}; only {', '.join(sorted(SERVER_USERS))} on {SERVER}")
    if failures:
        print(f"structure check failed: {failures} problem(s)")
        return 1
    print("structure check passed")
    return 0


# --- self-test ------------------------------------------------------------------------------


def self_test():
    """Fake crates in a temporary directory, with known verdicts. The fakes' muster-server
    is a crate with listed cycles: the real one's strictness is set aside meanwhile."""
    strict_server = SERVER in STRICT
    STRICT.discard(SERVER)
    try:
        return self_test_fakes()
    finally:
        if strict_server:
            STRICT.add(SERVER)


def self_test_fakes():
    files = {
        # No cycle: a facade that re-exports, children using super:: and crate::, a test
        # module with a back-edge, paths in strings, comments and visibility.
        "crates/gate/Cargo.toml": '[package]\nname = "muster-gate"\n[dependencies]\nmuster-core.workspace = true\n[dev-dependencies]\nmuster-server.workspace = true\n',
        "crates/gate/src/lib.rs": (
            "//! [`crate::b`] is a doc link, not a path.\n"
            "pub mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n"
            "pub use a::Thing;\npub use b::Other;\n"
            'const S: &str = "crate::b::x";\n'
            "#[cfg(test)]\nfn helper() { crate::b::back(); }\n"
        ),
        "crates/gate/src/a.rs": "use crate::b::Other;\npub struct Thing;\npub(in crate::a) fn f() {}\n#[cfg(test)]\nmod tests { use crate::Thing; }\n",
        "crates/gate/src/b.rs": "pub struct Other;\n// use crate::a::Thing;\n#[cfg(all(test, unix))]\nuse crate::a::Thing;\n#[path = \"b_tests.rs\"]\n#[cfg(test)]\nmod tests;\nmod c { pub fn g() { super::Other; } }\n",
        "crates/gate/src/b_tests.rs": "use crate::a::Thing;\n",
        "crates/gate/src/tests.rs": "use crate::a::Thing;\nuse crate::b::Other;\n",
        # A cycle through a grouped use and an expression path; crate::X, a root re-export,
        # resolves to the module defining X.
        "crates/server/Cargo.toml": '[package]\nname = "muster-server"\n[dependencies]\nmuster-gate = { path = "../gate" }\nmuster-dns.workspace = true\n',
        "crates/server/src/lib.rs": "mod x;\nmod y;\nmod z;\nmod w;\npub use w::Config;\n",
        "crates/server/src/x.rs": "use crate::{y::Y, z};\npub struct X;\n",
        "crates/server/src/y.rs": "pub struct Y;\nfn f() { let _ = crate::x::X; }\n",
        "crates/server/src/z/mod.rs": "mod inner;\npub fn zz() { inner::i(); }\n",
        "crates/server/src/z/inner.rs": "pub fn i() { let _ = crate::Config::default(); }\n",
        "crates/server/src/w.rs": "#[derive(Default)] pub struct Config;\n",
        # A forbidden dependency: an adapter on another adapter.
        "crates/dns/Cargo.toml": '[package]\nname = "muster-dns"\n[dependencies]\nmuster-proxy = { path = "../proxy" }\n',
        "crates/dns/src/lib.rs": "pub fn f() {}\n",
        "crates/proxy/Cargo.toml": '[package]\nname = "muster-proxy"\n[dependencies]\n',
        "crates/proxy/src/lib.rs": "mod p;\nmod q;\n",
        "crates/proxy/src/p.rs": "use super::q::Q;\npub struct P;\n",
        "crates/proxy/src/q.rs": "pub struct Q;\nfn f(_: super::p::P) {}\n",
    }
    problems = []

    def expect(cond, what):
        print(("  ok: " if cond else "  FAILED: ") + what)
        if not cond:
            problems.append(what)

    tmp = tempfile.mkdtemp(prefix="muster-modules-")
    try:
        for rel, text in files.items():
            p = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        toks = tokenize("let s = r#\"crate::a\"#; let c = '\"'; let d = '\\''; let l: &'a str; r#type::x; /* /* crate::b */ */ b\"x\"")
        ids = [t.val for t in toks if t.kind == "id"]
        expect(ids == ["let", "s", "let", "c", "let", "d", "let", "l", "str", "type", "x"],
               f"the tokenizer drops strings, raw strings, chars, lifetimes and nested comments; got {ids}")
        crates = load_crates(tmp)
        gate, server, proxy = crates["muster-gate"], crates["muster-server"], crates["muster-proxy"]
        expect(sorted(gate.targets[0].files) == [(), ("a",), ("b",)] and gate.targets[0].skipped_tests == 3,
               "test-only modules (plain, #[path], inline) are left out, and counted")
        expect(gate.cycles == [], "muster-gate (facade, super::, tests, strings, pub(in ...)): no cycle")
        expect(gate.targets[0].scopes.get(("b", "c")) == ("b",), "an inline module is part of its file")
        expect(((), ("a",)) in gate.targets[0].edges and (("a",), ("b",)) in gate.targets[0].edges, "edges from pub use and use crate::")
        expect((("b",), ()) not in gate.targets[0].edges, "an inline module's super:: is its file's module")
        got = sorted(tuple(n) for _t, n, _m in server.cycles)
        expect(got == [("crate::x", "crate::y")], f"muster-server: the cycle x <-> y (grouped use, expression path); got {got}")
        edges = server.targets[0].edges
        expect((("z", "inner"), ("w",)) in edges and (("z", "inner"), ()) not in edges, "crate::Config (a root re-export) resolves to w")
        expect((("z",), ("z", "inner")) in edges, "a relative path into a declared child is an edge")
        expect([tuple(n) for _t, n, _m in proxy.cycles] == [("crate::p", "crate::q")], "super:: paths in use and in a type make a cycle")
        v = dependency_violations(crates)
        expect(any(m.startswith("muster-dns depends on muster-proxy (directly)") for m in v), "an adapter on an adapter is refused")
        expect(not any(m.startswith("muster-gate") for m in v), "dev-dependencies do not count")
        expect(len(v) == 1, f"no other violation (the server on the gate and dns is fine); got {v}")
        crates["muster-gate"].deps.add("muster-dns")
        v = dependency_violations(crates)
        expect(any(m.startswith("muster-gate depends on muster-dns") for m in v) and
               any(m.startswith("muster-gate depends on muster-proxy (through muster-gate -> muster-dns -> muster-proxy)") for m in v),
               "the gate on a transport is refused, transitively too")
        crates["muster-gate"].deps.discard("muster-dns")
        crates["muster-proxy"].deps.add(SERVER)
        v = dependency_violations(crates)
        expect(any(m.startswith("muster-proxy depends on muster-server") for m in v), "an adapter on the server is refused")
        crates["muster-proxy"].deps.discard(SERVER)
        # Baseline verdicts.
        listed = [("muster-proxy", ("crate::p", "crate::q")), ("muster-server", ("crate::x", "crate::y"))]
        expect(cycle_verdicts(crates, listed) == [], "listed cycles pass")
        v = cycle_verdicts(crates, listed[:1])
        expect(len(v) == 1 and "a new module cycle" in v[0][2], "an unlisted cycle fails")
        v = cycle_verdicts(crates, listed + [("muster-server", ("crate::a", "crate::b"))])
        expect(len(v) == 1 and "fixed, remove it from the baseline" in v[0][2], "a fixed cycle fails until it is removed")
        v = cycle_verdicts(crates, listed[:1] + [("muster-server", ("crate::x", "crate::y", "crate::z"))])
        expect(len(v) == 1 and "shrank" in v[0][2], "a shrunk cycle fails until the baseline is rewritten")
        v = cycle_verdicts(crates, listed[:1] + [("muster-server", ("crate::x",))])
        expect(len(v) == 1 and "grew" in v[0][2], "a grown cycle fails once, as grown")
        v = cycle_verdicts(crates, listed[:1] + [("muster-server", ("crate::x", "crate::zz"))])
        expect(len(v) == 2, "a cycle that is not the listed one: new, and the listed one fixed")
        # A cycle in a strict crate fails whatever the baseline says.
        with open(os.path.join(tmp, "crates/gate/src/b.rs"), "a", encoding="utf-8") as f:
            f.write("fn back() -> crate::a::Thing { crate::a::Thing }\n")
        crates = load_crates(tmp)
        listed.append(("muster-gate", ("crate::a", "crate::b")))
        v = cycle_verdicts(crates, listed)
        expect(len(v) == 1 and "strict crate" in v[0][2], "a strict crate's cycle fails even when listed")
        # The whole check, end to end: exit 1, and write-baseline never adds a line.
        base = os.path.join(tmp, "baseline.txt")
        quiet = open(os.devnull, "w")
        saved, sys.stdout = sys.stdout, quiet
        try:
            wrote = write_baseline(crates, base)
        finally:
            sys.stdout = saved
        expect(wrote == 0 and len(read_baseline(base)) == 2, "the first baseline lists the non-strict cycles")
        with open(os.path.join(tmp, "crates/proxy/src/p.rs"), "w", encoding="utf-8") as f:
            f.write("pub struct P;\n")
        with open(os.path.join(tmp, "crates/server/src/z/inner.rs"), "a", encoding="utf-8") as f:
            f.write("fn up() { super::zz(); crate::x::X; }\n")
        crates = load_crates(tmp)
        saved, sys.stderr = sys.stderr, quiet
        try:
            refused = write_baseline(crates, base)
        finally:
            sys.stderr = saved
        expect(refused == 1, "--write-baseline refuses a new cycle")
        saved, sys.stdout = sys.stdout, quiet
        try:
            rc = check(tmp, base)
        finally:
            sys.stdout = saved
            quiet.close()
        expect(rc == 1, "the check exits 1")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if problems:
        print(f"self-test failed: {len(problems)} problem(s)")
        return 1
    print("self-test passed")
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="the repository root (holds crates/*/Cargo.toml)")
    ap.add_argument("--baseline", help="the list of allowed cycles (default: ROOT/.ci/module-cycles.txt)")
    ap.add_argument("--write-baseline", action="store_true", help="rewrite the baseline from today's cycles (never adds one)")
    ap.add_argument("--graph", action="store_true", help="also print the crate dependency graph")
    ap.add_argument("-v", "--verbose", action="store_true", help="print a loop, with file:line, for every cycle")
    ap.add_argument("--self-test", action="store_true", help="test this script on fake crates")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    baseline = args.baseline or os.path.join(root, ".ci", "module-cycles.txt")
    if args.write_baseline:
        return write_baseline(load_crates(root), baseline)
    return check(root, baseline, graph=args.graph, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
