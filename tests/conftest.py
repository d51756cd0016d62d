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
