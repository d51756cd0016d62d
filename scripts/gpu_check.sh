#!/usr/bin/env bash
# The GPU check (README, "GPU check"): five measurements on one GPU in a few minutes (at most 7.5), written to
# benchmarks/gpu_results.md. Models are built from configs: no network. Arguments go to `python -m benchmarks.gpu_check`
# (--parts a b c d e, --device cuda:1, --out FILE; --smoke --device cpu for tiny sizes on a CPU). Part b needs vLLM in
# its own environment (docs/vllm.md): GENALIGN_VLLM_PYTHON=~/venvs/vllm/bin/python scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
HF_HUB_OFFLINE=1 exec "$PYTHON" -m benchmarks.gpu_check "$@"
