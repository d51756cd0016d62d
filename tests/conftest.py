"""One intra-op thread per test process: two pytest workers share two cores, and the training processes that tests
start inherit OMP_NUM_THREADS (a run's own ``run.num_threads`` still wins). Tests that compare runs compare them
under the same setting. Tests that run the CLI in-process read no hub (as ``make test`` sets it). Runs draw no
dashboard unless their config asks (``run.dashboard: true``; a drawing costs about a second of CPU, and the tests
of the dashboard ask for it)."""

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["GENALIGN_DASHBOARD"] = "0"

import torch

torch.set_num_threads(1)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "heavy(cpu_s): a module whose tests start training processes, about cpu_s CPU-seconds in all; such modules "
        "are scheduled first, the heaviest first, so that the two workers of `make test` finish together",
    )


def pytest_collection_modifyitems(session, config, items):
    """Order the modules for the workers (``--dist loadfile`` hands out whole modules in collection order; the
    project's pytest options turn xdist's own reordering, by test count, off): modules marked ``heavy`` first, by
    their CPU-seconds, then the others as collected."""

    def weight(item) -> float:
        marker = item.get_closest_marker("heavy")
        return float(marker.kwargs.get("cpu_s", marker.args[0] if marker.args else 1)) if marker else 0.0

    by_module: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        by_module[module] = max(by_module.get(module, 0.0), weight(item))
    items.sort(key=lambda item: -by_module[item.nodeid.split("::")[0]])
