"""Checkpoints that are never lost and never executed: ``output_dir/checkpoints/step-N/``.

A checkpoint is written into ``checkpoints/.tmp-step-N.<host>-<pid>`` (by every process: each writes its shards;
the suffix names the main process, :mod:`genalign.trainer.run_lock`), every file is flushed to disk (``fsync``), a
``MANIFEST.json`` with the size and SHA-256 of every file is written last, then a ``COMPLETE`` marker, and the folder
is renamed into place (and its parent flushed): a crash or a power loss at any moment leaves the previous checkpoints
and at most a temporary folder, which the next start removes (unless its writer is alive; a symbolic link there is
unlinked, never followed). A failed write (a full disk) removes its partial folder on the spot. Checkpoints are
deleted (pruned, or replaced by a re-save of the same step) the same way round: renamed to a temporary name first,
then removed; when the disk lacks room for the next checkpoint, the ones pruning would remove after it go first
(never the newest). Nothing is pickled, so loading a checkpoint cannot run code from it:
the trainable weights and the optimizer's tensors are written by :mod:`genalign.trainer.sharded_state` (DCP shards in
safetensors, readable by any number of processes, so a run saved by N processes resumes with M), the consolidated
weights in the family's own format (peft / diffusers, for sampling and export) by the main process, and scheduler,
policy, trainer and random-generator states through :mod:`genalign.trainer.state_io` (JSON + safetensors).

``resume=latest`` takes the newest checkpoint whose manifest verifies and reports the ones it skipped and why;
``genalign eval / sample / export`` verify the same way (:func:`genalign.runs.resolve_checkpoint`). A state file that
verifies but does not hold what it should (a checkpoint of an older version has no manifest) is an error naming it.
Checkpoints of older genalign versions (``*.pt`` pickles) load only with ``run.allow_pickle_checkpoints: true``.

Layout: ``train_state/`` (trainable weights and optimizer tensors, DCP shards), ``policy/`` (consolidated weights),
``optimizer.{json,safetensors}`` (hyper-parameters), ``scheduler.{json,safetensors}``,
``policy_state.{json,safetensors}`` (``policy.state_dict()``: generators, EMA, ...; sharded tensors live in
``train_state/``), ``trainer_state.{json,safetensors}`` (step, data cursor, estimator statistics),
``rng.{json,safetensors}``, ``config.yaml`` (the run's config), ``MANIFEST.json``, ``COMPLETE``. Process ``r > 0``
adds its own ``policy_state-rank<r>`` and ``rng-rank<r>`` (random generators differ per process); a process with no
file of its own (resuming with more processes) takes the main process's.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn

from genalign.errors import UserError
from genalign.policies.base import Policy
from genalign.trainer.disk_space import free_bytes, human_bytes
from genalign.trainer.distributed import all_gather_object, broadcast_object, rank_and_world
from genalign.trainer.optim import named_trainable_parameters
from genalign.trainer.run_lock import writer_alive, writer_id, writer_of
from genalign.trainer.sharded_state import (
    is_sharded,
    load_train_state,
    merge_sharded,
    optimizer_hyperparameters,
    save_train_state,
    sharded_placeholders,
    split_sharded,
)
from genalign.trainer.state_io import StateFormatError, load_state, save_state

_STEP_DIR = re.compile(r"^step-(\d+)$")
MANIFEST, COMPLETE, CONFIG, TRAIN_STATE = "MANIFEST.json", "COMPLETE", "config.yaml", "train_state"
TEMPORARY_PREFIX = ".tmp-"
LEGACY_PICKLES = ("optimizer.pt", "scheduler.pt", "policy_state.pt", "trainer_extra.pt", "rng.pt")


class CheckpointError(UserError, RuntimeError):
    """No usable checkpoint, or one that cannot be loaded safely; the message says why and what to do."""


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Checkpoints with a ``COMPLETE`` marker, oldest first (not yet verified)."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and (p / COMPLETE).exists()]
    return [p for _, p in sorted(found)]


def remove_temporary(output_dir: str | Path) -> list[Path]:
    """Delete the temporary folders left by checkpoints that a crash interrupted (a symbolic link is unlinked, never
    followed), except those of another live writer on this host (named ``.tmp-step-N.<host>-<pid>``); returns the
    removed ones."""
    root = checkpoint_root(output_dir)
    leftovers = [p for p in root.iterdir() if p.name.startswith(TEMPORARY_PREFIX)] if root.is_dir() else []
    removed = []
    for path in sorted(leftovers):
        writer = writer_of(path.name)
        if writer is not None and writer_alive(writer):
            print(f"{path}: left in place, its writer (PID {writer[1]}) is running", flush=True)
            continue
        remove_path(path)
        removed.append(path)
    return removed


def remove_path(path: Path) -> None:
    """Remove a file, a symbolic link (never followed) or a folder tree."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def checkpoint_size(path: Path) -> int:
    """Bytes of the files of a checkpoint folder."""
    return sum(p.stat().st_size for p in _files(path))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    """Flush a file or a directory to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def verify_checkpoint(path: Path, *, hashes: bool = True) -> str | None:
    """``None`` when every file of the manifest is present with its size and hash (only the size without
    ``hashes``), else the reason it is not, naming the file."""
    if not (path / COMPLETE).exists():
        return "no COMPLETE marker (interrupted while writing)"
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return f"no {MANIFEST} (written by an older genalign version: resume it with run.resume={str(path)!r})"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return f"{MANIFEST} is unreadable ({err})"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    entries = files.items() if isinstance(files, dict) else []
    if not entries or not all(isinstance(e, dict) and isinstance(e.get("size"), int) for _, e in entries):
        return f"{MANIFEST} is malformed (no list of files with sizes and checksums)"
    for name, entry in entries:
        file = path / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            return f"{MANIFEST} names a file outside the checkpoint ({name!r})"
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != entry["size"]:
            return f"{name} has {file.stat().st_size} bytes, the manifest says {entry['size']} (truncated or changed)"
        if hashes and _sha256(file) != entry.get("sha256"):
            return f"{name} does not match its checksum (corrupted or changed)"
    return None


@dataclass
class FoundCheckpoint:
    """The checkpoint to resume from and the newer ones skipped, each with the reason."""

    path: Path
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def find_checkpoint(output_dir: str | Path, resume: str, *, argument: str = "run.resume") -> FoundCheckpoint:
    """Resolve ``resume`` ('latest' or a directory) to a checkpoint that verifies; ``argument`` names the option
    in errors (``run.resume``, ``--checkpoint``, ...). A checkpoint of an older version without a manifest is taken
    as it is."""
    if resume != "latest":
        path = Path(resume)
        if not (path / COMPLETE).exists():
            raise CheckpointError(f"{argument}={resume!r} is not a complete checkpoint directory (no COMPLETE marker).")
        reason = verify_checkpoint(path)
        if reason is not None and (path / MANIFEST).exists():
            raise CheckpointError(
                f"{argument}={resume!r} cannot be used: {reason}. Give another checkpoint (the run folder takes the "
                "newest that verifies)."
            )
        return FoundCheckpoint(path)
    skipped = []
    for path in reversed(list_checkpoints(output_dir)):
        reason = verify_checkpoint(path)
        if reason is None or (not (path / MANIFEST).exists() and any((path / n).exists() for n in LEGACY_PICKLES)):
            return FoundCheckpoint(path, skipped)
        skipped.append((path, reason))
    details = "".join(f"\n  {p.name}: {r}" for p, r in skipped)
    raise CheckpointError(
        f"run.resume=latest but {checkpoint_root(output_dir)} holds no usable checkpoint{details or ''}; start without "
        "run.resume (in a new run.output_dir) or point run.output_dir at the run to continue."
    )


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    trainer_state: dict[str, Any],
    keep_last: int,
    config: dict[str, Any],
    *,
    named_parameters: list[tuple[str, nn.Parameter]] | None = None,
    consolidated: Callable[[], AbstractContextManager] = nullcontext,
) -> Path:
    """Write checkpoint ``step`` atomically and durably (every process calls it: each writes its shards); delete all
    but the ``keep_last`` newest complete ones (those first, before writing, when the disk lacks room for the new
    one: :func:`_make_room`). ``named_parameters`` defaults to the policy's trainable parameters by name;
    ``consolidated`` gathers sharded weights for the main process's ``policy/`` folder.

    The folder is written as ``.tmp-step-N.<host>-<pid>`` (the main process's identity), so no start removes it
    while its writer lives. When any process fails (a full disk), every process raises the same error (an OSError
    keeps its errno) and the partial folder is removed."""
    rank, _ = rank_and_world()
    named_parameters = named_parameters or named_trainable_parameters(policy)
    root = checkpoint_root(output_dir)
    final = root / f"step-{step}"
    tmp = root / str(broadcast_object(f"{TEMPORARY_PREFIX}step-{step}.{writer_id()}"))
    try:
        _agree(_attempt(lambda: _prepare(output_dir, tmp, keep_last)) if rank == 0 else None, step)
        policy_state, sharded = split_sharded(policy.state_dict())
        save_train_state(tmp / TRAIN_STATE, named_parameters, optimizer, sharded)  # every process raises alike
        error = _attempt(lambda: _save_process_states(tmp, policy_state, rank))
        with consolidated():  # collective: entered by every process, also after an error
            if rank == 0 and error is None:
                error = _attempt(lambda: policy.save(tmp / "policy"))
        _agree(error, step)
        if rank == 0:
            trainer = {"step": step, **trainer_state}
            error = _attempt(lambda: _publish(output_dir, tmp, final, step, optimizer, named_parameters, scheduler,
                                              trainer, config, keep_last))  # fmt: skip
        _agree(error if rank == 0 else None, step)
    except BaseException:
        if rank == 0:
            remove_path(tmp)
        raise
    return final


def _attempt(write: Callable[[], Any]) -> Exception | None:
    """Run ``write``; return its error instead of raising (the processes agree on errors with :func:`_agree`)."""
    try:
        write()
    except Exception as err:  # raised again by _agree, on every process
        return err
    return None


def _agree(error: Exception | None, step: int) -> None:
    """Wait for every process; raise on all of them when any failed: its own error, or the first failing process's
    (an OSError keeps its errno, so a full disk is recognised everywhere)."""
    report = None if error is None else (getattr(error, "errno", None), str(error), getattr(error, "filename", None))
    reports = all_gather_object(report)  # one collective, also a barrier
    if error is not None:
        raise error
    failed = [(rank, r) for rank, r in enumerate(reports) if r is not None]
    if not failed:
        return
    rank, (number, text, filename) = failed[0]
    if number is not None:
        raise OSError(number, f"process {rank}: {text}", filename)
    raise CheckpointError(f"checkpoint step-{step}: process {rank} failed: {text}")


def _prepare(output_dir: str | Path, tmp: Path, keep_last: int) -> None:
    """Main process: the checkpoints folder, room for the new checkpoint, an empty temporary folder."""
    root = checkpoint_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    _make_room(output_dir, keep_last)
    remove_path(tmp)  # a symlink planted under this name is unlinked, never followed
    tmp.mkdir()


def _make_room(output_dir: str | Path, keep_last: int) -> list[Path]:
    """When the disk has less room than the newest complete checkpoint takes, delete now (oldest first) the
    checkpoints that pruning would delete after this save anyway; never the newest one. Returns those deleted."""
    complete = list_checkpoints(output_dir)
    if not complete:
        return []
    needed, root = checkpoint_size(complete[-1]) * 1.05, checkpoint_root(output_dir)
    doomed = complete[: max(len(complete) + 1 - keep_last, 0)][: len(complete) - 1]
    removed: list[Path] = []
    for old in doomed:
        free = free_bytes(root)
        if free >= needed:
            break
        print(f"{human_bytes(free)} free, a checkpoint needs {human_bytes(needed / 1.05)}: removing {old.name} now "
              f"(run.keep_last = {keep_last} removes it after this save anyway)", flush=True)  # fmt: skip
        remove_path(_retire(old))
        removed.append(old)
    return removed


def _save_process_states(tmp: Path, policy_state: Any, rank: int) -> None:
    """This process's policy state and random generators."""
    save_state(policy_state, tmp / _per_rank("policy_state", rank))
    rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    save_state(rng, tmp / _per_rank("rng", rank))


def _publish(output_dir, tmp, final, step, optimizer, named_parameters, scheduler, trainer, config, keep_last) -> None:
    """Main process: the shared states and the config, the manifest, the rename into place, pruning."""
    save_state(optimizer_hyperparameters(optimizer, named_parameters), tmp / "optimizer")
    save_state(scheduler.state_dict(), tmp / "scheduler")
    save_state(trainer, tmp / "trainer_state")
    (tmp / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    _seal(tmp, step)
    replaced = _retire(final) if final.exists() or final.is_symlink() else None  # re-saving a step
    os.replace(tmp, final)
    _fsync(final.parent)
    retired = [_retire(old) for old in list_checkpoints(output_dir)[:-keep_last]]
    for path in [replaced, *retired]:
        if path is not None:
            remove_path(path)


def _retire(checkpoint: Path) -> Path:
    """Rename a checkpoint to a temporary name (flushed) before deleting it: a kill in the middle of the deletion
    then leaves a temporary folder (removed at the next start), never a half-deleted folder that still says
    ``COMPLETE``."""
    retired = checkpoint.with_name(f"{TEMPORARY_PREFIX}retired-{checkpoint.name}")
    remove_path(retired)
    os.replace(checkpoint, retired)
    _fsync(checkpoint.parent)
    return retired


def _seal(folder: Path, step: int) -> None:
    """Write the manifest (size and SHA-256 of every file) and the ``COMPLETE`` marker, and flush everything."""
    files = _files(folder)
    manifest = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (folder / MANIFEST).write_text(json.dumps({"step": step, "files": manifest}, indent=1))
    (folder / COMPLETE).write_text("")
    for path in [*files, folder / MANIFEST, folder / COMPLETE, *sorted({p.parent for p in files}), folder]:
        _fsync(path)


def _per_rank(stem: str, rank: int) -> str:
    return stem if rank == 0 else f"{stem}-rank{rank}"


def _own_or_main(path: Path, stem: str, rank: int) -> Path:
    """This process's file of ``stem``, or the main process's when the run that wrote it had fewer processes."""
    own = path / _per_rank(stem, rank)
    return own if own.with_suffix(".json").exists() else path / stem


def checkpoint_config(path: Path) -> dict[str, Any] | None:
    """The run config saved with a checkpoint, in the current option form even when an older version wrote it (None
    for checkpoints of versions that saved none)."""
    from genalign.config import migrate_run_config

    file = path / CONFIG
    if not file.exists():
        return None
    config = yaml.safe_load(file.read_text())
    if isinstance(config, dict):
        migrate_run_config(config)
    return config


def load_checkpoint(
    path: Path,
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    *,
    named_parameters: list[tuple[str, nn.Parameter]] | None = None,
    allow_pickle: bool = False,
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler, policy state and RNG in this process's layout (every process calls it);
    return the trainer state (``step``, ...). A file that does not hold what it should is a :class:`CheckpointError`
    naming it."""
    named_parameters = named_parameters or named_trainable_parameters(policy)
    if not (path / TRAIN_STATE).is_dir():
        return _load_single_process(path, policy, optimizer, scheduler, allow_pickle=allow_pickle)
    rank, _ = rank_and_world()
    own_policy, own_rng = _own_or_main(path, "policy_state", rank), _own_or_main(path, "rng", rank)
    template = policy.state_dict()
    with _reading(path, own_policy.name):
        structure = load_state(own_policy)
        targets = sharded_placeholders(structure, template)
    with _reading(path, f"{TRAIN_STATE}/ and optimizer"):
        loaded = load_train_state(
            path / TRAIN_STATE, named_parameters, optimizer, load_state(path / "optimizer"), targets
        )
    with _reading(path, "scheduler"):
        scheduler.load_state_dict(load_state(path / "scheduler"))
    with _reading(path, own_rng.name):
        rng = load_state(own_rng)
        python_rng = _python_rng(rng["python"])
    with _reading(path, "trainer_state"):
        trainer = _checked_trainer_state(load_state(path / "trainer_state"))
    with _reading(path, own_policy.name):
        policy.load_state_dict(merge_sharded(structure, loaded, template))
    with _reading(path, own_rng.name):
        torch.set_rng_state(rng["torch"])
        random.setstate(python_rng)
        np.random.set_state(rng["numpy"])
    return trainer


#: what restoring a state that does not fit raises (values of another type or shape, missing keys)
_MALFORMED = (StateFormatError, TypeError, KeyError, ValueError, IndexError, AttributeError, RuntimeError)


@contextmanager
def _reading(path: Path, stem: str) -> Iterator[None]:
    """Name the state file (``stem``.json / .safetensors) in any error reading or restoring it."""
    try:
        yield
    except CheckpointError:
        raise
    except StateFormatError as err:  # names the file already
        raise CheckpointError(f"checkpoint {path} cannot be loaded: {err}") from None
    except (OSError, *_MALFORMED) as err:
        raise CheckpointError(
            f"checkpoint {path} cannot be loaded: {stem}.json (with {stem}.safetensors) does not hold a state this "
            f"run can restore ({type(err).__name__}: {err})"
        ) from None


def _checked_trainer_state(state: Any) -> dict[str, Any]:
    """The trainer state, checked for the fields the trainer reads."""
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise TypeError("no integer 'step'")
    if not isinstance(state.get("data_cursor", 0), int) or not isinstance(state.get("extra", {}), dict):
        raise TypeError("'data_cursor' must be an integer and 'extra' a mapping")
    return state


def _load_single_process(
    path: Path, policy: Policy, optimizer: torch.optim.Optimizer, scheduler: Any, *, allow_pickle: bool
) -> dict[str, Any]:
    """Checkpoints of earlier versions (weights only in ``policy/``; pickles before that, with ``allow_pickle``)."""
    legacy = not (path / "trainer_state.safetensors").exists()
    if legacy and not allow_pickle:
        raise CheckpointError(
            f"{path} was written by an older genalign version with pickled files ({', '.join(LEGACY_PICKLES)}); "
            "unpickling can run arbitrary code hidden in a file. If you trust this checkpoint, set "
            "run.allow_pickle_checkpoints=true to load it once (the next checkpoints are written without pickle)."
        )
    if any(is_sharded(p) for p in policy.trainable_parameters()):
        raise CheckpointError(
            f"{path} was written by an earlier genalign version without sharded state; resume it with one process "
            "(run.distributed=none), then continue sharded from its next checkpoint."
        )
    try:
        policy.load(path / "policy")
        state = _load_legacy(path) if legacy else _load_parts(path)
    except (StateFormatError, OSError) as err:
        raise CheckpointError(f"checkpoint {path} cannot be loaded: {err}") from None
    for stem, restore in (("optimizer", optimizer.load_state_dict), ("scheduler", scheduler.load_state_dict),
                          ("policy_state", policy.load_state_dict)):  # fmt: skip
        with _reading(path, stem):
            restore(state[stem])
    with _reading(path, "rng"):
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
    with _reading(path, "trainer_state"):
        return _checked_trainer_state(state["trainer"])


def load_policy_weights(path: Path, policy: Policy, *, verified: bool = False) -> None:
    """The weights and the policy state (EMA weights used by evaluation, ...) of a checkpoint, for evaluation and
    sampling; never unpickles (an older checkpoint's pickled policy state is ignored). The manifest is verified first
    as a resume does (unless ``verified``: the caller just did, e.g. :func:`genalign.runs.resolve_checkpoint`)."""
    if not verified:
        find_checkpoint(path.parent.parent, str(path), argument="checkpoint")
    try:
        policy.load(path / "policy")
    except Exception as err:  # transformers / diffusers / safetensors raise their own types for damaged files
        raise CheckpointError(f"checkpoint {path} cannot be loaded: policy/ ({type(err).__name__}: {err})") from None
    if (path / "policy_state.safetensors").exists():
        with _reading(path, "policy_state"):
            policy.load_state_dict(load_state(path / "policy_state"))


def _load_parts(path: Path) -> dict[str, Any]:
    names = ("optimizer", "scheduler", "policy_state", "rng")
    state = {name: load_state(path / name) for name in names}
    state["rng"]["python"] = _python_rng(state["rng"]["python"])
    state["trainer"] = load_state(path / "trainer_state")
    return state


def _python_rng(state: Any) -> tuple:
    """``random.setstate`` wants ``(version, tuple_of_ints, gauss)``."""
    version, internal, gauss = state
    return version, tuple(internal), gauss


def _load_legacy(path: Path) -> dict[str, Any]:
    """Pickled checkpoints of older versions (only with ``allow_pickle``)."""
    load = lambda name: torch.load(path / name, weights_only=False)  # noqa: E731  (explicit opt-in)
    trainer = json.loads((path / "trainer_state.json").read_text())
    trainer["extra"] = load("trainer_extra.pt")
    policy_state = load("policy_state.pt") if (path / "policy_state.pt").exists() else {}
    return {"optimizer": load("optimizer.pt"), "scheduler": load("scheduler.pt"), "policy_state": policy_state,
            "rng": load("rng.pt"), "trainer": trainer}  # fmt: skip
