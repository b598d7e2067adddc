#!/usr/bin/env python3
"""The shape of the source tree, measured: production lines per file, the longest production
functions, module import circles per crate, and extension `impl` blocks of hub types.

Usage:
  arch_stats.py [--root DIR]                      report for every crate under DIR/crates
  arch_stats.py --check [--circles-only] [--max-file N] [--max-fn N] CRATE...
                                                  exit 1 if a named crate has a module import
                                                  circle, or (unless --circles-only) a production
                                                  file or function over the limit (the house
                                                  rule of issue 33: ~1,000 lines, ~150 lines)

"Production" means: under `src/`, outside `#[cfg(test)]` items and outside files that are only
compiled for tests (`#[cfg(test)] mod x;`). Comments and string literals are masked before
braces are matched. Import edges are `crate::`, `super::`, `self::` and child-module paths
between a crate's modules (the crate root is left out: it only re-exports; a path through one of
its re-exports counts as an edge to the module that defines the item). A circle is a strongly
connected component of two or more modules (Tarjan).
"""
import os, re, sys
from collections import defaultdict

FN_RE = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?'
                   r'(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')


def mask(src):
    """Replace comments and string/char literal contents with spaces, keeping newlines."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith('/*', j): depth += 1; j += 2
                elif src.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif re.match(r'b?r#*"', src[i:i + 40]):
            m = re.match(r'b?r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == '"' or src.startswith('b"', i):
            j = i + (2 if c == 'b' else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12])
            if m:
                out.append(' ' * m.end()); i += m.end()
            else:
                out.append(c); i += 1
        else:
            out.append(c); i += 1
    return ''.join(out)


def block_end(text, open_pos):
    depth = 0
    for j in range(open_pos, len(text)):
        if text[j] == '{': depth += 1
        elif text[j] == '}':
            depth -= 1
            if depth == 0: return j
    return len(text) - 1


def test_ranges(text):
    """Character ranges of `#[cfg(test)]` items with a body."""
    ranges = []
    for m in re.finditer(r'#\[cfg\(test\)\]', text):
        j = m.end()
        semi, brace = text.find(';', j), text.find('{', j)
        if brace >= 0 and (semi < 0 or brace < semi):
            ranges.append((m.start(), block_end(text, brace)))
    return ranges


def test_only_children(text):
    return set(re.findall(r'#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', text))


def crate_files(crate_dir):
    """{module path: (file, masked text, production mask)} for one crate's src/."""
    src = os.path.join(crate_dir, 'src')
    files = {}
    for dp, _, fns in os.walk(src):
        for fn in fns:
            if fn.endswith('.rs'):
                p = os.path.join(dp, fn)
                rel = os.path.relpath(p, src)[:-3].split(os.sep)
                if rel[-1] in ('lib', 'main') and len(rel) == 1: mod = ''
                elif rel[-1] == 'mod': mod = '::'.join(rel[:-1])
                else: mod = '::'.join(rel)
                if rel[0] == 'bin': continue
                files[mod] = p
    out = {}
    test_mods = set()
    for mod in sorted(files, key=lambda m: m.count('::') if m else -1):
        if any(mod == t or mod.startswith(t + '::') for t in test_mods): continue
        text = mask(open(files[mod], encoding='utf-8', errors='replace').read())
        for child in test_only_children(text):
            test_mods.add(f'{mod}::{child}' if mod else child)
        out[mod] = (files[mod], text, test_ranges(text))
    return out


def in_ranges(pos, ranges):
    return any(a <= pos <= b for a, b in ranges)


def production_lines(text, ranges):
    lines = text.count('\n') + 1
    for a, b in ranges:
        lines -= text.count('\n', a, b + 1)
    return lines


def functions(text, ranges):
    res = []
    line_starts = [0] + [m.end() for m in re.finditer('\n', text)]
    for ln, start in enumerate(line_starts):
        end = text.find('\n', start)
        m = FN_RE.match(text[start:end if end >= 0 else len(text)])
        if not m or in_ranges(start, ranges): continue
        semi, brace = text.find(';', start), text.find('{', start)
        if brace < 0 or (0 <= semi < brace): continue
        close = block_end(text, brace)
        res.append((m.group(1), ln + 1, text.count('\n', start, close) + 1))
    return res


def resolve(path, mods):
    parts = path.split('::')
    for k in range(len(parts), 0, -1):
        cand = '::'.join(parts[:k])
        if cand in mods: return cand
    return None


