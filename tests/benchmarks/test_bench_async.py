"""``benchmarks/bench_async.py --smoke``: sync and async training of the LM demo side by side, in seconds; the async
run is stale as scheduled (mean staleness 2/3 over 3 steps: 0, 1, 1) and nothing is written into benchmarks/. The
script runs in this process (tests/benchmarks/in_process.py); the async mode's rollout process is its own."""

from __future__ import annotations

import re
from pathlib import Path

from tests.benchmarks.in_process import run_script

ROOT = Path(__file__).resolve().parents[2]


def test_bench_async_smoke():
    before = {p.name for p in (ROOT / "benchmarks").iterdir()}
    proc = run_script("bench_async.py", ["--smoke"], cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {}  # mode -> (step time, held-out accuracy, mean staleness, samples)
    for line in proc.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 9 and re.match(r"a?sync, ", cells[0]):
            rows[cells[0]] = (cells[1].split(" ± ")[0], cells[6].split(" ± ")[0], cells[7], cells[8])
    assert set(rows) == {"sync, 1 thread", "async, 1 + 1 threads"}, proc.stdout[-2000:]
    for step_s, accuracy, _, samples in rows.values():
        assert float(step_s) > 0 and 0 <= float(accuracy) <= 1 and samples == "96"  # 3 steps x 4 prompts x 8
    assert float(rows["async, 1 + 1 threads"][2]) == 0.67 and float(rows["sync, 1 thread"][2]) == 0
    assert re.search(r"Step-time ratio, fastest async \(async, 1 \+ 1 threads\) / best sync \(sync, 1 thread\): "
                     r"[\d.]+", proc.stdout)  # fmt: skip
    assert {p.name for p in (ROOT / "benchmarks").iterdir()} == before
