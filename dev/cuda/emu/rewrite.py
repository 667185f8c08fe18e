#!/usr/bin/env python3
"""dev/cuda/emu/rewrite.py OUTDIR FILE... - copies the project's CUDA sources for the CPU emulator (include/emu.h):
each kernel launch `name<<<grid, block[, shmem[, stream]]>>>(args)` (name may carry template arguments; the
<<<...>>>( part must sit on one line) becomes
    emu::launch(SYNC, BOUND, "name", __FILE__, __LINE__, grid, block, ...).k(name)(args)
SYNC is 1 when the kernel may synchronise: its body, or a device function it calls (transitively, by name, over
all FILEs), uses __syncthreads, __syncwarp or a *_sync warp collective; such kernels run as fibers, the others as
a plain loop over threads (the emulator stops with an error if a plain one synchronises after all). BOUND is the
kernel's __launch_bounds__ expression (0: none). Each output starts with #line so messages name the original file.
Files keep their paths relative to the current directory under OUTDIR. Exits non-zero, naming the file, when a
launch is left unconverted."""
import os
import re
import sys

SYNC_PRIM = re.compile(r'\b(__syncthreads|__syncwarp|__shfl\w*_sync|__ballot_sync|__any_sync|__all_sync|__match_\w+_sync)\b')
LAUNCH = re.compile(r'\b([A-Za-z_]\w*)(\s*<[^<>;()]*>)?\s*<<<(.*?)>>>\s*\(')
BOUNDS = re.compile(r'__launch_bounds__\s*\(')


def strip_comments(s):
    """comments and string literals blanked (same length, newlines kept), so braces and names inside them do not count"""
    out = re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                 lambda m: re.sub(r'[^\n]', ' ', m.group(0)), s, flags=re.S)
    return out


def matching(s, i, open_c, close_c):
    """index just past the bracket that closes the one at s[i]"""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_c:
            depth += 1
        elif s[j] == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def functions(code):
    """(name, body, bounds, is_kernel) of every __global__ / __device__ function definition"""
    found = []
    for m in re.finditer(r'\b(__global__|__device__)\b', code):
        i = m.end()
        bounds = None
        # the declaration up to the parameter list; __launch_bounds__(...) may sit before the name
        while True:
            p = code.find('(', i)
            if p < 0:
                break
            b = BOUNDS.search(code, i, p + 1)
            if b and b.end() - 1 == p:
                q = matching(code, p, '(', ')')
                bounds = code[p + 1:q - 1].strip()
                i = q
                continue
            break
        if p < 0:
            continue
        head = code[m.start():p]
        if ';' in head or '{' in head or '}' in head:
            continue
        name = re.search(r'(\w+)\s*$', head)
        if not name:
            continue
        q = matching(code, p, '(', ')')
        rest = re.match(r'[\s\w]*', code[q:])
        j = q + rest.end()
        if j >= len(code) or code[j] != '{':
            continue  # a declaration
        body = code[j:matching(code, j, '{', '}')]
        prev = max(code.rfind(';', 0, m.start()), code.rfind('}', 0, m.start()), code.rfind('#', 0, m.start()))
        templ = bool(re.search(r'\btemplate\s*<', code[prev + 1:m.start()]))
        found.append((name.group(1), body, bounds, templ))
    return found


def main():
    outdir, files = sys.argv[1], sys.argv[2:]
    texts = {f: open(f).read() for f in files}
    defs = []
    for f, t in texts.items():
        defs += functions(strip_comments(t))
    calls = {}
    sync = set()
    bounds = {}
    templates = set()
    for name, body, bnd, templ in defs:
        if templ:
            templates.add(name)
        calls.setdefault(name, set()).update(re.findall(r'\b(\w+)\s*(?:<[^<>;()]*>)?\s*\(', body))
        if SYNC_PRIM.search(body):
            sync.add(name)
        if bnd:
            bounds[name] = bnd
    changed = True
    while changed:
        changed = False
        for name, called in calls.items():
            if name not in sync and called & sync:
                sync.add(name)
                changed = True
    nlaunch = 0
    for f, t in texts.items():
        code = strip_comments(t)
        out, last = [], 0
        for m in LAUNCH.finditer(code):
            if '\n' in m.group(0):
                continue
            name = m.group(1)
            if name not in calls:
                print('%s: kernel %s launched but not defined in the files given; treated as synchronising' % (f, name))
            s = 1 if (name in sync or name not in calls) else 0
            b = '(%s)' % bounds[name] if name in bounds else '0'
            tmpl = t[m.start(2):m.end(2)] if m.group(2) else ''
            cfg = t[m.start(3):m.end(3)]
            out.append(t[last:m.start()])
            if name in templates and not tmpl:  # template arguments deduced from the call's
                site = 'deduce([](auto... a_) { %s(a_...); })' % name
            else:
                site = 'k(%s%s)' % (name, tmpl)
            out.append('emu::launch(%d, %s, "%s", __FILE__, __LINE__, %s).%s(' % (s, b, name, cfg, site))
            last = m.end()
            nlaunch += 1
        out.append(t[last:])
        res = ''.join(out)
        if '<<<' in strip_comments(res):
            line = strip_comments(res)[:strip_comments(res).find('<<<')].count('\n') + 1
            sys.exit('error: %s:%d: a kernel launch was not rewritten; keep `name<<<...>>>(` on one line' % (f, line))
        dst = os.path.join(outdir, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        res = '#line 1 "%s"\n' % f + res
        if not os.path.exists(dst) or open(dst).read() != res:
            open(dst, 'w').write(res)
    print('rewrite.py: %d files, %d launches, %d kernels/functions that synchronise: %s' %
          (len(files), nlaunch, len(sync), ' '.join(sorted(sync))))


main()
