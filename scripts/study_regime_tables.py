#!/usr/bin/python3
"""scripts/study_regime_tables.py RUNS_TSV DOC_DIR - the tables and plot of the regime study (issue 42;
scripts/study_regime.sh) from runs.tsv alone: DOC_DIR/regime.md, regime_gap_<spec>_<run>.dat (one line per length:
tokens per parameter, gap mean, sd, min, max, seeds) and, where gnuplot exists, regime_gap.png (the gap of every
rule against tokens per parameter, log x, zero and the paper's +0.02 / +0.04 marked).

Gap = final validation loss minus AdamS's at the same point and seed (same initialization and data order), then
mean +- sample sd [min, max] over the seeds both have. The train gap is the same for the mean train loss over the
last 5% of steps. Overfit = final minus lowest validation loss along the run (AdamS's mean): above zero, the
validation loss rose while training went on, the corpus having been seen too often.
Also, for scripts/study_lib.sh (so runs.tsv's fields are named in one place, FIELDS below):
  --header                                             runs.tsv's header line
  --line LOG SECONDS POINT RUN SEED STEPS COMMIT         the line of a finished run from its log.jsonl and the file
                                                       of its pieces' wall seconds (one number per line)
Not for: the undertrained studies' tables (scripts/study_gap.sh tables)."""
import collections, glob, json, math, os, re, signal, subprocess, sys, shutil, tempfile

TRAIN_TOKENS = 2332677  # the bpe4k State of the Union training shard (`make data`)
TOKENS_PER_STEP = 1024  # 4 ranks x B 4 x T 64
BOUND = {"scape_0.1": 0.02, "scape_0.01": 0.04}  # the paper's reported gaps to dense at 90% and 99% sparsity
MAIN = ["scape_0.1", "scape_0.01", "topk_ef_c0.008", "scape_0.1_catchup_a4", "scape_0.01_catchup_a4", "adamw"]


def params_of(spec):
    """GPT-2 parameter count of a dLcCh..t T v V spec: wte, wpe, L blocks (12 C^2 + 13 C), final layernorm"""
    m = re.fullmatch(r"d(\d+)c(\d+)h\d+t(\d+)v(\d+)", spec)
    L, C, T, V = (int(x) for x in m.groups())
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C, L * (12 * C * C + 13 * C)


def table_head(cols):
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]


def table_row(cells):
    return "| " + " | ".join(cells) + " |"


def mean_sd(xs):
    """mean +- sample sd, or the one value with (1) when there is one"""
    return "%.4f +- %.4f (%d)" % (stats(xs) + (len(xs),)) if len(xs) > 1 else "%.4f (1)" % xs[0]


