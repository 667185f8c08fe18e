#!/usr/bin/env python3
"""test/test_structure.py - the layout rules of docs/layout.md, checked on the tracked sources (plain python3).

Each check prints "ok <name>" or "FAIL <name>: <what>" (test/run.sh counts them):
  - no source file over 800 lines, the model files (train_gpt.c/.cu, train_llama.c/.cu), tests and dev/ aside;
  - no function over 150 lines (tests and dev/ aside), train_main at most 150;
  - the folders include only the floors below them (LAYER), models/*_host.c's include of a root model file aside;
  - no include cycle among optim/'s files;
  - README.md at most 150 lines;
  - every update rule of optim/optim.h's OptimizerKind has a row in optim/rules.c, and no host code above the rows
    tests a rule's kind (the blob layouts of optim/dist_state.c aside).
A function is counted from a line at column 0 that opens it ("...) {") to the next "}" at column 0, which is how
every function in the project is laid out (clang-format's style).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
fails = 0


def report(name, problems):
    global fails
    if problems:
        fails += 1
        print("FAIL %s: %s" % (name, "; ".join(problems[:8]) + (" (+%d more)" % (len(problems) - 8) if len(problems) > 8 else "")))
    else:
        print("ok %s" % name)


SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
# a copy of the tree that is no git work tree of its own (make test-sanitize's build-san/tree holds the tracked and
# untracked-but-not-ignored files) is walked instead, without the folders .gitignore names
NOT_SOURCES = {".git", "build", "build-san", "data", "out", "node_modules", "__pycache__"}  # at the root only


def ignored(d, root, name):
    return name == "__pycache__" or d == root and (name in NOT_SOURCES or name.startswith("log"))


def sources():
    root = os.path.realpath(ROOT)
    top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode == 0 and os.path.realpath(top.stdout.strip()) == root:
        out = subprocess.run(["git", "-C", root, "ls-files", *("*" + e for e in SOURCE_EXT)], capture_output=True,
                             text=True, check=True).stdout.split()
    else:
        out = []
        for d, dirs, names in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not ignored(d, root, x))
            out += [os.path.relpath(os.path.join(d, n), root) for n in sorted(names) if n.endswith(SOURCE_EXT)]
    return [f for f in out if not f.startswith(("test/", "dev/"))]


MODEL_FILES = re.compile(r"^(train_gpt|train_llama)\.(c|cu)$")
# the floors, lowest first: a folder may include its own and lower floors only ("." is the root: the model files and
# the programs built from them)
LAYER = {"common": 0, "comm": 1, "dataloader": 1, "tokenizer": 2, "optim": 2, "eval": 3, "models": 3,
         "trainer": 4, "export": 5, "cuda": 5, ".": 6}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read(f):
    with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
        return fh.read()


def main():
    files = sources()
    missing = [f for f in ("optim/optim.h", "optim/rules.c", "trainer/train.c") if f not in files]
    if missing:
        print("FAIL sources_found: %s not among the %d source files found under %s" % (", ".join(missing), len(files), ROOT))
        sys.exit(1)
    text = {f: read(f) for f in files}

    long_files = ["%s %d lines" % (f, t.count("\n")) for f, t in text.items()
                  if not MODEL_FILES.match(f) and t.count("\n") > 800]
    report("no_source_file_over_800_lines", long_files)

    long_fns, train_main = [], None
    opener = re.compile(r"^[A-Za-z_].*\)\s*\{\s*$")
    for f, t in text.items():
        start = None
        for i, line in enumerate(t.split("\n")):
            if opener.match(line) and not line.startswith(("typedef", "struct", "enum", "union")):
                start, head = i, line
            elif line.startswith("}") and start is not None:
                n = i - start
                name = re.search(r"([A-Za-z_][A-Za-z_0-9]*)\s*\(", head)
                name = name.group(1) if name else head[:40]
                if name == "train_main":
                    train_main = n
                if n > 150 and not MODEL_FILES.match(f):
                    long_fns.append("%s:%d %s %d lines" % (f, start + 1, name, n))
                start = None
    report("no_function_over_150_lines", long_fns)
    report("train_main_at_most_150_lines",
           [] if train_main is not None and train_main <= 150 else ["train_main %s lines" % train_main])

    upward = []
    for f, t in text.items():
        d = os.path.dirname(f) or "."
        if d not in LAYER:
            upward.append("%s: folder %s has no floor in LAYER (add it)" % (f, d))
            continue
        for inc in INCLUDE.findall(t):
            idir = os.path.dirname(inc)
            if not idir:
                continue  # the file's own folder
            if idir not in LAYER:
                continue  # a system-style path
            if re.match(r"^models/[a-z0-9]+_host\.c$", f) and MODEL_FILES.match(inc):
                continue  # the host libraries build the model files themselves
            if LAYER[idir] > LAYER[d]:
                upward.append("%s includes %s (floor %d above %d)" % (f, inc, LAYER[idir], LAYER[d]))
    report("no_include_from_a_lower_floor_into_a_higher_one", upward)

    # include cycles among optim/'s files (a .c including a .c, or headers including each other)
    graph = {}
    for f, t in text.items():
        if f.startswith("optim/"):
            graph[f] = {inc for inc in INCLUDE.findall(t) if inc.startswith("optim/") and inc != f}
    cycles, state = [], {}

    def visit(u, path):
        state[u] = 1
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                cycles.append(" -> ".join(path[path.index(v):] + [v]))
            elif not state.get(v):
                visit(v, path + [v])
        state[u] = 2
    for u in sorted(graph):
        if not state.get(u):
            visit(u, [u])
    report("no_include_cycle_in_optim", cycles)

    readme = read("README.md").count("\n")
    report("readme_at_most_150_lines", [] if readme <= 150 else ["README.md has %d lines" % readme])

    kinds = re.findall(r"\b(OPT_[A-Z0-9_]+)\s*=\s*\d+", text["optim/optim.h"])
    rows = text["optim/rules.c"]
    missing = ["%s has no row in optim/rules.c" % k for k in kinds if not re.search(r"/\*\s*%s\b" % k, rows)]
    # a rule's behaviour is chosen through its row, never by testing its kind: in optim/ (but dist_state.c, whose
    # dense and SCAPE blob layouts, shared with the device update, record the kind and differ by it) and in the
    # floors above (trainer/, eval/, export/)
    dispatch = ["%s: %d tests of a rule's kind" % (f, n) for f, n in
                ((f, len(re.findall(r"\bkind\s*[!=]=\s*OPT_", t))) for f, t in text.items()
                 if f.startswith(("optim/", "trainer/", "eval/", "export/")) and f != "optim/dist_state.c")
                if n]
    report("every_rule_has_one_row_and_nothing_dispatches_on_its_kind", missing + dispatch)

    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
