# scripts/module.mk - reproduction engineer: the SCAPE paper's experiments at CPU scale, on a bandwidth-limited
# network on one machine, and its cost model (docs/reproduction.md). The long runs are targets, not tests:
#   make reproduce-gpt / reproduce-llama   scripts/reproduce_cpu.sh gpt|llama (4 ranks, 3 seeds, 2 lengths; gpt ~2.5 h on 2 cores)
#   make netem-bench                       scripts/netem_bench.sh (root: ip netns + tc tbf; about 3 min; NETEM_RUNS=FILE: its --runs)
#   make cost-model                        scripts/cost_model.py project (the paper's settings, every rule)
.PHONY: reproduce-gpt reproduce-llama netem-bench cost-model
reproduce-gpt: train_gpt data
	scripts/reproduce_cpu.sh gpt
reproduce-llama: train_llama data
	scripts/reproduce_cpu.sh llama
netem-bench: train_gpt data
	scripts/netem_bench.sh $(if $(NETEM_RUNS),--runs $(NETEM_RUNS))
cost-model:
	/usr/bin/python3 scripts/cost_model.py project

# tests: the quick mode's table and plot against the logs (~20 s per family), the network script's clean-up after SIGINT
# and its --runs file (root; ~40 s), the cost model's formulas and every rule's bytes per step against the trainer's counters (~3.5 min)
TEST_DEPS += train_gpt data train_llama data-llama
TEST_CMDS += "test/test_reproduce.sh gpt $(DATA)"
TEST_CMDS += "test/test_reproduce.sh llama $(DATA)"
TEST_CMDS += test/test_reproduce_netem.sh
# netem_bench.sh refuses bad arguments and --runs files with one line before it needs root (~2 s)
TEST_CMDS += test/test_netem_args.sh
TEST_CMDS += "/usr/bin/python3 test/test_reproduce_cost.py $(DATA)"
TEST_CMDS += test/test_cluster_recipes.sh
# issue 31: the variants study's tsv and table against the logs (~30 s)
TEST_CMDS += "test/test_study_variants.sh $(DATA)"
# issue 44: every command of README.md's shell blocks at tiny sizes (~90 s; the first `make llama-cpp` longer)
TEST_DEPS += train_gpt train_llama tok export_gguf data data-llama llama-cpp
TEST_CMDS += test/test_readme.sh
# `make train` never removes a run unasked (RESUME=latest, FRESH=1)
TEST_CMDS += test/test_train_default.sh
# issue 42: the regime study's lines against the logs, resume after SIGKILL, the committed tables (~60 s)
TEST_CMDS += "test/test_study_regime.sh $(DATA)"
# issue 45: the frontier study's run names and flags, lines against the logs, a DiLoCo resume after SIGKILL, the
# fronts and bytes to AdamS on made-up lines, the committed tables (~35 s of CPU)
TEST_CMDS += "test/test_study_frontier.sh $(DATA)"
# both studies refuse bad settings and runs.tsv lines with one line; tables never half-written (~10 s)
TEST_CMDS += test/test_study_inputs.sh
# issue 35: the first GPU run's plan (scripts/gpu_check.sh PLAN=1: order, the 8-minute estimate, T=128; ~25 s)
TEST_CMDS += test/test_gpu_check.sh
# issue 30: the batch job on a real one-node SLURM (munged, slurmctld, slurmd started from a scratch dir; ~2 min)
TEST_DEPS += train_gpt data
TEST_CMDS += "test/test_slurm.sh $(DATA)"
