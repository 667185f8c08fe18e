#!/usr/bin/env python3
"""test/test_reproduce_cost.py - scripts/cost_model.py's formulas against hand-computed cases and the published
parameter counts of GPT-2 124M and Llama-2 7B. Prints "ok name" / "FAIL name: expected vs actual"; exits non-zero
on any failure. Not for: checking the projection against the paper (that is a report, not a test)."""
import importlib.util
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("cost_model", os.path.join(here, "..", "scripts", "cost_model.py"))
cm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cm)
fails = 0


def check(name, expected, actual, rel=1e-12):
    global fails
    if abs(expected - actual) <= rel * max(1.0, abs(expected)):
        print("ok", name)
    else:
        print("FAIL %s: expected %r, got %r" % (name, expected, actual))
        fails += 1


# 2 (N-1) alpha + 2 (N-1)/N S/beta = 6 us + 1.5 s
check("allreduce_alpha_beta", 1.500006, cm.ring_allreduce_s(1000, 4, 1e-6, 1000))
check("allreduce_one_rank_is_free", 0.0, cm.ring_allreduce_s(1e9, 1, 1e-6, 1.0))
# (N-1)/N * 800 / 100 = 6 s, plus 3 alphas of 2 s
check("allgather_alpha_beta", 12.0, cm.ring_allgather_s(800, 4, 2.0, 100))
check("bytes_dense", 6e6, cm.bytes_sent_dense(1e6, 4))
# K = 1e4: 2*4*1e4*3/4 = 60000, mask 1e6/8*3/4 = 93750
check("bytes_scape_d0.01", 153750.0, cm.bytes_sent_scape(1e6, 0, 0.01, 4))
# dense parts always travel: K = 0.1*1e6 + 1000
check("scape_k_keeps_dense", 101000.0, cm.scape_k(1e6, 1000, 0.1))
# all-reduce 4e6 B over 2 ranks at 1e6 B/s = 4 s, half hidden -> 1 + 2
check("step_dense_overlap", 3.0, cm.step_dense_s(1.0, 1e6, 2, 0.0, 1e6, overlap=0.5))
# payload 4e5 B -> 0.4 s; mask 125000 B -> 0.0625 s, hidden behind t_c = 1 s
check("step_scape_mask_hidden", 1.4, cm.step_scape_s(1.0, 1e6, 0, 0.1, 2, 0.0, 1e6))
# with t_c = 0.01 s, 0.0525 s of the mask all-gather shows
check("step_scape_mask_exposed", 0.4625, cm.step_scape_s(0.01, 1e6, 0, 0.1, 2, 0.0, 1e6))
check("step_scape_topk_added", 1.65, cm.step_scape_s(1.0, 1e6, 0, 0.1, 2, 0.0, 1e6, t_topk=0.25))
# d = 1 moves the same payload as dense, plus the mask
check("scape_d1_payload_equals_dense", cm.bytes_sent_dense(1e6, 4) + 1e6 / 8 * 3 / 4, cm.bytes_sent_scape(1e6, 0, 1.0, 4))
# published totals: GPT-2 small 124,439,808; Llama-2 7B 6,738,415,616
check("gpt2_124M_params", 124439808, sum(cm.gpt2_params(12, 768)))
check("llama2_7B_params", 6738415616, sum(cm.llama_params(32, 4096, 11008, 32, 32, 32000)))
check("rate_parse_mbit", 500e6 / 8, cm.rate_bytes_per_s("500mbit"))
sys.exit(1 if fails else 0)
