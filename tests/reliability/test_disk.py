"""A full or read-only disk stops the run with one clear message (what failed, the room a checkpoint needs, the
checkpoints that are intact) and removes the partial checkpoint; `run.resume=latest` then continues without manual
cleanup, also when the disk is full of this run's own leftovers; when space is short, the checkpoints pruning would
remove after a save go before it (never the newest).

The real check runs the LM demo on a 30 MiB tmpfs (skipped with the reason where mounting is not permitted); the
injected errors (OSError at a checkpoint file's write) run everywhere."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from genalign.config import load_config
from genalign.errors import UserError
from genalign.trainer import checkpoint as checkpoint_module
from genalign.trainer import train
from genalign.trainer.checkpoint import list_checkpoints, verify_checkpoint
from genalign.trainer.disk_space import StorageError
from genalign.trainer.run_lock import writer_id
from tests.reliability.conftest import metrics, toy_config

ROOT = Path(__file__).resolve().parents[2]


def temporary(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".tmp"))


@pytest.mark.parametrize(("number", "said"), [(errno.ENOSPC, "no space left on device"),
                                              (errno.EROFS, "the file system is read-only")])  # fmt: skip
def test_a_failed_checkpoint_write_is_one_clear_message_and_the_resume_needs_no_cleanup(tmp_path, monkeypatch,
                                                                                        number, said):  # fmt: skip
    real_save_state = checkpoint_module.save_state

    def save_state(value, stem):
        if stem.name == "trainer_state" and value["step"] == 4:
            raise OSError(number, os.strerror(number), str(stem.with_suffix(".json")))
        return real_save_state(value, stem)

    monkeypatch.setattr(checkpoint_module, "save_state", save_state)
    with pytest.raises(StorageError) as stopped:
        train(toy_config(tmp_path, run={"save_every": 2}))
    message = str(stopped.value)
    assert message.startswith(f"step 4: writing checkpoint step-4 failed: {said} (") and "trainer_state.json" in message
    assert "Intact checkpoints: step-2 (newest step-2)." in message and "run.resume=latest" in message
    if number == errno.ENOSPC:
        assert "A checkpoint of this run needs about " in message and "(the size of step-2)" in message
    assert isinstance(stopped.value, UserError) and temporary(tmp_path / "run") == []
    monkeypatch.undo()
    train(toy_config(tmp_path, run={"save_every": 2, "resume": "latest"}))
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1, 2, 3, 4, 5, 6]


def test_a_full_disk_while_logging_stops_the_run_naming_the_file(tmp_path, monkeypatch):
    from genalign.trainer import metrics as metrics_module

    real_append = metrics_module.JsonlLog.append

    def append(self, record):
        if record.get("step") == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        return real_append(self, record)

    monkeypatch.setattr(metrics_module.JsonlLog, "append", append)
    with pytest.raises(StorageError, match=r"step 3: writing .*metrics\.jsonl failed: no space left on device"):
        train(toy_config(tmp_path, run={"save_every": 2}))
    monkeypatch.undo()
    train(toy_config(tmp_path, run={"save_every": 2, "resume": "latest"}))
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1, 2, 3, 4, 5, 6]


# ---- a real full disk: the LM demo (13.8 MB checkpoints) on a 30 MiB tmpfs ------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", str(disk)], capture_output=True,
                             text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 30 MiB tmpfs here ({mounted.stderr.strip() or 'mount failed'}); the injected "
                    "errors above cover the messages and the resume")  # fmt: skip
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def lm_config(tmp_path: Path, disk: Path, **run) -> object:
    config = yaml.safe_load((ROOT / "configs" / "demo_arith_grpo.yaml").read_text())
    config["run"] |= {"output_dir": str(disk / "run"), "save_every": 1, "progress_bar": False, "num_threads": 1,
                      "sample_every": 0, **run}  # fmt: skip
    config["eval"] |= {"at_start": False, "every": 0, "num_prompts": 4}
    config["algorithm"] |= {"prompts_per_step": 2}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_config(path)


def fill(folder: Path, leave: int) -> None:
    """Write ``folder/ballast-*`` until only ``leave`` bytes are free (0: until the disk is full)."""
    folder.mkdir(parents=True, exist_ok=True)
    chunk = b"\0" * (1 << 20)
    for index in range(1000):
        free = shutil.disk_usage(folder).free
        if free <= leave:
            return
        try:
            with (folder / f"ballast-{index}").open("wb") as f:
                f.write(chunk[: max(min(len(chunk), free - leave), 1)])
        except OSError as err:
            assert err.errno == errno.ENOSPC
            return


def test_on_a_full_tmpfs_the_run_stops_clearly_and_resumes_without_manual_cleanup(tmp_path, small_disk, capsys):
    run_dir = small_disk / "run"
    train(lm_config(tmp_path, small_disk, max_steps=2, keep_last=1))
    size = sum(p.stat().st_size for p in (run_dir / "checkpoints" / "step-2").rglob("*") if p.is_file())
    assert 10e6 < size < 20e6
    # 1) another program leaves 5 MB: the save of step 3 fails, saying so; the partial checkpoint is removed.
    fill(small_disk / "other-program", leave=5 << 20)
    with pytest.raises(StorageError) as stopped:
        train(lm_config(tmp_path, small_disk, max_steps=4, keep_last=1, resume="latest"))
    message = str(stopped.value)
    assert message.startswith("step 3: writing checkpoint step-3 failed: no space left on device")
    assert f"needs about {size / 1e6:.1f} MB (the size of step-2)" in message, message
    assert "Intact checkpoints: step-2 (newest step-2)." in message and temporary(run_dir) == []
    # 2) once the other program's files are gone, the resume continues without any cleanup.
    shutil.rmtree(small_disk / "other-program")
    train(lm_config(tmp_path, small_disk, max_steps=4, keep_last=1, resume="latest"))
    train(lm_config(tmp_path, small_disk, max_steps=5, keep_last=2, resume="latest"))
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-4", "step-5"]
    # 3) a writer killed during a save left a temporary folder that filled the disk (the metrics rewrite of a resume
    #    used to fail on it): the start removes it first, then pruning makes room before each save.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = run_dir / "checkpoints" / f".tmp-step-6.{writer_id().rsplit('-', 1)[0]}-{dead.pid}"
    fill(leftover, leave=0)
    assert shutil.disk_usage(small_disk).free < 1 << 20
    capsys.readouterr()
    train(lm_config(tmp_path, small_disk, max_steps=7, keep_last=2, resume="latest"))
    assert "removing step-4 now (run.keep_last = 2 removes it after this save anyway)" in capsys.readouterr().out
    assert [r["step"] for r in metrics(run_dir)] == [1, 2, 3, 4, 5, 6, 7]
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-6", "step-7"] and temporary(run_dir) == []
    assert all(verify_checkpoint(p) is None for p in list_checkpoints(run_dir))
