#!/usr/bin/python3
"""scripts/study_frontier_tables.py RUNS_TSV DOC_DIR [--spec SPEC] [--lengths "1000 10000"] - the tables and plot of
the frontier study (issue 45; scripts/study_frontier.sh) from runs.tsv alone: DOC_DIR/frontier.md and, where gnuplot
exists, frontier.png (final validation loss against bytes sent per step and rank, log x, one line per rule through its
Pareto front, one panel per length).

Per length (point regime_<spec>_steps<N>), every setting at the probed lr (runs with an _lr suffix are left out and
counted): mean bytes sent per step and rank (steps 2..; the trainer's comm_bytes_sent), final validation loss mean +-
sample sd (seeds), its gap to dense AdamS and to dense AdamW paired by seed (scripts/study_regime_tables.py's cell),
and wall seconds per run. A rule's Pareto front: its settings that no other setting of the rule matches or beats in
both mean bytes and mean loss. Bytes to come within +0.02 / +0.05 of AdamS: along the front from fewest bytes, the
first setting whose mean loss is at most AdamS's mean plus the margin, interpolated linearly in log bytes against loss
with the setting before it ("<=" where the cheapest setting already does; "not reached" where none does; "dense" for
the dense rules). Missing seeds and settings render with their n.
Not for: the regime study's gaps against tokens per parameter (scripts/study_regime_tables.py)."""
import argparse, math, os, re, shutil, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from study_regime_tables import (TRAIN_TOKENS, params_of, read_runs, paired_gap, gap_cell, stats,
                                 mean_sd, table_head, table_row, write_temp, temp_beside, put_in_place, say,
                                 run_safely)

NUM = r"(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
# (pattern of a run name, rule key, label); scripts/study_lib.sh's study_flags names, in the tables' order
RULES = [(r"adams", "adams", "AdamS (dense)"), (r"adamw", "adamw", "AdamW (dense)"),
         (r"scape_" + NUM, "scape", "SCAPE"), (r"scape_" + NUM + r"_catchup_a" + NUM, "scape_catchup", "SCAPE catchup"),
         (r"topk_ef_c" + NUM, "topk-ef", "topk-ef"), (r"powersgd_r(\d+)", "powersgd", "PowerSGD"),
         (r"onebit_adam_f" + NUM, "onebit-adam", "1-bit Adam"), (r"demo_k(\d+)", "demo", "DeMo"),
         (r"diloco_h(\d+)", "diloco", "DiLoCo"), (r"sparseloco_h(\d+)", "sparseloco", "SparseLoCo (own masks)"),
         (r"sparseloco_shared_h(\d+)", "sparseloco_shared", "SparseLoCo (shared mask)")]
DENSE = ("adams", "adamw")
MARGINS = (0.02, 0.05)
COLORS = ["#000000", "#7f7f7f", "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
          "#17becf", "#bcbd22", "#393b79"]


def rule_of(run):
    """(rule key, label, order) of a run name at the probed lr, or None (an _lr suffix, or no rule's name); the
    catchup variant's rule carries its cap (scape_catchup_a4)"""
    for i, (pat, key, label) in enumerate(RULES):
        m = re.fullmatch(pat, run)
        if m:
            if key == "scape_catchup":
                return "%s_a%s" % (key, m.group(2)), "%s a%s" % (label, m.group(2)), i
            return key, label, i
    return None


def nrange(ns):
    """seed counts as 3, or 1-3 where they differ"""
    return "%d" % ns[0] if ns[0] == ns[-1] else "%d-%d" % (ns[0], ns[-1])


def commas(x):
    return format(int(round(x)), ",")


def pareto(points):
    """the settings (name, bytes, loss) no other one matches or beats in both, by bytes ascending"""
    front = [p for p in points if not any(q is not p and q[1] <= p[1] and q[2] <= p[2] and (q[1] < p[1] or q[2] < p[2])
                                          for q in points)]
    return sorted(front, key=lambda p: (p[1], p[2]))


