# Two entry points (README): `make demo` runs the main job on the embedded demo; `make test` runs the test suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch 2.14.1 + torchvision 0.29.1 are the pair that imports together on the development machines (open_clip needs both).
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: install demo demo-lm test lint format

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
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -p no:cacheprovider tests

lint:
	$(BIN)/ruff check genalign tests benchmarks scripts

format:
	$(BIN)/ruff check --fix genalign tests benchmarks scripts
	$(BIN)/ruff format genalign tests benchmarks scripts
