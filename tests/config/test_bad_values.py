"""Bad values refused at config load, each naming the field, the value and the fix: non-finite numbers, seeds beyond
32 bits, output folders that are not the run's own, sizes no step can hold, and YAML that is not plain data."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from genalign.config import ConfigError, load_config
from genalign.config.bounds import MAX_SAMPLE_TOKENS, MAX_SAMPLES_PER_STEP, MAX_SEED

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE = {
    "policy": {"family": "causal_lm", "model": "some/model"},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 10}}},
    "rewards": [{"fn": "exact_match"}],
    "run": {"output_dir": "runs/x"},
}


def load(tmp_path, *overrides, text: str | None = None):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE) if text is None else text)
    return load_config(path, list(overrides))


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("optim.lr=.inf", "optim.lr"),
        ("optim.lr=.nan", "optim.lr"),
        ("optim.lr=1e999", "optim.lr"),  # a YAML 1.1 float string that overflows
        (f"optim.lr={10**400}", "optim.lr"),  # an integer too large for a float
        ("optim.max_grad_norm=.inf", "optim.max_grad_norm"),
        ("optim.weight_decay=-.inf", "optim.weight_decay"),
        ("optim.betas=[0.9, .nan]", "optim.betas[1]"),
        ("optim.lr_scale={'model.*': .inf}", "optim.lr_scale.model.*"),
        ("algorithm.kl_coef=.nan", "algorithm.kl_coef"),
        ("rewards.0.weight=.inf", "rewards[0].weight"),
        ("run.max_time_minutes=.nan", "run.max_time_minutes"),
        ("policy.temperature=.inf", "policy.temperature"),
    ],
)
def test_non_finite_numbers_are_refused_in_every_float_field(tmp_path, override, field):
    with pytest.raises(ConfigError, match=rf"^{re.escape(field)}: .* is not a finite number; .*null"):
        load(tmp_path, override)


def test_an_integer_written_as_1e8_says_how_to_write_it(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm\.group_size: expected an integer, got '1e8'\. Write it in digits: "
                       r"100000000\."):  # fmt: skip
        load(tmp_path, "algorithm.group_size=1e8")
    with pytest.raises(ConfigError, match=r"expected an integer, got 2\.5\.$"):
        load(tmp_path, "algorithm.group_size=2.5")


@pytest.mark.parametrize(
    "override", [f"run.seed={MAX_SEED + 1}", f"run.seed={2**64}", "run.seed=-1", f"eval.seed={10**30}"]
)
def test_seeds_beyond_32_bits_are_refused(tmp_path, override):
    field = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{field} = .* is out of range; use an integer in \[0, 4294967295\]"):
        load(tmp_path, override)
    assert load(tmp_path, f"{field}={MAX_SEED}")


def test_sizes_no_step_can_hold_are_refused_before_any_allocation(tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm\.group_size × algorithm\.prompts_per_step = 100000000 × 16 = "
                       r"1600000000 samples per step, beyond the sanity bound .*genalign plan"):  # fmt: skip
        load(tmp_path, "algorithm.group_size=100000000")
    with pytest.raises(ConfigError, match=r"algorithm\.prompts_per_step = 8 × 1000000000 .*genalign plan"):
        load(tmp_path, "algorithm.prompts_per_step=1000000000")
    with pytest.raises(
        ConfigError, match=r"prompts sampled per step = 8 × 1572864 .*genalign plan"
    ):  # DAPO oversampling
        load(tmp_path, "algorithm.prompts_per_step=1048576", "algorithm.dynamic_sampling={enabled: true}")
    with pytest.raises(ConfigError, match=r"policy\.max_prompt_tokens \+ policy\.max_new_tokens = 512 \+ 10000000 .*"
                       r"genalign plan"):  # fmt: skip
        load(tmp_path, "policy.max_new_tokens=10000000")
    assert load(tmp_path, f"algorithm.prompts_per_step={MAX_SAMPLES_PER_STEP // 8}")
    assert load(tmp_path, f"policy.max_new_tokens={MAX_SAMPLE_TOKENS - 512}")


def test_run_num_threads_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match=r"run\.num_threads = 0 must be >= 1, or null"):
        load(tmp_path, "run.num_threads=0")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", r"run\.output_dir = '' is empty, which would write .* into the current folder"),
        ("'   '", r"run\.output_dir = '   ' is empty"),
        ("' runs/x'", r"starts or ends with whitespace.*run\.output_dir=runs/x"),
        ("/", r"run\.output_dir = '/' is the filesystem root"),
        ("/..", r"is the filesystem root"),
    ],
)
def test_output_dirs_that_are_not_a_folder_of_the_run_are_refused(tmp_path, value, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, f"run.output_dir={value}")


def test_output_dir_that_is_a_file_or_the_current_folder_with_other_things(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"run\.output_dir = '.*notes\.txt' is an existing file"):
        load(tmp_path, f"run.output_dir={tmp_path / 'notes.txt'}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"run\.output_dir = '\.' is the current folder .* holds other things "
                       r"\(c\.yaml, notes\.txt\).*runs/my-run"):  # fmt: skip
        load(tmp_path, "run.output_dir=.")
    with pytest.raises(ConfigError, match=r"run\.output_dir = '\.\.' is a folder above the current one"):
        load(tmp_path, "run.output_dir=..")
    assert load(tmp_path, "run.output_dir=runs/mine").run.output_dir == "runs/mine"


def test_the_current_folder_is_accepted_when_empty_or_holding_a_run_to_resume(tmp_path, monkeypatch):
    config, work = tmp_path / "c.yaml", tmp_path / "work"
    config.write_text(yaml.safe_dump(BASE))
    work.mkdir()
    monkeypatch.chdir(work)
    assert load_config(config, ["run.output_dir=."]).run.output_dir == "."
    (work / "metrics.jsonl").write_text("")
    (work / "samples").mkdir()
    assert load_config(config, ["run.output_dir=.", "run.resume=latest"]).run.output_dir == "."
    with pytest.raises(ConfigError, match=r"is the current folder"):  # overwrite would move the current folder aside
        load_config(config, ["run.output_dir=.", "run.overwrite=true"])


def test_yaml_python_tags_are_a_config_error_naming_file_and_line(tmp_path):
    with pytest.raises(ConfigError, match=r"c\.yaml' is not valid YAML: the tag '!!python/object/apply:os\.system' is not "
                       r"allowed: configs are plain YAML .* at line 2, column 9"):  # fmt: skip
        load(tmp_path, text="run: {}\npolicy: !!python/object/apply:os.system ['touch pwned']\n")
    assert not (tmp_path / "pwned").exists()


def test_yaml_errors_duplicate_keys_and_bad_bytes_name_file_and_line(tmp_path):
    with pytest.raises(ConfigError, match=r"c\.yaml' is not valid YAML: .* at line 2"):
        load(tmp_path, text="run: {max_steps: 1\noptim: {lr: 1}\n")
    with pytest.raises(
        ConfigError, match=r"key 'optim' is written twice in one mapping \(first on line 1\), at line 3"
    ):
        load(tmp_path, text="optim: {lr: 1}\nrun: {}\noptim: {lr: 2}\n")
    with pytest.raises(ConfigError, match=r"key 'lr' is written twice"):
        load(tmp_path, "optim={lr: 1, lr: 2}")
    path = tmp_path / "bytes.yaml"
    path.write_bytes(b"run:\n  seed: 1\n  output_dir: \xff\n")
    with pytest.raises(ConfigError, match=r"bytes\.yaml', line 3: not UTF-8 text \(byte 0xff\); save it as UTF-8"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"is a folder; give a YAML file"):
        load_config(tmp_path)


def test_merge_keys_may_be_overridden_without_counting_as_repeated(tmp_path):
    text = yaml.safe_dump(BASE) + "optim: {<<: {weight_decay: 0.1, lr: 0.5}, lr: 1.0e-4}\n"
    optim = load(tmp_path, text=text).optim
    assert (optim.weight_decay, optim.lr) == (0.1, 1e-4)


def test_bad_override_values_and_paths_name_the_override(tmp_path):
    with pytest.raises(ConfigError, match=r"override 'optim\.betas=\[0\.9': the value is not valid YAML"):
        load(tmp_path, "optim.betas=[0.9")
    with pytest.raises(ConfigError, match=r"override 'optim\.lr\.x=1': optim\.lr is the value 0\.001, not a section"):
        load(tmp_path, "optim.lr=0.001", "optim.lr.x=1")
    with pytest.raises(ConfigError, match=r"override 'policy=!!python/object/apply:os\.system \[x\]'.*not allowed"):
        load(tmp_path, "policy=!!python/object/apply:os.system [x]")
