"""Every command that reads a checkpoint verifies it as a resume does: `genalign eval`, `sample` and `export` refuse a
checkpoint with any one byte flipped in any of its files, naming the file (exit 2); a state file that does not hold
what it should (a checkpoint without manifest, as older versions wrote) is an error naming it, never a bare
TypeError."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from genalign.cli import main
from genalign.config import load_config
from genalign.trainer import train
from genalign.trainer.checkpoint import CheckpointError
from tests.reliability.conftest import toy_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> tuple[Path, Path]:
    """The LM demo trained for two steps: its config file and its newest checkpoint (step-1 is kept too)."""
    folder = tmp_path_factory.mktemp("lm")
    config = yaml.safe_load((ROOT / "configs" / "demo_arith_grpo.yaml").read_text())
    config["run"] |= {"output_dir": str(folder / "run"), "max_steps": 2, "save_every": 1, "progress_bar": False,
                      "num_threads": 1, "sample_every": 0}  # fmt: skip
    config["eval"] |= {"at_start": False, "every": 0, "num_prompts": 4}
    config["algorithm"] |= {"prompts_per_step": 2}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    train(load_config(path))
    return path, folder / "run" / "checkpoints" / "step-2"


def commands(config: Path, checkpoint: Path, out: Path) -> dict[str, list[str]]:
    return {
        "eval": ["eval", str(config), "--checkpoint", str(checkpoint), "--out", str(out / "eval.json")],
        "sample": ["sample", str(config), "--prompt", "12+30=", "--checkpoint", str(checkpoint)],
        "export": ["export", str(checkpoint), str(out / "export"), "--overwrite"],
    }


def flipped(file: Path) -> bytes:
    """Flip one bit in the middle of ``file``; return its original bytes."""
    data = file.read_bytes()
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0x01
    file.write_bytes(bytes(damaged))
    return data


@pytest.mark.parametrize("command", ["eval", "sample", "export"])
def test_every_bit_flipped_file_is_refused_naming_it(lm_run, tmp_path, capsys, command):
    config, checkpoint = lm_run
    argv = commands(config, checkpoint, tmp_path)[command]
    assert main(argv) == 0, capsys.readouterr().err  # the intact checkpoint loads
    capsys.readouterr()
    names = sorted(json.loads((checkpoint / "MANIFEST.json").read_text())["files"])
    assert {"policy/model.safetensors", "policy_state.json", "trainer_state.json", "optimizer.safetensors",
            "rng.safetensors"} <= set(names)  # fmt: skip
    for name in names:
        original = flipped(checkpoint / name)
        try:
            code = main(argv)
        finally:
            (checkpoint / name).write_bytes(original)
        err = capsys.readouterr().err
        assert code == 2, (name, err)
        assert f"cannot be used: {name} does not match its checksum" in err, (name, err)
    original = flipped(checkpoint / "MANIFEST.json")
    (checkpoint / "MANIFEST.json").write_bytes(b"[" + original[1:])
    try:
        assert main(argv) == 2 and "MANIFEST.json is unreadable" in capsys.readouterr().err
    finally:
        (checkpoint / "MANIFEST.json").write_bytes(original)


def test_a_runs_damaged_newest_checkpoint_is_skipped_saying_why_and_a_run_with_none_intact_is_refused(lm_run, capsys):
    config, newest = lm_run
    run_dir, older = newest.parent.parent, newest.parent / "step-1"
    originals = {path: flipped(path / "policy" / "model.safetensors") for path in (newest,)}
    try:
        assert main(["sample", str(config), "--prompt", "1+2=", "--checkpoint", str(run_dir)]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out.splitlines()[0])["checkpoint"] == str(older)
        assert f"skipped {newest} (policy/model.safetensors does not match its checksum" in captured.err
        originals[older] = flipped(older / "policy_state.safetensors")
        assert main(["eval", str(config), "--checkpoint", str(run_dir)]) == 2
        err = capsys.readouterr().err
        assert "no usable checkpoint" in err and "step-1: policy_state.safetensors does not match its checksum" in err
    finally:
        for path, original in originals.items():
            (path / ("policy/model.safetensors" if path == newest else "policy_state.safetensors")).write_bytes(
                original
            )


def test_a_malformed_state_without_manifest_names_the_file(lm_run, tmp_path, capsys):
    config, checkpoint = lm_run
    old = tmp_path / "old" / "checkpoints" / "step-2"  # a checkpoint of an older version: no manifest
    shutil.copytree(checkpoint, old)
    (old / "MANIFEST.json").unlink()
    state = old / "policy_state.json"
    state.write_text(state.read_text().replace("__tensor__", "__tensos__"))  # parses, but holds no tensor
    assert main(["sample", str(config), "--prompt", "1+2=", "--checkpoint", str(old)]) == 2
    err = capsys.readouterr().err
    assert "policy_state.json" in err and "Traceback" not in err


def test_a_resume_from_a_malformed_trainer_state_names_the_file(tmp_path):
    train(toy_config(tmp_path, run={"max_steps": 2, "save_every": 2}))
    checkpoint = tmp_path / "run" / "checkpoints" / "step-2"
    (checkpoint / "MANIFEST.json").unlink()  # as an older version wrote it: nothing to verify against
    (checkpoint / "trainer_state.json").write_text('{"step": "2", "data_cursor": 8, "extra": {}}')
    with pytest.raises(CheckpointError, match=r"trainer_state\.json .*no integer 'step'"):
        train(toy_config(tmp_path, run={"max_steps": 3, "resume": str(checkpoint)}))
    (checkpoint / "trainer_state.json").write_text('{"step": 2, "data_cursor": 8, "extra": {"__tuple__": 5}}')
    with pytest.raises(CheckpointError, match=r"trainer_state\.json"):
        train(toy_config(tmp_path, run={"max_steps": 3, "resume": str(checkpoint)}))
