"""A benchmark script's command line, ``python benchmarks/SCRIPT ARGS``, run in the test's own process: the script
runs as ``__main__`` with ``sys.argv`` set and its folder first on ``sys.path``, as the interpreter would run it,
without a fresh interpreter's imports (torch, transformers and diffusers cost seconds of CPU per process; the pytest
worker has them already).

The benchmark scripts change process-wide state as a command line may: intra-op threads, deterministic algorithms,
the random generators (the trainer seeds torch, ``random`` and numpy), ``sys.path`` (they put the checkout on it),
the environment (``HF_HUB_OFFLINE``, ``TOKENIZERS_PARALLELISM``), the working folder, signal handlers and module
globals of their own (``compare_methods.DEMO``). :func:`run_script` puts every one of these back afterwards and drops
the script modules they imported by name (``bench_flow``, ``compare_methods``), so that later tests of the same pytest
worker see the process as it was. The processes a script starts itself (``torchrun``, the sandbox, the trainer's
rollout process, a race's run process) are still started.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import random
import runpy
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@dataclass(frozen=True)
class ScriptRun:
    """What ``subprocess.run(..., capture_output=True, text=True)`` would have returned."""

    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class _ProcessState:
    """The process-wide state a benchmark script may change (module docstring)."""

    argv: list[str]
    path: list[str]
    modules: frozenset[str]
    environ: dict[str, str]
    cwd: str
    threads: int
    deterministic: tuple[bool, bool]
    torch_rng: torch.Tensor
    python_rng: object
    numpy_rng: object
    handlers: tuple[object, ...]

    @classmethod
    def save(cls) -> _ProcessState:
        return cls(
            argv=list(sys.argv),
            path=list(sys.path),
            modules=frozenset(sys.modules),
            environ=dict(os.environ),
            cwd=os.getcwd(),
            threads=torch.get_num_threads(),
            deterministic=(
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            torch_rng=torch.get_rng_state(),
            python_rng=random.getstate(),
            numpy_rng=np.random.get_state(),
            handlers=tuple(signal.getsignal(sig) for sig in _SIGNALS),
        )

    def restore(self) -> None:
        sys.argv[:] = self.argv
        sys.path[:] = self.path
        for name in set(sys.modules) - self.modules:
            if _is_script_module(sys.modules[name]):
                del sys.modules[name]
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        os.chdir(self.cwd)
        torch.set_num_threads(self.threads)
        if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) != (
            self.deterministic
        ):
            torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        torch.set_rng_state(self.torch_rng)
        random.setstate(self.python_rng)
        np.random.set_state(self.numpy_rng)
        for sig, handler in zip(_SIGNALS, self.handlers, strict=True):
            if handler is not None and signal.getsignal(sig) is not handler:  # None: not set from Python
                signal.signal(sig, handler)


def _is_script_module(module: object) -> bool:
    """A benchmark script imported as a top-level module through the ``sys.path`` entry a script added."""
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve().parent == BENCHMARKS


def run_script(script: str, args: list[str], *, cwd: Path) -> ScriptRun:
    """``python benchmarks/<script> <args>`` (``script``: a file in benchmarks/, or an absolute path) in ``cwd``, in
    this process: its exit status (``SystemExit``'s code, 0
    when the script returns) and what it printed. An exception that escapes the script propagates (the traceback the
    command would print), after what the script printed."""
    state = _ProcessState.save()
    out, err = io.StringIO(), io.StringIO()
    path = BENCHMARKS / script
    try:
        sys.argv[:] = [str(path), *args]
        sys.path.insert(0, str(path.parent))  # as ``python SCRIPT`` puts the script's folder first
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(path), run_name="__main__")
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                if isinstance(exit_.code, str):
                    print(exit_.code, file=sys.stderr)
    except BaseException:  # shown by pytest next to the traceback
        sys.stdout.write(out.getvalue())
        sys.stderr.write(err.getvalue())
        raise
    finally:
        state.restore()
        gc.collect()
    return ScriptRun(code, out.getvalue(), err.getvalue())
