#!/usr/bin/env python3
"""Import cycles between the files of a Rust crate: import_cycles.py <crate>/src

A `use`, or a path starting `crate::`/`super::`/`self::`, imports the file of the longest module
path it names (x.rs or x/mod.rs for module x; `mod x {..}` blocks stay in their file). Prints each
strongly connected component of more than one file and exits 1; else "0 cycles", exit 0.
"""
import re
import sys
from pathlib import Path

# Comments, then char literals (`'"'`, before strings) and strings: none of them import.
COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|' r"'(?:\\.|[^'\\\n])'|" r'"(?:\\.|[^"\\])*"', re.S)
USE = re.compile(r'\buse\s+([^;]+);')
INLINE_PATH = re.compile(r'(?<![\w:])((?:crate|super|self)(?:\s*::\s*\w+)+)')
INLINE_MOD = re.compile(r'\bmod\s+(\w+)\s*\{')


def blank(match):
    """Spaces for a comment, string or `use`, so that offsets stay where they were."""
    return re.sub(r'[^\n]', ' ', match.group(0))


def inline_modules(text):
    """(start, end, name) of each `mod name { ... }` block, by brace matching."""
    spans = []
    for m in INLINE_MOD.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {'{': 1, '}': -1}.get(text[i], 0)
            i += 1
        spans.append((m.start(), i, m.group(1)))
    return spans


def expand(tree):
    """`a::{b, c::{d, e as f}, *}` -> [[a, b], [a, c, d], [a, c, e], [a]]."""
    tree = re.sub(r'\s+', '', re.sub(r'\s+as\s+\w+', '', tree))
    if '{' not in tree:
        return [[s for s in tree.split('::') if s and s != '*']]
    head, inner = tree.split('{', 1)
    items, depth, start = [], 0, 0
    for i, ch in enumerate(inner[:inner.rindex('}')] + ','):
        depth += {'{': 1, '}': -1}.get(ch, 0)
        if ch == ',' and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    prefix = [s for s in head.split('::') if s]
    return [prefix + rest for item in items if item for rest in expand(item)]


def resolve(segments, here, modules, in_use, exports=None):
    """The module that `segments`, written in module `here`, names (the longest module path, or
    the module an item re-exported there comes from); or None."""
    if segments[0] == 'crate':
        path, rest = (), segments[1:]
    elif segments[0] in ('super', 'self') or (in_use and here + (segments[0],) in modules):
        path, rest = here, segments
    else:
        return None  # another crate's path, or an item in scope
    for i, seg in enumerate(rest):
        if seg in ('super', 'self'):
            path = path[:-1] if seg == 'super' else path
        elif path + (seg,) in modules:
            path += (seg,)
        else:
            # An item: a `pub use` re-export imports the file that defines it, not the one
            # that re-exports it.
            seen = set()
            while exports and (path, seg) in exports and (path, seg) not in seen:
                seen.add((path, seg))
                path, seg = exports[(path, seg)]
            break
    return path


def graph(src):
    """The modules' files, and the edges between them (module path of a file -> set of those)."""
    files = {}
    for p in sorted(src.rglob('*.rs')):
        parts = list(p.relative_to(src).with_suffix('').parts)
        files[tuple(parts[:-1] if parts[-1] in ('mod', 'lib', 'main') else parts)] = p
    texts = {m: COMMENT_OR_STRING.sub(blank, p.read_text()) for m, p in files.items()}
    spans = {m: inline_modules(t) for m, t in texts.items()}
    modules = {m: m for m in files}  # every module path -> the file it is in
    for m, ss in spans.items():
        for start, _, name in ss:
            modules[m + tuple(n for s, e, n in ss if s < start < e) + (name,)] = m
    # (module, name) -> (module, name) it re-exports, from `pub use` and `pub(..) use`.
    exports = {}
    for m, text in texts.items():
        for u in re.finditer(r'\bpub(?:\([^)]*\))?\s+use\s+([^;]+);', text):
            for segs in expand(u.group(1)):
                target = resolve(segs[:-1] or segs, m, modules, True) if len(segs) > 1 else None
                if target is not None:
                    exports[(m, segs[-1])] = (target, segs[-1])
    edges = {m: set() for m in files}
    for m, text in texts.items():
        refs = [(segs, u.start(), True) for u in USE.finditer(text) for segs in expand(u.group(1))]
        for p in INLINE_PATH.finditer(USE.sub(blank, text)):
            refs.append((re.sub(r'\s', '', p.group(1)).split('::'), p.start(), False))
        for segs, offset, in_use in refs:
            here = m + tuple(n for s, e, n in spans[m] if s < offset < e)
            target = resolve(segs, here, modules, in_use, exports) if segs else None
            if target is not None and modules[target] != m:
                edges[m].add(modules[target])
    return files, edges


def cycles(edges):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(scc) > 1:
                found.append(sorted(scc))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main():
    src = Path(sys.argv[1] if len(sys.argv) > 1 else 'src')
    files, edges = graph(src)
    def name(m):
        return str(files[m].relative_to(src))
    found = cycles(edges)
    for scc in found:
        print(f'cycle of {len(scc)} files: ' + ', '.join(map(name, scc)))
        for m in scc:
            print(f'  {name(m)} -> ' + ', '.join(sorted(name(w) for w in edges[m] if w in scc)))
    print(f'{len(found)} cycles')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
