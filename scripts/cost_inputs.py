#!/usr/bin/env python3
"""scripts/cost_inputs.py - what scripts/cost_model.py reads besides the trainers' formulas: its arguments (finite
numbers, one-line errors) and scripts/netem_bench.sh's runs.tsv with each run's log.jsonl (`cost_model.py check`).
Every bad input exits with one line naming the file and line, or the argument, and the fix.
Not for: the model itself (scripts/cost_model.py)."""
import argparse
import json
import math
import os
import re
import statistics
import sys

RATE_RE = re.compile(r"[0-9]+(\.[0-9]+)?(kbit|mbit|gbit)")


def load_runs(d):
    """netem_bench.sh's runs.tsv -> {(rate, name): dict(step: mean step s, compute: median compute s, sent: mean bytes
    per step, world)} over steps 2.. (step 1 bootstraps); means, as a local-update rule's outer step is part of a run."""
    out = {}
    path = os.path.join(d, "runs.tsv")
    if not os.path.isfile(path):
        sys.exit("error: %s not found; pass the --out directory of scripts/netem_bench.sh" % path)
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        sys.exit("error: %s: %s; pass the --out directory of scripts/netem_bench.sh" % (path, getattr(e, "strerror", None) or e))
    for i, line in enumerate(lines, 1):
        f = line.split("\t")
        if len(f) != 4 or not RATE_RE.fullmatch(f[0]) and f[0] != "unlimited":
            sys.exit("error: %s:%d: expected rate<TAB>run<TAB>folder<TAB>link bytes (netem_bench.sh writes it); "
                     "run netem_bench.sh again" % (path, i))
        rate, name, run, _ = f
        log = os.path.join(run, "log.jsonl")
        try:
            ev = [json.loads(l) for l in open(log, encoding="utf-8") if l.strip()]
            tr = [e for e in ev if e["event"] == "train" and e["step"] >= 2]
            start = next(e for e in ev if e["event"] == "start")
            for e in tr:
                e["ms"] + e["comm_wait_ms"] + e["comm_bytes_sent"]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, StopIteration) as e:
            sys.exit("error: %s (%s:%d): no readable trainer log (%s); run netem_bench.sh again" % (
                log, path, i, getattr(e, "strerror", None) or type(e).__name__))
        if not tr:
            sys.exit("error: %s has no train steps >= 2; run netem_bench.sh with --steps >= 2" % run)
        out[rate, name] = dict(step=statistics.mean(e["ms"] for e in tr) / 1e3,
                               compute=statistics.median(e["ms"] - e["comm_wait_ms"] for e in tr) / 1e3,
                               sent=statistics.mean(e["comm_bytes_sent"] for e in tr), world=start["world"])
    return out


def rate_bytes_per_s(rate):
    for u, f in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(u):
            return float(rate[:-len(u)]) * f / 8
    return math.inf


def finite(text):
    """an argument's number: finite (nan and inf are refused by argparse with its one usage error)"""
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(text)
    return x


finite.__name__ = "finite number"  # argparse's error: "invalid finite number value: 'nan'"


class OneLineParser(argparse.ArgumentParser):
    """argparse, its errors in one line (the usage left to --help)"""

    def error(self, message):
        sys.stderr.write("error: %s: %s; see %s --help\n" % (self.prog, message, self.prog))
        sys.exit(2)