def bytes_to_reach(front, target):
    """(bytes, how) along a front by bytes ascending: the fewest bytes whose loss is at most target, interpolated
    linearly in log bytes between the last setting above it and the first at or below it; how is 'interpolated',
    'cheapest' (the first setting already reaches it) or None (none does)"""
    for i, (_, b, l) in enumerate(front):
        if l <= target:
            if i == 0:
                return b, "cheapest"
            _, b0, l0 = front[i - 1]
            t = (target - l0) / (l - l0)
            return math.exp(math.log(b0) + t * (math.log(b) - math.log(b0))), "interpolated"
    return None, None


def main():
    ap = argparse.ArgumentParser(description="frontier study tables (scripts/study_frontier.sh)")
    ap.add_argument("tsv")
    ap.add_argument("doc")
    ap.add_argument("--spec", default="d4c64h4t64v4096")
    ap.add_argument("--lengths", default="1000 10000")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args()
    try:
        lengths = sorted(int(x) for x in a.lengths.split())
        P, blocks = params_of(a.spec)
        if not lengths or min(lengths + [a.ranks, a.batch, a.seq, P]) < 1:
            raise ValueError
    except (ValueError, AttributeError):
        sys.exit("error: study_frontier_tables.py: --spec %s / --lengths '%s' / --ranks %d --batch %d --seq %d: expected "
                 "a d<L>c<C>h<NH>t<T>v<V> spec, positive step counts and positive sizes" % (
                     a.spec, a.lengths, a.ranks, a.batch, a.seq))
    by = read_runs(a.tsv)
    probe = {}
    for p in by:
        if p.startswith("regime_probe_%s_steps" % a.spec):
            probe.update({float(r.split("_lr")[1]): x[1]["val"] for r, x in by[p].items() if 1 in x and "_lr" in r})
    lr = "lr %g (the regime study's AdamS probe, lowest of %s)" % (min(probe, key=probe.get), ", ".join(
        "%g: %.4f" % t for t in sorted(probe.items()))) if probe else "the regime study's AdamS probe's lr (runs.tsv has no probe lines)"
    tokens = a.ranks * a.batch * a.seq

    sections, commits, panels = [], set(), []
    for L in lengths:
        point = "regime_%s_steps%d" % (a.spec, L)
        runs = by.get(point, {})
        rows, left_out = [], sorted(r for r in runs if rule_of(r) is None)
        for r, seeds in runs.items():
            ru = rule_of(r)
            if ru is None or not seeds:
                continue
            commits.update(x["commit"] for x in seeds.values())
            rows.append({"run": r, "rule": ru[0], "label": ru[1], "order": ru[2], "n": len(seeds),
                         "bytes": stats([x["bytes"] for x in seeds.values()])[0],
                         "loss": stats([x["val"] for x in seeds.values()])[0],
                         "vals": [seeds[s]["val"] for s in sorted(seeds)],
                         "secs": stats([x["secs"] for x in seeds.values()])[0],
                         "hours": sum(x["secs"] for x in seeds.values()) / 3600})
        rows.sort(key=lambda x: (x["order"], x["rule"], -x["bytes"], x["run"]))
        tpp, ep = L * tokens / P, L * tokens / TRAIN_TOKENS
        out = ["## %s steps (%.1f tokens per parameter, %.1f epochs)" % (format(L, ","), tpp, ep), ""]
        if not rows:
            sections.append(out + ["No runs at this length yet.", ""])
            continue
        rules = {}
        for x in rows:
            rules.setdefault(x["rule"], []).append(x)
        fronts = {k: pareto([(x["run"], x["bytes"], x["loss"]) for x in v]) for k, v in rules.items()}
        on_front = {p[0] for f in fronts.values() for p in f}
        ads = runs.get("adams", {})
        dense_bytes = stats([x["bytes"] for x in ads.values()])[0] if ads else None
        adams_loss = stats([x["val"] for x in ads.values()])[0] if ads else None
        seeds_n = sorted({x["n"] for x in rows})
        out += ["%d setting%s, %s seed%s each, %.2f h of runs%s." % (
            len(rows), "s" if len(rows) > 1 else "", nrange(seeds_n), "s" if seeds_n[-1] > 1 else "",
            sum(x["hours"] for x in rows),
            "; left out (other lrs or names): " + ", ".join(left_out) if left_out else ""), ""]
        out += table_head(["setting", "rule", "bytes/step/rank", "of dense", "val loss", "gap to AdamS",
                           "gap to AdamW", "wall s/run", "on front"])
        for x in rows:
            g_s = "base" if x["run"] == "adams" else gap_cell(paired_gap(runs, x["run"], "val", "adams"))
            g_w = "base" if x["run"] == "adamw" else gap_cell(paired_gap(runs, x["run"], "val", "adamw"))
            out.append(table_row([x["run"], x["label"], commas(x["bytes"]),
                                  "%.2f%%" % (100 * x["bytes"] / dense_bytes) if dense_bytes else "",
                                  mean_sd(x["vals"]), g_s, g_w, "%.0f" % x["secs"],
                                  "yes" if x["run"] in on_front else ""]))
        out += ["", "Pareto fronts (setting mean bytes/step/rank: mean val loss (seeds), fewest bytes first) and each "
                "rule's settings off its front:", ""]
        out += table_head(["rule", "front", "dominated"])
        for k, v in rules.items():
            f = fronts[k]
            n_of = {x["run"]: x["n"] for x in v}
            out.append(table_row([v[0]["label"], ", ".join("%s %s: %.4f (%d)" % (p[0], commas(p[1]), p[2], n_of[p[0]])
                                                           for p in f),
                                  ", ".join(sorted(x["run"] for x in v if x["run"] not in on_front))]))
        if adams_loss is None:
            out += ["", "Bytes to come within +0.02 / +0.05 of dense AdamS: no AdamS line at this length yet."]
        else:
            out += ["", "Bytes per step and rank each rule needs to come within +0.02 / +0.05 of dense AdamS's mean "
                    "(%.4f, %d seeds; dense: %s), along its front:" % (adams_loss, len(ads), commas(dense_bytes)), ""]
            out += table_head(["rule", "+0.02", "+0.05", "its best: gap to AdamS (setting, seeds)"])
            for k, v in rules.items():
                f = fronts[k]
                best = f[-1]
                cells = []
                for m in MARGINS:
                    if k in DENSE:
                        cells.append("dense")
                        continue
                    b, how = bytes_to_reach(f, adams_loss + m)
                    cells.append("not reached" if b is None else "%s%s (%.2f%%)" % (
                        "<= " if how == "cheapest" else "", commas(b), 100 * b / dense_bytes))
                out.append(table_row([v[0]["label"]] + cells + ["%+.3f (%s, %d)" % (
                    best[2] - adams_loss, best[0], {x["run"]: x["n"] for x in v}[best[0]])]))
        out.append("")
        sections.append(out)
        panels.append((L, rules, fronts, adams_loss))

    head = ["# The loss-against-bytes frontier of every update rule (issue 45; scripts/study_frontier.sh)", "",
            "GPT-2 %s (%s parameters) on the bpe4k State of the Union corpus (%s training tokens), %d ranks x B %d x "
            "T %d = %d tokens per step, the authors' GPT-345M optimizer settings and schedule fractions (beta2 0.999, weight "
            "decay 0.01, clip 1, lr warm-up 5%% and cosine to lr/15; SCAPE's density 1.0 -> d over 10%% of the run, "
            "PowerSGD dense over it), every run at %s. Bytes: mean bytes each rank sends per step (steps 2..). Val "
            "loss: final, over the whole validation shard, mean +- sample sd (seeds). Gaps: paired by seed, mean +- sd "
            "[min, max] (seeds). Front: a rule's settings no other setting of it matches or beats in both mean bytes "
            "and mean loss. Bytes to come within a margin of AdamS: where a setting's mean loss is AdamS's mean plus "
            "the margin, interpolated linearly in log bytes along the front (\"<=\": its cheapest setting already does). Trainer: commit %s%s." % (
                a.spec, format(P, ","), format(TRAIN_TOKENS, ","), a.ranks, a.batch, a.seq, tokens, lr,
                ", ".join(sorted(commits)) if commits else "none yet",
                " (7753401fc518: the regime study's lines, whose update digests, dev/update_digest.sh, equal the later "
                "trainer's for every rule both have)" if "7753401fc518" in commits and len(commits) > 1 else ""), ""]
    text = "\n".join(head + [l for s in sections for l in s]) + "\n"
    md = os.path.join(a.doc, "frontier.md")
    put_in_place([(write_temp(md, text), md)])
    plot(os.path.join(a.doc, "frontier.png"), panels)
    say(text)