def edges(mods):
    root = mods.get('', (None, '', []))[1]
    reexp = {}
    for m in re.finditer(r'pub\s+use\s+([\w:]+)::\{([^}]*)\}', root):
        for name in re.findall(r'\w+', m.group(2)): reexp.setdefault(name, m.group(1))
    for m in re.finditer(r'pub\s+use\s+([\w:]+)::(\w+)\s*;', root):
        reexp.setdefault(m.group(2), m.group(1))
    g = defaultdict(set)
    for mod, (_, text, ranges) in mods.items():
        if mod == '': continue
        parent = mod.rsplit('::', 1)[0] if '::' in mod else ''
        children = {m.split('::')[-1] for m in mods if m.startswith(mod + '::') and m.count('::') == mod.count('::') + 1}
        for m in re.finditer(r'\b(crate|super|self)((?:::\w+)+)', text):
            if in_ranges(m.start(), ranges): continue
            rest = m.group(2)[2:]
            base = {'crate': '', 'super': parent, 'self': mod}[m.group(1)]
            full = f'{base}::{rest}' if base else rest
            first = full.split('::')[0]
            if base == '' and first in reexp and first not in mods:
                full = reexp[first]
            t = resolve(full, mods)
            if t is None and m.group(1) == 'crate':
                t = resolve(reexp.get(full.split('::')[0], ''), mods)
            if t and t != mod and t != '' and not mod.startswith(t + '::') and not t.startswith(mod + '::'):
                g[mod].add(t)
        for m in re.finditer(r'(?<![\w:])(\w+)::', text):
            if m.group(1) in children and not in_ranges(m.start(), ranges):
                pass  # parent -> own child: part of the module, not an import back
    return g


def circles(g, nodes):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in g.get(v, ()):
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in nodes:
        if v not in index: visit(v)
    return out


def crate_dirs(root):
    base = os.path.join(root, 'crates')
    return {d: os.path.join(base, d) for d in sorted(os.listdir(base)) if os.path.isdir(os.path.join(base, d, 'src'))}


def main():
    args = sys.argv[1:]
    root = '.'
    if '--root' in args:
        i = args.index('--root'); root = args[i + 1]; del args[i:i + 2]
    max_file, max_fn, check = 1000, 150, False
    if '--check' in args: check = True; args.remove('--check')
    sizes = '--circles-only' not in args
    if not sizes: args.remove('--circles-only')
    if '--max-file' in args:
        i = args.index('--max-file'); max_file = int(args[i + 1]); del args[i:i + 2]
    if '--max-fn' in args:
        i = args.index('--max-fn'); max_fn = int(args[i + 1]); del args[i:i + 2]
    crates = crate_dirs(root)
    if check:
        bad = 0
        for name in args:
            if name not in crates:
                print(f'arch_stats: no crate {name}'); bad += 1; continue
            mods = crate_files(crates[name])
            for c in circles(edges(mods), [m for m in mods if m]):
                print(f'{name}: import circle of {len(c)} modules: {", ".join(c)}'); bad += 1
            for mod, (path, text, ranges) in mods.items():
                if not sizes: continue
                n = production_lines(text, ranges)
                if n > max_file:
                    print(f'{os.path.relpath(path, root)}: {n} production lines (limit {max_file})'); bad += 1
                for fname, ln, length in functions(text, ranges):
                    if length > max_fn:
                        print(f'{os.path.relpath(path, root)}:{ln} fn {fname}: {length} lines (limit {max_fn})'); bad += 1
        print(f'arch_stats --check: {bad} circles or over the limits in {", ".join(args)}')
        sys.exit(1 if bad else 0)
    all_fns, all_files = [], []
    print('## import circles per crate')
    for name, d in crates.items():
        mods = crate_files(d)
        g = edges(mods)
        cs = circles(g, [m for m in mods if m])
        prod = sum(production_lines(t, r) for _, t, r in mods.values())
        desc = '; '.join(f'{len(c)}: ' + ', '.join(c) for c in cs) or 'none'
        print(f'{name:14} {prod:6} production lines, {len(mods):3} modules, circles: {desc}')
        for mod, (path, text, ranges) in mods.items():
            all_files.append((production_lines(text, ranges), os.path.relpath(path, root)))
            for fname, ln, length in functions(text, ranges):
                all_fns.append((length, f'{os.path.relpath(path, root)}:{ln} {fname}'))
    print('\n## largest production files')
    for n, p in sorted(all_files, reverse=True)[:15]: print(f'{n:6} {p}')
    print('\n## longest production functions')
    for n, p in sorted(all_fns, reverse=True)[:15]: print(f'{n:6} {p}')
    print(f'functions >= 150 lines: {sum(1 for n, _ in all_fns if n >= 150)}, >= 100: {sum(1 for n, _ in all_fns if n >= 100)}, of {len(all_fns)}')
    print('\n## hub types extended outside their own file (impl blocks per type)')
    for hub in ('Control', 'Queue', 'Target', 'Node'):
        hits = []
        for name, d in crates.items():
            for mod, (path, text, ranges) in crate_files(d).items():
                k = sum(1 for m in re.finditer(rf'^impl(?:<[^>]*>)?\s+{hub}\s*\{{', text, re.M) if not in_ranges(m.start(), ranges))
                if k: hits.append(f'{os.path.relpath(path, root)}({k})')
        if hits: print(f'impl {hub}: {sum(int(h.rsplit("(", 1)[1][:-1]) for h in hits)} blocks in {len(hits)} files: {" ".join(hits)}')


if __name__ == '__main__':
    main()