def stats(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, sd


POINT_RE = re.compile(r"regime(_probe)?_(d[1-9]\d*c[1-9]\d*h[1-9]\d*t[1-9]\d*v[1-9]\d*)_steps([1-9]\d*)")
NUM_RE = re.compile(r"(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
FIELDS = "point run seed val_loss seconds bytes_per_step train_tail val_best commit".split()


def fail(msg):
    """exit with one line on stderr (status 1)"""
    sys.exit("error: " + msg)


def regime_line_error(f):
    """what is wrong with a regime line's fields (scripts/study_lib.sh's train writes them), or None"""
    if len(f) != 9:
        return "%d fields, expected 9 (%s)" % (len(f), ", ".join(FIELDS))
    if not POINT_RE.fullmatch(f[0]):
        return "point '%s' is not regime[_probe]_<spec d..c..h..t..v..>_steps<N>" % f[0]
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", f[1]) or ("_lr" in f[1] and not NUM_RE.fullmatch(f[1].split("_lr", 1)[1])):
        return "run '%s' is no run name (e.g. scape_0.1, adams_lr5e-4)" % f[1]
    if f[0].startswith("regime_probe") and not f[1].startswith("adams_lr"):
        return "the probe's run '%s' is not adams_lr<lr>" % f[1]
    if not re.fullmatch(r"[1-9]\d*", f[2]):
        return "seed '%s' is no positive integer" % f[2]
    if not re.fullmatch(r"\d+", f[4]):
        return "seconds '%s' is no whole number of seconds" % f[4]
    for name, x in zip(("val_loss", "bytes_per_step", "train_tail", "val_best"), (f[3], f[5], f[6], f[7])):
        try:
            if not math.isfinite(float(x)):
                raise ValueError
        except ValueError:
            return "%s '%s' is no finite number" % (name, x)
    if not f[8].strip():
        return "no commit"
    return None


def read_lines(tsv):
    """runs.tsv's lines after its header as field lists (blank lines left out); every regime line (the regime and
    frontier studies' 9 fields) checked, the other studies' lines as they are. Exits with one line naming FILE:LINE
    and the fix on an unreadable file, a missing header or a bad regime line; a repeated (point, run, seed) gets a note
    on stderr (the later line counts)."""
    try:
        with open(tsv, "rb") as fh:
            data = fh.read()
        text = data.decode("utf-8")
    except OSError as e:
        fail("%s: %s; set DOC to the folder of the study's runs.tsv (default docs/study)" % (tsv, e.strerror))
    except UnicodeDecodeError as e:
        fail("%s:%d: not UTF-8 text; remove the line or restore the file (e.g. from git)" % (
            tsv, data[:e.start].count(b"\n") + 1))
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0].split("\t")[0] != "point":
        fail("%s:1: no header line (%s, tab-separated); add it above the runs' lines" % (tsv, ", ".join(FIELDS)))
    rows, seen = [], {}
    for i, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        f = line.split("\t")
        if f[0].startswith("regime"):
            err = regime_line_error(f)
            if err:
                fail("%s:%d: %s; fix or remove the line (scripts/study_regime.sh run writes it again)" % (tsv, i, err))
            key = tuple(f[:3])
            if key in seen:
                print("note: %s:%d repeats the run of line %d (%s); the later line counts" % (
                    tsv, i, seen[key], " ".join(key)), file=sys.stderr)
            seen[key] = i
        rows.append(f)
    return rows


def read_runs(tsv):
    """runs.tsv's regime lines (point regime_...; the regime and frontier studies' 9 fields) as point -> run -> seed ->
    {val, secs, bytes, tail, best, commit}; a later line of the same (point, run, seed) wins. A bad line exits
    naming the file and the line (read_lines)."""
    by = collections.defaultdict(lambda: collections.defaultdict(dict))  # point -> run -> seed -> row
    for f in read_lines(tsv):
        if not f[0].startswith("regime"):
            continue
        by[f[0]][f[1]][int(f[2])] = {"val": float(f[3]), "secs": int(f[4]), "bytes": float(f[5]),
                                     "tail": float(f[6]), "best": float(f[7]), "commit": f[8]}
    return by


# --- outputs: whole or absent ------------------------------------------------------------------------------------
_temps = []  # temporary files not yet renamed into place, removed on an error or a signal


class Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived while the tables were being written"""


def _stop(signum, frame):
    raise Stopped(signum)


def temp_beside(path):
    """a new empty file in path's folder (created exclusively: never an existing file or a symlink's target),
    removed by run_safely unless renamed into place"""
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=os.path.dirname(path) or ".")
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # as a file open() makes, not mkstemp's 0600
    os.close(fd)
    _temps.append(tmp)
    return tmp


def write_temp(path, text):
    """text written whole into a temp_beside(path); its name"""
    tmp = temp_beside(path)
    with open(tmp, "w") as f:
        f.write(text)
    return tmp


def put_in_place(pairs):
    """rename each (temporary, path) over its path: a symlink there is replaced, not followed"""
    for tmp, path in pairs:
        os.replace(tmp, path)
        _temps.remove(tmp)


def say(text):
    """text on stdout; a reader that went away (| head) ends the program quietly, the files being written"""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


def run_safely(fn, doc, *args):
    """fn(*args), turning what can go wrong while writing into DOC (an OSError such as a full disk or a read-only
    folder, a signal) into one line and a non-zero exit, with every temporary file removed and the outputs as they
    were or complete"""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    try:
        fn(*args)
    except (OSError, Stopped) as e:
        for tmp in _temps:
            try:
                os.remove(tmp)
            except OSError:
                pass
        if isinstance(e, Stopped):
            signum = e.args[0]
            sys.stderr.write("error: stopped by %s while writing the tables into %s (left as they were or complete); "
                             "run `tables` again\n" % (signal.Signals(signum).name, doc))
            sys.exit(128 + signum)
        sys.exit("error: writing the tables into %s: %s%s; free space or set DOC to a writable folder" % (
            doc, e.strerror or e, " (%s)" % e.filename if getattr(e, "filename", None) else ""))


def paired_gap(runs, run, key="val", base="adams"):
    """RUN's KEY minus BASE's in one point's runs (run -> seed -> row), paired by seed over the seeds both have:
    (mean, sample sd, min, max, seeds), or None where they share no seed"""
    a, x = runs.get(base, {}), runs.get(run, {})
    common = sorted(set(a) & set(x))
    if not common:
        return None
    d = [x[s][key] - a[s][key] for s in common]
    return stats(d) + (min(d), max(d), len(common))


def gap_cell(g):
    """a paired gap as mean +- sd [min, max] (seeds), or the one difference with (1); empty for None"""
    return "%+.3f +- %.3f [%+.3f, %+.3f] (%d)" % g if g and g[4] > 1 else ("%+.3f (1)" % g[0] if g else "")


def regime_run(run):
    """whether a run name is one scripts/study_regime.sh trains (AdamS at any lr, MAIN's, SCAPE's lr controls)"""
    return run == "adams" or run in MAIN or re.fullmatch(r"(adams|scape_0\.0?1)_lr.*", run) is not None


def main(tsv, doc):
    by = read_runs(tsv)

    def gap(point, run, key="val", base="adams"):
        return paired_gap(by[point], run, key, base)

    cell = gap_cell

    specs = sorted({re.search(r"_(d\d+c\d+h\d+t\d+v\d+)_steps", p).group(1) for p in by}, key=lambda s: params_of(s)[0])
    commits = sorted({r["commit"] for p in by for x in by[p].values() for r in x.values()})
    out = ["# SCAPE's gap to dense AdamS against tokens per parameter (issue 42; scripts/study_regime.sh)", "",
           "Tiny GPT-2 models on the bpe4k State of the Union corpus (%s training tokens), 4 ranks x B 4 x T 64 = "
           "%d tokens per step, the authors' GPT-345M optimizer settings and schedule fractions at every length (beta2 "
           "0.999, weight decay 0.01, clip 1, lr warm-up 5%% and cosine to lr/15, density 1.0 -> d over 10%% of the "
           "run, norms sparsified), every rule at AdamS's probed lr. Gap: final validation loss (the whole validation "
           "shard) minus AdamS's, paired by seed: mean +- sample sd [min, max] (seeds). Train gap: the same for the "
           "mean train loss over the last 5%% of steps. The paper reports +0.02 (d 0.1) and +0.04 (d 0.01) at ~150 "
           "tokens per parameter. Trainer: commit %s." % (format(TRAIN_TOKENS, ","), TOKENS_PER_STEP,
                                                         ", ".join(commits)), ""]
    dat = {}
    for spec in specs:
        P, blocks = params_of(spec)
        probe = sorted((p for p in by if p.startswith("regime_probe_%s_" % spec)))
        pts = sorted((p for p in by if p.startswith("regime_%s_steps" % spec)), key=lambda p: int(p.rsplit("steps", 1)[1]))
        out += ["## %s: %s parameters (%.0f%% in the blocks)" % (spec, format(P, ","), 100.0 * blocks / P), ""]
        for p in probe:
            items = sorted(((float(r.split("_lr")[1]), x[1]["val"]) for r, x in by[p].items() if 1 in x))
            best = min(items, key=lambda t: t[1]) if items else None
            out += ["lr probe (AdamS, seed 1, %s steps): %s; lowest: %g." % (
                format(int(p.rsplit("steps", 1)[1]), ","), ", ".join("%g: %.4f" % t for t in items), best[0]), ""]
        if not pts:
            continue
        runs = [r for r in MAIN if any(r in by[p] for p in pts)]
        out += table_head(["steps", "tokens/param", "epochs", "AdamS val", "AdamS train tail", "overfit"] + runs + ["cost (h)"])
        for p in pts:
            steps = int(p.rsplit("steps", 1)[1])
            tpp, ep = steps * TOKENS_PER_STEP / P, steps * TOKENS_PER_STEP / TRAIN_TOKENS
            a = by[p].get("adams", {})
            av = mean_sd([r["val"] for r in a.values()]) if a else ""
            at = "%.4f" % stats([r["tail"] for r in a.values()])[0] if a else ""
            of = "%+.3f" % stats([r["val"] - r["best"] for r in a.values()])[0] if a else ""
            cells = []
            for r in runs:
                g = gap(p, r)
                cells.append(cell(g))
                if g:
                    dat.setdefault((spec, r), []).append((tpp,) + g)
            # the regime study's own runs: the frontier study's other settings share its points (runs.tsv)
            cost = sum(x["secs"] for r, rr in by[p].items() if regime_run(r) for x in rr.values()) / 3600
            out.append(table_row([format(steps, ","), "%.1f" % tpp, "%.1f" % ep, av, at, of] + cells + ["%.2f" % cost]))
        out += ["", "Train gap (last 5% of steps) and bytes sent per step and rank (mean over steps 2..):", ""]
        out += table_head(["steps"] + ["%s train gap" % r for r in runs] + ["AdamS bytes"] + ["%s bytes" % r for r in runs])
        for p in pts:
            bytes_of = lambda r: "%.0f" % stats([x["bytes"] for x in by[p][r].values()])[0] if r in by[p] else ""
            out.append(table_row([format(int(p.rsplit("steps", 1)[1]), ",")] + [cell(gap(p, r, "tail")) for r in runs] +
                                 [bytes_of("adams")] + [bytes_of(r) for r in runs]))
        # SCAPE at lr/2, lr, 2 lr against AdamS at lr, seed 1: is SCAPE's lead an lr effect?
        for p in pts:
            ctl = sorted(r for r in by[p] if re.fullmatch(r"scape_0\.0?1_lr.*", r))
            if not ctl or 1 not in by[p].get("adams", {}):
                continue
            a1 = by[p]["adams"][1]["val"]
            out += ["", "SCAPE at other lrs (seed 1, %s steps; gap to AdamS at the probed lr, %.4f):" % (
                format(int(p.rsplit("steps", 1)[1]), ","), a1), "", "| run | lr | val | gap |", "|---|---|---|---|"]
            for d in ("scape_0.1", "scape_0.01"):
                rows = [(float(r.split("_lr")[1]), r) for r in ctl if r.startswith(d + "_lr")]
                if 1 in by[p].get(d, {}):
                    rows.append((None, d))
                for lr, r in sorted(rows, key=lambda t: (t[0] is None, t[0] or 0)):
                    v = by[p][r][1]["val"]
                    out.append("| %s | %s | %.4f | %+.3f |" % (r, "%g" % lr if lr else "probed", v, v - a1))
        # AdamS at lr/2 and 2 lr where the run is long: is dense AdamS's loss to the compressed rules its lr?
        for p in pts:
            alt = sorted((float(r.split("_lr")[1]), r) for r in by[p] if r.startswith("adams_lr") and 1 in by[p][r])
            if not alt or 1 not in by[p].get("adams", {}):
                continue
            lrs = alt + [(None, "adams")]
            best_lr, best_r = min(lrs, key=lambda t: by[p][t[1]][1]["val"])
            bv = by[p][best_r][1]["val"]
            out += ["", "AdamS at other lrs (seed 1, %s steps), and each rule's seed 1 against the best of them (%s, %.4f):"
                    % (format(int(p.rsplit("steps", 1)[1]), ","), "%g" % best_lr if best_lr else "the probed lr", bv), "",
                    "| run | lr | val | gap to the best AdamS |", "|---|---|---|---|"]
            for lr, r in sorted(lrs, key=lambda t: (t[0] is None, t[0] or 0)):
                out.append("| %s | %s | %.4f | %+.3f |" % (r, "%g" % lr if lr else "probed", by[p][r][1]["val"],
                                                             by[p][r][1]["val"] - bv))
            for r in runs:
                if r != "adams" and 1 in by[p].get(r, {}):
                    out.append("| %s | probed | %.4f | %+.3f |" % (r, by[p][r][1]["val"], by[p][r][1]["val"] - bv))
        out.append("")
    # every file into a temporary one first, then all renamed into place: complete or as they were
    md = os.path.join(doc, "regime.md")
    files = [(write_temp(md, "\n".join(out) + "\n"), md)]
    for (spec, r), rows in dat.items():
        path = os.path.join(doc, "regime_gap_%s_%s.dat" % (spec, r))
        files.append((write_temp(path, "# tokens_per_param mean sd min max seeds\n" +
                                 "".join("%.3f %.6f %.6f %.6f %.6f %d\n" % t for t in rows)), path))
    stale = [old for old in glob.glob(os.path.join(doc, "regime_gap_*.dat")) if old not in {p for _, p in files}]
    put_in_place(files)
    for old in stale:
        os.remove(old)
    png = os.path.join(doc, "regime_gap.png")
    drawn = False
    if dat and shutil.which("gnuplot"):
        tmp = temp_beside(png)
        series = ", ".join("'%s' using 1:2:4:5 with yerrorlines pt 7 title '%s %s'" % (
            os.path.join(doc, "regime_gap_%s_%s.dat" % k), k[0], k[1]) for k in sorted(dat))
        script = ("set terminal pngcairo size 1000,600 noenhanced; set output '%s'\n"
                  "set logscale x; set xrange [1:300]; set xlabel 'tokens per parameter'; set ylabel 'final val loss minus AdamS (nats, "
                  "mean, seed min..max)'\nset key outside right; set title 'SCAPE gap to AdamS against tokens per "
                  "parameter (issue 42)'\nplot %s, 0 with lines lc 'black' notitle, 0.02 with lines dt 2 lc 'black' "
                  "title 'paper +0.02 (d 0.1)', 0.04 with lines dt 3 lc 'black' title 'paper +0.04 (d 0.01)'\n"
                  % (tmp, series))
        if subprocess.run(["gnuplot"], input=script.encode(), stderr=subprocess.DEVNULL).returncode == 0 \
                and os.path.getsize(tmp) > 0:
            put_in_place([(tmp, png)])
            drawn = True
        else:
            print("note: gnuplot could not draw %s" % png, file=sys.stderr)
    elif dat:
        print("note: no gnuplot; %s not drawn" % png, file=sys.stderr)
    if not drawn and os.path.lexists(png):
        os.remove(png)  # a plot of other lines than the tables'
    say("\n".join(out) + "\n")


def run_line(log, secs_path, point, run, seed, steps, commit):
    """runs.tsv's line (FIELDS, tab-separated) of a run of STEPS steps: the final validation loss, the wall seconds of
    all its pieces, the mean bytes sent per step and rank over steps 2.., the mean train loss over the last 5% of
    steps and the lowest validation loss along the run, from its log.jsonl (the last record of a step wins: a resumed
    piece repeats the steps after its checkpoint). Exits with one line naming the file or argument when the log lacks
    a step, a file cannot be read or an argument is of the wrong form."""
    if not re.fullmatch(r"[1-9][0-9]*", steps):
        sys.exit("error: --line STEPS '%s' is not a positive integer; pass the run's --steps" % steps)
    steps = int(steps)
    train, val = {}, {}
    try:
        with open(log) as f:
            for line in f:
                try:
                    o = json.loads(line)
                except ValueError:
                    continue  # a line cut by a stop
                if not isinstance(o, dict) or not isinstance(o.get("step"), int):
                    continue  # not a record of a step
                if o.get("event") == "train" and isinstance(o.get("train_loss"), (int, float)) \
                        and isinstance(o.get("comm_bytes_sent"), (int, float)):
                    train[o["step"]] = o
                if o.get("event") == "val" and isinstance(o.get("val_loss"), (int, float)):
                    val[o["step"]] = o["val_loss"]
    except (OSError, UnicodeDecodeError) as e:
        sys.exit("error: --line LOG %s: %s; pass the run's log.jsonl" % (log, getattr(e, "strerror", None) or e))
    if steps not in val:
        sys.exit("error: %s: no validation at step %d; finish the run (--resume latest) or pass its --steps"
                 % (log, steps))
    missing = [s for s in range(1, steps + 1) if s not in train]
    if missing:
        sys.exit("error: %s: %d train steps missing (first %d); finish the run (--resume latest) or pass its log.jsonl"
                 % (log, len(missing), missing[0]))
    sent = [train[s]["comm_bytes_sent"] for s in range(2, steps + 1)] or [train[1]["comm_bytes_sent"]]
    tail = [train[s]["train_loss"] for s in range(steps - max(1, steps // 20) + 1, steps + 1)]
    try:
        with open(secs_path) as f:
            secs = sum(int(x) for x in f.read().split())
    except (OSError, UnicodeDecodeError) as e:
        sys.exit("error: --line SECONDS %s: %s; pass the file of the run's wall seconds (one number per line)"
                 % (secs_path, getattr(e, "strerror", None) or e))
    except ValueError:
        sys.exit("error: --line SECONDS %s: not whole numbers, one per line; pass the file of the run's wall seconds"
                 % secs_path)
    row = {"point": point, "run": run, "seed": seed, "val_loss": "%.6f" % val[steps], "seconds": str(secs),
           "bytes_per_step": "%.0f" % (sum(sent) / len(sent)), "train_tail": "%.6f" % (sum(tail) / len(tail)),
           "val_best": "%.6f" % min(val.values()), "commit": commit}
    return "\t".join(row[k] for k in FIELDS)


if __name__ == "__main__":
    USAGE = "usage: study_regime_tables.py RUNS_TSV DOC_DIR | --header | --line LOG SECONDS POINT RUN SEED STEPS COMMIT"
    if sys.argv[1:2] == ["--header"]:
        if len(sys.argv) != 2:
            sys.exit("error: --header takes no arguments (got %d); %s" % (len(sys.argv) - 2, USAGE))
        print("\t".join(FIELDS))
    elif sys.argv[1:2] == ["--line"]:
        if len(sys.argv) != 9:
            sys.exit("error: --line takes 7 arguments, LOG SECONDS POINT RUN SEED STEPS COMMIT (got %d)"
                     % (len(sys.argv) - 2))
        print(run_line(*sys.argv[2:]))
    elif sys.argv[1:2] in (["-h"], ["--help"]):
        print(__doc__)
    elif len(sys.argv) != 3 or sys.argv[1].startswith("--"):
        sys.exit(USAGE)
    else:
        run_safely(main, sys.argv[2], sys.argv[1], sys.argv[2])