def plot(png, panels):
    """frontier.png by gnuplot: a panel per length with data, x bytes per step and rank (log), y final val loss; a
    rule's front as a line (its seeds' range in the key), its dominated settings as open points, AdamS +0.02 / +0.05
    dashed. No panel (no data): no file. No gnuplot: a note on stderr."""
    if os.path.lexists(png):
        os.remove(png)  # drawn again below into a temporary file, or absent
    if not panels:
        return
    if not shutil.which("gnuplot"):
        print("note: no gnuplot; %s not drawn" % png, file=sys.stderr)
        return
    tmp = temp_beside(png)
    order, keys = {}, []
    for _, rules, _, _ in panels:
        order.update({k: v[0]["order"] for k, v in rules.items()})
    keys = sorted(order, key=lambda k: (order[k], k))
    color = {k: COLORS[order[k] % len(COLORS)] for k in keys}  # a rule's colour stays as others' lines arrive
    xs = [x["bytes"] for _, rules, _, _ in panels for v in rules.values() for x in v]
    lo, hi = 10 ** math.floor(math.log10(min(xs))), 10 ** math.ceil(math.log10(max(xs)))
    hi = hi * 10 if hi == lo else hi
    s = ["set terminal pngcairo size %d,650 noenhanced" % (560 * len(panels) + 260), "set output '%s'" % tmp,
         "set multiplot layout 1,%d title 'final validation loss against bytes per step and rank (issue 45)'" % len(panels)]
    for i, (L, rules, fronts, adams_loss) in enumerate(panels):
        series, blocks = [], []
        for k in keys:
            if k not in rules:
                continue
            v = rules[k]
            f = fronts[k]
            on = {p[0] for p in f}
            ns = sorted({x["n"] for x in v})
            name = "$f%d_%d" % (i, keys.index(k))
            blocks += [name + " << EOD"] + ["%.3f %.6f" % (p[1], p[2]) for p in f] + ["EOD"]
            series.append("%s using 1:2 with linespoints lw 2 pt 7 ps 1.2 lc rgb '%s' title '%s (n %s)'" % (
                name, color[k], v[0]["label"], nrange(ns)))
            off = [x for x in v if x["run"] not in on]
            if off:
                oname = "$o%d_%d" % (i, keys.index(k))
                blocks += [oname + " << EOD"] + ["%.3f %.6f" % (x["bytes"], x["loss"]) for x in off] + ["EOD"]
                series.append("%s using 1:2 with points pt 6 ps 1.2 lc rgb '%s' notitle" % (oname, color[k]))
        if adams_loss is not None:
            series += ["%.6f with lines dt 2 lc rgb '#555555' title 'AdamS +0.02'" % (adams_loss + 0.02),
                       "%.6f with lines dt 3 lc rgb '#555555' title 'AdamS +0.05'" % (adams_loss + 0.05)]
        s += blocks + ["set logscale x", "set xrange [%g:%g]" % (lo, hi), "set format x '%.0e'", "set xlabel 'bytes sent per step and rank'",
                       "set ylabel 'final validation loss (mean over seeds)'", "set grid",
                       "set key top right font ',9'",
                       "set title '%s steps'" % format(L, ","), "plot " + ", ".join(series)]
    s.append("unset multiplot")
    if subprocess.run(["gnuplot"], input="\n".join(s).encode(), stderr=subprocess.PIPE).returncode \
            or not os.path.getsize(tmp):
        print("note: gnuplot could not draw %s" % png, file=sys.stderr)
        return
    put_in_place([(tmp, png)])


if __name__ == "__main__":
    run_safely(main, sys.argv[2] if len(sys.argv) > 2 else "DOC_DIR")
