"""One error style at the command line: a failure the user can fix (a genalign.errors.UserError, a full, read-only or
forbidden disk, invalid YAML) prints one paragraph and exits 2 without a traceback (--debug shows it); anything else
is a bug and keeps its traceback."""

from __future__ import annotations

import errno

import pytest
import yaml

from genalign import cli
from genalign.config import ConfigError
from genalign.data.errors import DataError
from genalign.errors import UserError, UserPathError
from genalign.trainer.checkpoint import CheckpointError
from genalign.trainer.guards import NonFiniteTrainingError
from genalign.trainer.run_directory import RunDirectoryError


def run(monkeypatch, error: BaseException, *argv: str) -> int:
    def fail(args):
        raise error

    monkeypatch.setattr(cli, "_run", fail)
    return cli.main(list(argv) or ["validate", "config.yaml"])


@pytest.mark.parametrize(
    "error",
    [
        DataError("data.jsonl, line 7: the prompt is empty."),
        UserPathError("policy.model='/x' does not exist."),
        RunDirectoryError("run.output_dir='runs/x' holds a previous run."),
        CheckpointError("run.resume='/x' is not a complete checkpoint directory."),
        NonFiniteTrainingError("step 3: the last 3 steps skipped every update; lower optim.lr."),
    ],
)
def test_user_errors_print_one_paragraph_and_exit_2(monkeypatch, capsys, error):
    assert isinstance(error, UserError)
    assert run(monkeypatch, error) == 2
    err = capsys.readouterr().err
    assert err == f"genalign: {error}\n" and "Traceback" not in err


def test_config_errors_say_invalid_config(monkeypatch, capsys):
    assert run(monkeypatch, ConfigError("optim.lr: inf is not a finite number.")) == 2
    assert capsys.readouterr().err == "genalign: invalid config: optim.lr: inf is not a finite number.\n"


@pytest.mark.parametrize(
    ("code", "fix"),
    [("ENOSPC", "no space is left"), ("EROFS", "read-only filesystem"), ("EACCES", "permission denied"),
     ("EPERM", "not permitted"), ("EDQUOT", "quota")],
)  # fmt: skip
def test_disk_errors_name_the_file_the_errno_and_the_fix(monkeypatch, capsys, code, fix):
    number = getattr(errno, code)
    assert run(monkeypatch, OSError(number, "message", "runs/x/metrics.jsonl")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"genalign: cannot write runs/x/metrics.jsonl ({code}, message): ")
    assert fix in err and "run.output_dir" in err and "Traceback" not in err


def test_yaml_errors_are_expected_failures(monkeypatch, capsys):
    with pytest.raises(yaml.YAMLError) as caught:
        yaml.safe_load("a: [1")
    assert run(monkeypatch, caught.value) == 2
    assert capsys.readouterr().err.startswith("genalign: invalid YAML: while parsing")


@pytest.mark.parametrize(
    "error",
    [RuntimeError("a bug"), FileNotFoundError(errno.ENOENT, "No such file", "/x"), KeyError("k"), ValueError("v")],
)
def test_other_errors_keep_their_traceback(monkeypatch, error):
    with pytest.raises(type(error)):
        run(monkeypatch, error)


@pytest.mark.parametrize(
    "argv", [["--debug", "validate", "config.yaml"], ["validate", "config.yaml", "--debug"], ["list", "--debug"]]
)
def test_debug_prints_the_traceback_before_the_paragraph(monkeypatch, capsys, argv):
    assert run(monkeypatch, DataError("data.jsonl, line 7: bad."), *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("genalign: data.jsonl, line 7: bad.\n")


def test_genalign_debug_variable_also_shows_it(monkeypatch, capsys):
    monkeypatch.setenv("GENALIGN_DEBUG", "1")
    assert run(monkeypatch, DataError("bad.")) == 2
    assert "Traceback" in capsys.readouterr().err


def test_a_bad_config_exits_2_through_the_real_loader(tmp_path, capsys):
    path = tmp_path / "tag.yaml"
    path.write_text("policy: !!python/object/apply:os.system ['touch pwned']\n")
    assert cli.main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"genalign: invalid config: config file '{path}' is not valid YAML: the tag")
    assert not (tmp_path / "pwned").exists()
