"""The bad-input table: bad config values, YAML files, data files, paths and CLI arguments through the real CLI.

Every case runs ``python -m genalign.cli <command> ...`` in a subprocess (a fresh temporary folder each run, the
embedded arithmetic LM, one training step) and is classified:

* **clear error**: exit code 2, no ``Traceback`` in stderr, and the message names what it must (the field, the file,
  the line, the fix);
* **counted skip**: exit code 0, and the bad rows were counted where the run reports (a metric in metrics.jsonl, a
  warning naming the row);
* **FAILURE**: anything else: a traceback, another exit code, a message that does not name the field or file, a
  bad input accepted silently, or a hang (past the case's timeout).

    HF_HUB_OFFLINE=1 python benchmarks/bad_inputs.py [--out benchmarks/bad_inputs_results.md] [--jobs 2]
    HF_HUB_OFFLINE=1 python benchmarks/bad_inputs.py --smoke    # a handful of fast cases (run by the test suite)
    HF_HUB_OFFLINE=1 python benchmarks/bad_inputs.py --only lr_inf,yaml_python_tag   # chosen cases

Exit status: 0 when no case is a FAILURE, 1 otherwise. Disk errors (ENOSPC, EROFS, EACCES) are injected: a
``sitecustomize`` module on the subprocess's ``PYTHONPATH`` makes writes under the run folder fail with that errno
(this machine runs as root on a writable disk); the EPERM case is real (``/sys`` refuses new folders).

``--smoke`` runs its cases in one process, calling ``genalign.cli.main`` as the console script does (an exception
that escapes it is what would print a traceback), plus one case through a subprocess: seconds, nothing written into
benchmarks/.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BASE_CONFIG = {
    "policy": {"family": "causal_lm", "model": "builtin:arith-lm", "use_chat_template": False,
               "max_prompt_tokens": 16, "max_new_tokens": 6, "engine": "static"},
    "data": {"train": {"source": "procedural:arithmetic", "args": {"size": 32, "seed": 0, "digits": 2}},
             "eval": {"source": "procedural:arithmetic", "args": {"size": 4, "seed": 1, "digits": 2, "split": "eval"}}},
    "rewards": [{"fn": "exact_match", "name": "accuracy"}],
    "algorithm": {"group_size": 2, "prompts_per_step": 2, "micro_batch_size": 4},
    "optim": {"lr": 1.0e-4},
    "eval": {"at_start": False, "num_prompts": 4, "batch_size": 4},
    "run": {"output_dir": "run", "max_steps": 1, "progress_bar": False, "sample_every": 0, "num_threads": 1},
}  # fmt: skip

#: what a sitecustomize module does in a subprocess whose GENALIGN_INJECT_ERRNO is set: writes and new folders under
#: GENALIGN_INJECT_UNDER fail with that errno, as a full, read-only or forbidden disk would make them fail
INJECT_SITECUSTOMIZE = """
import builtins, errno, io, os
_code = getattr(errno, os.environ.get("GENALIGN_INJECT_ERRNO", ""), None)
_under = os.environ.get("GENALIGN_INJECT_UNDER", "")
if _code and _under:
    def _hit(path):
        try:
            return os.path.abspath(os.fspath(path)).startswith(_under)
        except TypeError:
            return False
    def _fail(path):
        raise OSError(_code, os.strerror(_code), os.fspath(path))
    _open, _mkdir = io.open, os.mkdir
    def _guarded_open(file, mode="r", *args, **kwargs):
        if any(m in mode for m in "wax+") and _hit(file):
            _fail(file)
        return _open(file, mode, *args, **kwargs)
    def _guarded_mkdir(path, *args, **kwargs):
        if _hit(path):
            _fail(path)
        return _mkdir(path, *args, **kwargs)
    io.open = builtins.open = _guarded_open
    os.mkdir = _guarded_mkdir
"""


class Workspace:
    """A temporary folder with the base config, data files and a run folder per case."""

    def __init__(self, root: Path) -> None:
        import yaml

        self.root = root
        self.base = root / "base.yaml"
        self.base.write_text(yaml.safe_dump(BASE_CONFIG, sort_keys=False))
        self.inject = root / "inject"
        self.inject.mkdir()
        (self.inject / "sitecustomize.py").write_text(INJECT_SITECUSTOMIZE)

    def path(self, name: str) -> Path:
        return self.root / name

    def run(self, case: str) -> Path:
        return self.root / "runs" / case

    def write(self, name: str, content: str | bytes) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    def jsonl(self, name: str, rows: list[dict] | None = None, *, lines: list[str | bytes] | None = None) -> Path:
        """A JSONL file of ``rows`` (arithmetic prompts by default) or of raw ``lines``."""
        if lines is None:
            lines = [json.dumps(row) for row in (rows or good_rows(8))]
        data = b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines)
        return self.write(name, data)

    def config(self, name: str, text: str) -> Path:
        return self.write(name, textwrap.dedent(text))


def good_rows(count: int) -> list[dict]:
    return [{"prompt": f"{10 + i}+{20 + i}=", "answer": str(30 + 2 * i)} for i in range(count)]


def validate(*overrides: str) -> Callable[[Workspace], list[str]]:
    return lambda ws: ["validate", str(ws.base), *overrides]


def train(name: str, *overrides: str | Callable[[Workspace], str], data: Callable[[Workspace], Path] | None = None):
    """``train`` on the base config with one step, the run in its own folder, ``data`` as data.train.source."""

    def argv(ws: Workspace) -> list[str]:
        extra = [o(ws) if callable(o) else o for o in overrides]
        source = [f"data.train.source={data(ws)}", "data.train.args={}"] if data else []
        return ["train", str(ws.base), f"run.output_dir={ws.run(name)}", *source, *extra]

    return argv


@dataclass
class Case:
    """One bad input.

    Attributes:
        name: short id (``--only``). input: what is bad, as the table shows it. argv: the CLI arguments.
        names: what the message must contain (each, case-insensitively), e.g. the field and the fix.
        expect: ``"error"`` (exit 2) or ``"skip"`` (exit 0 and ``evidence`` finds the count).
        evidence: for skips: (workspace, stdout + stderr) -> what shows the count, or None when nothing does.
        smoke: part of ``--smoke``. env: extra environment of the subprocess. cwd: its working folder.
    """

    name: str
    input: str
    argv: Callable[[Workspace], list[str]]
    names: tuple[str, ...] = ()
    expect: str = "error"
    evidence: Callable[[Workspace, str], str | None] | None = None
    smoke: bool = False
    env: Callable[[Workspace], dict[str, str]] | None = None
    cwd: Callable[[Workspace], Path] | None = None
    setup: Callable[[Workspace], object] | None = None
    check: Callable[[Workspace], str | None] | None = None  # a side effect that must not have happened
    timeout: float = 120.0


@dataclass
class Outcome:
    case: Case
    outcome: str  # "clear error" | "counted skip" | "FAILURE: ..."
    message: str
    seconds: float
    returncode: int | None = None
    output: str = field(default="", repr=False)


def metric(name_part: str) -> Callable[[Workspace, str], str | None]:
    """Evidence for a counted skip: a positive metric whose name holds ``name_part`` in the case's metrics.jsonl."""

    def find(ws: Workspace, output: str) -> str | None:
        for path in (ws.root / "runs").rglob("metrics.jsonl"):
            for line in path.read_text().splitlines():
                for key, value in json.loads(line).items():
                    if name_part in key and isinstance(value, (int, float)) and value > 0:
                        return f"{key} = {value:g}"
        return None

    return find


def metric_of(case: str, name_part: str, warning: str | None = None) -> Callable[[Workspace, str], str | None]:
    """Evidence: a positive metric with ``name_part`` in the run of ``case`` (and ``warning`` in the output)."""

    def find(ws: Workspace, output: str) -> str | None:
        path = ws.run(case) / "metrics.jsonl"
        if not path.is_file():
            return None
        for line in path.read_text().splitlines():
            for key, value in json.loads(line).items():
                if name_part in key and isinstance(value, (int, float)) and value > 0:
                    if warning is not None:
                        lines = [x for x in output.splitlines() if warning.lower() in x.lower()]
                        if not lines:
                            return None
                        return f"{key} = {value:g}; {lines[0].strip()}"
                    return f"{key} = {value:g}"
        return None

    return find


def huge_prompt_rows(ws: Workspace) -> Path:
    """Six short prompts, then a 20-million-character prompt on line 7."""
    path = ws.path("huge_prompt.jsonl")
    if not path.exists():
        lines = [json.dumps(row) for row in good_rows(6)]
        lines.append(json.dumps({"prompt": "1" * 20_000_000 + "+1=", "answer": "2"}))
        ws.jsonl("huge_prompt.jsonl", lines=lines)
    return path


def no_marker(marker: str) -> Callable[[Workspace], str | None]:
    return lambda ws: f"{marker} was created: the input was executed" if ws.path(marker).exists() else None


def cases() -> list[Case]:
    c: list[Case] = []
    add = c.append
    # -- config values (validate) ------------------------------------------------------------------------------------
    add(Case("lr_inf", "optim.lr=.inf", validate("optim.lr=.inf"), ("optim.lr", "finite"), smoke=True))
    add(Case("lr_nan", "optim.lr=.nan", validate("optim.lr=.nan"), ("optim.lr", "finite")))
    add(Case("lr_negative", "optim.lr=-1", validate("optim.lr=-1"), ("optim.lr", "> 0")))
    add(Case("lr_text", "optim.lr=fast", validate("optim.lr=fast"), ("optim.lr", "number")))
    add(Case("max_grad_norm_inf", "optim.max_grad_norm=.inf", validate("optim.max_grad_norm=.inf"),
             ("optim.max_grad_norm", "null")))  # fmt: skip
    add(Case("betas_nan", "optim.betas=[0.9, .nan]", validate("optim.betas=[0.9, .nan]"), ("optim.betas[1]",)))
    add(Case("weight_decay_minus_inf", "optim.weight_decay=-.inf", validate("optim.weight_decay=-.inf"),
             ("optim.weight_decay",)))  # fmt: skip
    add(Case("kl_coef_nan", "algorithm.kl_coef=.nan", validate("algorithm.kl_coef=.nan"), ("algorithm.kl_coef",)))
    add(Case("reward_weight_inf", "rewards.0.weight=.inf", validate("rewards.0.weight=.inf"), ("rewards[0].weight",)))
    add(Case("max_time_nan", "run.max_time_minutes=.nan", validate("run.max_time_minutes=.nan"),
             ("run.max_time_minutes",)))  # fmt: skip
    add(Case("temperature_inf", "policy.temperature=.inf", validate("policy.temperature=.inf"),
             ("policy.temperature",)))  # fmt: skip
    add(Case("group_size_1e8", "algorithm.group_size=1e8", validate("algorithm.group_size=1e8"),
             ("algorithm.group_size", "100000000")))  # fmt: skip
    add(Case("group_size_100M", "algorithm.group_size=100000000", validate("algorithm.group_size=100000000"),
             ("algorithm.group_size", "genalign plan")))  # fmt: skip
    add(
        Case(
            "prompts_per_step_1e9",
            "algorithm.prompts_per_step=1000000000",
            validate("algorithm.prompts_per_step=1000000000"),
            ("algorithm.prompts_per_step", "genalign plan"),
        )
    )
    add(Case("max_new_tokens_1e7", "policy.max_new_tokens=10000000", validate("policy.max_new_tokens=10000000"),
             ("policy.max_new_tokens", "genalign plan")))  # fmt: skip
    add(Case("max_new_tokens_1e7_text", "policy.max_new_tokens=1e7", validate("policy.max_new_tokens=1e7"),
             ("policy.max_new_tokens", "10000000")))  # fmt: skip
    add(Case("seed_2_64", "run.seed=2**64", validate(f"run.seed={2**64}"), ("run.seed",), smoke=True))
    add(Case("seed_negative", "run.seed=-1", validate("run.seed=-1"), ("run.seed",)))
    add(Case("eval_seed_huge", "eval.seed=10**30", validate(f"eval.seed={10**30}"), ("eval.seed",)))
    add(Case("num_threads_zero", "run.num_threads=0", validate("run.num_threads=0"), ("run.num_threads",)))
    add(Case("max_steps_zero", "run.max_steps=0", validate("run.max_steps=0"), ("run.max_steps",)))
    add(Case("unknown_key", "optim.lrr=1e-5", validate("optim.lrr=1e-5"), ("lrr", "did you mean")))
    add(Case("unknown_reward", "rewards.0.fn=exact_macth", validate("rewards.0.fn=exact_macth"),
             ("rewards[0].fn", "exact_match")))  # fmt: skip
    add(Case("unknown_family", "policy.family=causal", validate("policy.family=causal"), ("policy.family",)))
    add(Case("unknown_advantage", "algorithm.advantage=grpoo", validate("algorithm.advantage=grpoo"),
             ("algorithm.advantage",)))  # fmt: skip
    add(Case("max_prompt_tokens_zero", "policy.max_prompt_tokens=0", validate("policy.max_prompt_tokens=0"),
             ("policy.max_prompt_tokens",)))  # fmt: skip
    add(Case("micro_batch_zero", "algorithm.micro_batch_size=0", validate("algorithm.micro_batch_size=0"),
             ("algorithm.micro_batch_size",)))  # fmt: skip
    add(Case("eval_batch_zero", "eval.batch_size=0", validate("eval.batch_size=0"), ("eval.batch_size",)))
    add(
        Case(
            "optimizer_unknown", "optim.optimizer=adam", validate("optim.optimizer=adam"), ("optim.optimizer", "adamw")
        )
    )
    add(Case("hardware_gpus_zero", "hardware.gpus=0", validate("hardware.gpus=0"), ("hardware.gpus",)))
    add(Case("tracker_missing", "run.trackers=[wandb] (not installed)", validate("run.trackers=[wandb]"),
             ("run.trackers", "pip install")))  # fmt: skip
    add(Case("rewards_empty", "rewards=[]", validate("rewards=[]"), ("rewards",)))
    add(Case("reward_file_missing", "rewards.0.fn=missing.py:score", validate("rewards.0.fn=missing.py:score"),
             ("rewards[0].fn", "missing.py")))  # fmt: skip
    add(Case("data_limit_zero", "data.train.limit=0", validate("data.train.limit=0"), ("data.limit",)))
    add(Case("data_txt_suffix", "data.train.source=prompts.txt",
             validate("data.train.source=prompts.txt", "data.train.args={}"), ("data.train", "'.txt'")))  # fmt: skip
    # -- run.output_dir ----------------------------------------------------------------------------------------------
    add(Case("output_dir_empty", "run.output_dir= (empty)", validate("run.output_dir="), ("run.output_dir",),
             smoke=True))  # fmt: skip
    add(Case("output_dir_blank", "run.output_dir='   '", validate("run.output_dir='   '"), ("run.output_dir", "empty")))
    add(Case("output_dir_root", "run.output_dir=/", validate("run.output_dir=/"), ("run.output_dir", "root")))
    add(Case("output_dir_file", "run.output_dir=<an existing file>",
             lambda ws: ["validate", str(ws.base), f"run.output_dir={ws.write('a_file.txt', 'x')}"],
             ("run.output_dir", "a_file.txt")))  # fmt: skip
    add(Case("output_dir_cwd", "run.output_dir=. in a folder holding other files",
             lambda ws: ["train", str(ws.base), "run.output_dir=."], ("run.output_dir", "current"),
             cwd=lambda ws: ws.write("project/README.md", "a project").parent))  # fmt: skip
    add(Case("output_dir_other_run", "train twice into the same run.output_dir",
             train("output_dir_other_run"), ("run.output_dir", "resume"),
             setup=lambda ws: subprocess.run(cli(train("output_dir_other_run")(ws)), env=env_of(ws, None),
                                             capture_output=True, timeout=120)))  # fmt: skip
    # -- disk --------------------------------------------------------------------------------------------------------
    for code, fix in (("ENOSPC", "space"), ("EROFS", "read-only"), ("EACCES", "permission")):
        add(Case(f"disk_{code.lower()}", f"{code} on run.output_dir (injected)", train(f"disk_{code.lower()}"),
                 (code, "run.output_dir", fix),
                 env=lambda ws, code=code: {"GENALIGN_INJECT_ERRNO": code,
                                            "GENALIGN_INJECT_UNDER": str(ws.root / "runs")}))  # fmt: skip
    add(Case("disk_eperm", "run.output_dir=/sys/genalign-run (EPERM)", train("disk_eperm", "run.output_dir=/sys/x/run"),
             ("EPERM", "run.output_dir")))  # fmt: skip
    # -- YAML --------------------------------------------------------------------------------------------------------
    add(Case("yaml_python_tag", "!!python/object/apply:os.system in the config",
             lambda ws: ["validate", str(ws.config("tag.yaml", """\
                 policy: !!python/object/apply:os.system ["touch pwned"]
                 """))], ("tag.yaml", "python/object"), check=no_marker("pwned"), smoke=True))  # fmt: skip
    add(Case("yaml_syntax", "unclosed bracket in the config",
             lambda ws: ["validate", str(ws.config("syntax.yaml", "run: {max_steps: 1\noptim: {lr: 1}\n"))],
             ("syntax.yaml", "line")))  # fmt: skip
    add(Case("yaml_list", "a YAML list at top level", lambda ws: ["validate", str(ws.config("list.yaml", "- a\n- b\n"))],
             ("list.yaml", "mapping")))  # fmt: skip
    add(Case("yaml_empty", "an empty config file", lambda ws: ["validate", str(ws.config("empty.yaml", ""))],
             ("policy",)))  # fmt: skip
    add(Case("yaml_duplicate_key", "the same key twice in a mapping",
             lambda ws: ["validate", str(ws.write("dup.yaml", ws.base.read_text() + "optim: {lr: 1.0}\n"))],
             ("dup.yaml", "optim", "twice")))  # fmt: skip
    add(
        Case(
            "yaml_binary",
            "a config file of invalid UTF-8",
            lambda ws: ["validate", str(ws.write("binary.yaml", b"run:\n  seed: \xff\xfe\n"))],
            ("binary.yaml", "UTF-8"),
        )
    )
    add(Case("config_missing", "a config path that does not exist", lambda ws: ["validate", str(ws.path("nowhere.yaml"))],
             ("nowhere.yaml",)))  # fmt: skip
    add(Case("config_is_folder", "a folder as the config", lambda ws: ["validate", str(ws.root)], ("folder",)))
    # -- overrides ---------------------------------------------------------------------------------------------------
    add(
        Case(
            "override_no_equals", "override 'optim.lr' without =", validate("optim.lr"), ("optim.lr", "key.path=value")
        )
    )
    add(Case("override_bad_yaml", "override optim.betas=[0.9", validate("optim.betas=[0.9"), ("optim.betas",),
             smoke=True))  # fmt: skip
    add(Case("override_into_scalar", "override optim.lr.x=1 (optim.lr is a number)", validate("optim.lr.x=1"),
             ("optim.lr",)))  # fmt: skip
    add(Case("override_bad_index", "override rewards.3.fn=x (one reward)", validate("rewards.3.fn=x"), ("rewards.3",)))
    # -- data files (train) ------------------------------------------------------------------------------------------
    add(Case("jsonl_invalid_utf8", "JSONL with invalid UTF-8 on line 3",
             train("jsonl_invalid_utf8", data=lambda ws: ws.jsonl("bad_utf8.jsonl", lines=[
                 json.dumps(good_rows(1)[0]), json.dumps(good_rows(1)[0]), b'{"prompt": "\xff\xfe", "answer": "1"}'])),
             ("bad_utf8.jsonl", "line 3", "UTF-8"), smoke=True))  # fmt: skip
    add(Case("csv_invalid_utf8", "CSV with invalid UTF-8 on line 3",
             train("csv_invalid_utf8", data=lambda ws: ws.write("bad_utf8.csv", b"prompt,answer\n1+1=,2\n\xff+1=,2\n")),
             ("bad_utf8.csv", "line 3", "UTF-8")))  # fmt: skip
    add(Case("jsonl_bad_json", "JSONL with a broken line 2",
             train("jsonl_bad_json", data=lambda ws: ws.jsonl("bad_json.jsonl", lines=['{"prompt": "1+1=", "answer": "2"}',
                                                                                        '{"prompt": '])),
             ("bad_json.jsonl", "line 2")))  # fmt: skip
    add(Case("jsonl_not_object", "JSONL line 1 is a list",
             train("jsonl_not_object", data=lambda ws: ws.jsonl("list_line.jsonl", lines=["[1, 2]"])),
             ("list_line.jsonl", "line 1")))  # fmt: skip
    add(Case("jsonl_no_prompt", "JSONL rows without a prompt column",
             train("jsonl_no_prompt", data=lambda ws: ws.jsonl("no_prompt.jsonl", [{"question": "1+1=", "answer": "2"}])),
             ("no_prompt.jsonl", "prompt", "data.columns")))  # fmt: skip
    add(Case("jsonl_empty_prompt", "JSONL line 2 has an empty prompt",
             train("jsonl_empty_prompt", data=lambda ws: ws.jsonl("empty_prompt.jsonl",
                                                                   [*good_rows(1), {"prompt": " ", "answer": "1"}])),
             ("empty_prompt.jsonl", "line 2")))  # fmt: skip
    add(Case("jsonl_empty_file", "an empty JSONL file", train("jsonl_empty_file", data=lambda ws: ws.write("empty.jsonl", "")),
             ("empty.jsonl", "no rows")))  # fmt: skip
    add(
        Case(
            "json_not_list",
            "a .json file holding an object",
            train("json_not_list", data=lambda ws: ws.write("object.json", '{"prompt": "1+1="}')),
            ("object.json", "list"),
        )
    )
    add(Case("csv_extra_cells", "CSV line 3 has more cells than the header",
             train("csv_extra_cells", data=lambda ws: ws.write("cells.csv", "prompt,answer\n1+1=,2\n2+2=,4,extra\n")),
             ("cells.csv", "line 3")))  # fmt: skip
    add(
        Case(
            "parquet_corrupt",
            "a .parquet file of random bytes",
            train("parquet_corrupt", data=lambda ws: ws.write("corrupt.parquet", os.urandom(256))),
            ("corrupt.parquet",),
        )
    )
    add(
        Case(
            "data_missing",
            "data.train.source that does not exist",
            train("data_missing", data=lambda ws: ws.path("nowhere.jsonl")),
            ("data.train.source", "nowhere.jsonl"),
        )
    )
    add(Case("data_folder_not_dataset", "data.train.source is a folder of text files",
             train("data_folder_not_dataset", data=lambda ws: ws.write("plain_folder/notes.txt", "x").parent),
             ("plain_folder",)))  # fmt: skip
    add(Case("data_hub_offline", "data.train.source=hf:nobody/nothing with HF_HUB_OFFLINE=1",
             train("data_hub_offline", "data.train.source=hf:nobody/nothing", "data.train.args={}"),
             ("hf:nobody/nothing", "HF_HUB_OFFLINE")))  # fmt: skip
    add(Case("prompt_20M_error", "a 20M-character prompt on line 7 (on_long_prompt=error)",
             train("prompt_20M_error", "algorithm.prompts_per_step=8", data=huge_prompt_rows),
             ("huge_prompt.jsonl", "line 7", "policy.max_prompt_tokens"), timeout=60))  # fmt: skip
    add(Case("prompt_20M_skip", "a 20M-character prompt on line 7 (on_long_prompt=skip)",
             train("prompt_20M_skip", "algorithm.prompts_per_step=8", "policy.on_long_prompt=skip", data=huge_prompt_rows),
             expect="skip", evidence=metric_of("prompt_20M_skip", "skipped_too_long"), timeout=60))  # fmt: skip
    add(Case("prompt_20M_truncate", "a 20M-character prompt on line 7 (on_long_prompt=truncate_left)",
             train("prompt_20M_truncate", "algorithm.prompts_per_step=8", "policy.on_long_prompt=truncate_left",
                   data=huge_prompt_rows),
             expect="skip", evidence=metric_of("prompt_20M_truncate", "prompts_truncated"), timeout=60))  # fmt: skip
    for kind, value in (("null", None), ("list", ["4"]), ("dict", {"value": 4}), ("bool", True)):
        name = f"answer_{kind}"
        add(Case(name, f"answer: {json.dumps(value)} on line 3 (exact_match)",
                 train(name, "algorithm.prompts_per_step=4",
                       data=lambda ws, name=name, value=value: ws.jsonl(f"{name}.jsonl", [
                           *good_rows(2), {"prompt": "2+2=", "answer": value}, *good_rows(1)])),
                 expect="skip", evidence=metric_of(name, "bad_answer", warning="line 3")))  # fmt: skip
    add(Case("answer_list_math", "answer: [1, 2] on line 2 (math_equivalence)",
             train("answer_list_math", "rewards.0.fn=math_equivalence", "algorithm.prompts_per_step=2",
                   data=lambda ws: ws.jsonl("answer_list_math.jsonl", [*good_rows(1), {"prompt": "2+2=", "answer": [1, 2]}])),
             expect="skip", evidence=metric_of("answer_list_math", "bad_answer", warning="line 2")))  # fmt: skip
    add(Case("jsonl_bom", "JSONL saved with a byte-order mark",
             train("jsonl_bom", data=lambda ws: ws.write("bom.jsonl", b"\xef\xbb\xbf" + json.dumps(good_rows(1)[0]).encode())),
             ("bom.jsonl", "line 1")))  # fmt: skip
    add(Case("csv_empty", "an empty CSV file (no header)", train("csv_empty", data=lambda ws: ws.write("empty.csv", "")),
             ("empty.csv", "header")))  # fmt: skip
    # -- models, checkpoints, paths ----------------------------------------------------------------------------------
    add(Case("model_missing", "policy.model=/nowhere/model", train("model_missing", "policy.model=/nowhere/model"),
             ("policy.model", "/nowhere/model")))  # fmt: skip
    add(Case("model_empty_folder", "policy.model=<an empty folder>",
             train("model_empty_folder", lambda ws: f"policy.model={mkdir(ws.path('empty_model'))}"),
             ("policy.model", "empty")))  # fmt: skip
    add(
        Case(
            "model_hub_offline",
            "policy.model=nobody/nothing with HF_HUB_OFFLINE=1",
            train("model_hub_offline", "policy.model=nobody/nothing"),
            ("policy.model", "nobody/nothing", "HF_HUB_OFFLINE"),
        )
    )
    add(Case("family_mismatch", "policy.family=flow with the arithmetic LM",
             train("family_mismatch", "policy={family: flow, model: 'builtin:arith-lm'}"),
             ("policy.model", "model_index.json", "policy.family")))  # fmt: skip
    add(
        Case(
            "family_mismatch_vlm",
            "policy.family=vlm with the arithmetic LM",
            train("family_mismatch_vlm", "policy={family: vlm, model: 'builtin:arith-lm'}"),
            ("policy.model",),
        )
    )
    add(
        Case(
            "tokenizer_missing",
            "policy.tokenizer=/nowhere/tokenizer",
            train("tokenizer_missing", "policy.tokenizer=/nowhere/tokenizer"),
            ("policy.tokenizer", "/nowhere/tokenizer"),
        )
    )
    add(Case("resume_missing", "run.resume=/nowhere/step-3", train("resume_missing", "run.resume=/nowhere/step-3"),
             ("/nowhere/step-3",)))  # fmt: skip
    add(Case("resume_latest_empty", "run.resume=latest without a checkpoint",
             train("resume_latest_empty", "run.resume=latest"), ("run.resume", "checkpoint")))  # fmt: skip
    add(Case("eval_checkpoint_missing", "eval --checkpoint /nowhere",
             lambda ws: ["eval", str(ws.base), "--checkpoint", "/nowhere"], ("--checkpoint", "/nowhere")))  # fmt: skip
    add(Case("eval_no_eval_data", "eval with data.eval=null",
             lambda ws: ["eval", str(ws.base), "data.eval=null", "--checkpoint", "none"], ("data.eval",)))  # fmt: skip
    add(Case("sample_num_zero", "sample --num 0", lambda ws: ["sample", str(ws.base), "--prompt", "1+1=", "--num", "0"],
             ("--num",)))  # fmt: skip
    add(Case("sample_image_missing", "sample --image /nowhere.png (an LM)",
             lambda ws: ["sample", str(ws.base), "--prompt", "x", "--image", "/nowhere.png"], ("--image",)))  # fmt: skip
    add(Case("export_missing", "export /nowhere out", lambda ws: ["export", "/nowhere", str(ws.path("export_out"))],
             ("/nowhere",)))  # fmt: skip
    # -- CLI arguments -----------------------------------------------------------------------------------------------
    add(Case("cli_unknown_command", "genalign trian", lambda ws: ["trian", str(ws.base)], ("invalid choice",)))
    add(Case("cli_no_config", "genalign train (no config)", lambda ws: ["train"], ("config",)))
    add(Case("cli_num_text", "sample --num many", lambda ws: ["sample", str(ws.base), "--prompt", "x", "--num", "many"],
             ("--num",)))  # fmt: skip
    add(Case("plan_gpus_zero", "plan --gpus 0", lambda ws: ["plan", str(ws.base), "--gpus", "0", "--gpu-memory", "80"],
             ("--gpus",)))  # fmt: skip
    return c


def mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "genalign.cli", *args]


def env_of(ws: Workspace, case: Case | None) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    extra = case.env(ws) if case is not None and case.env else {}
    if extra.get("GENALIGN_INJECT_ERRNO"):
        env["PYTHONPATH"] = f"{ws.inject}{os.pathsep}{ROOT}"
    return env | extra


def classify(case: Case, ws: Workspace, returncode: int | None, stderr: str, stdout: str, seconds: float) -> Outcome:
    output = stdout + stderr
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith(("genalign", "usage:"))]
    first = ours[0] if ours else (lines[-1] if lines else "")
    if returncode is None:
        return Outcome(case, f"FAILURE: hung (killed after {case.timeout:.0f} s)", first, seconds, None, output)
    if "Traceback" in stderr:
        last = [line for line in stderr.splitlines() if line.strip()][-1].strip()
        return Outcome(case, f"FAILURE: traceback (exit {returncode})", last, seconds, returncode, output)
    harm = case.check(ws) if case.check else None
    if harm:
        return Outcome(case, f"FAILURE: {harm}", first, seconds, returncode, output)
    if case.expect == "skip":
        if returncode != 0:
            return Outcome(
                case, f"FAILURE: exit {returncode}, expected a counted skip", first, seconds, returncode, output
            )
        found = case.evidence(ws, output) if case.evidence else None
        if not found:
            return Outcome(case, "FAILURE: accepted without a count", first, seconds, returncode, output)
        return Outcome(case, "counted skip", found, seconds, returncode, output)
    if returncode == 0:
        return Outcome(case, "FAILURE: accepted (exit 0)", first, seconds, returncode, output)
    if returncode != 2:
        return Outcome(case, f"FAILURE: exit {returncode}", first, seconds, returncode, output)
    missing = [name for name in case.names if name.lower() not in stderr.lower()]
    if missing:
        return Outcome(case, f"FAILURE: message does not name {missing}", first, seconds, returncode, output)
    return Outcome(case, "clear error", first, seconds, returncode, output)


def run_subprocess(case: Case, ws: Workspace) -> Outcome:
    if case.setup:
        case.setup(ws)
    args = case.argv(ws)
    cwd = case.cwd(ws) if case.cwd else ws.root
    start = time.perf_counter()
    try:
        proc = subprocess.run(cli(args), cwd=cwd, env=env_of(ws, case), capture_output=True, text=True,
                              timeout=case.timeout, errors="replace")  # fmt: skip
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as err:
        returncode, stdout, stderr = None, _text(err.stdout), _text(err.stderr)
    return classify(case, ws, returncode, stderr, stdout, time.perf_counter() - start)


def _text(value: bytes | str | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def run_in_process(case: Case, ws: Workspace) -> Outcome:
    """``genalign.cli.main(argv)`` as the console script calls it (``raise SystemExit(main())``): an exception that
    escapes is the traceback the command would print."""
    from genalign.cli import main

    if case.setup:
        case.setup(ws)
    args = case.argv(ws)
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    previous = Path.cwd()
    os.chdir(case.cwd(ws) if case.cwd else ws.root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                returncode = main(args)
            except SystemExit as exit_:
                returncode = exit_.code if isinstance(exit_.code, int) else 1
            except BaseException:  # what the console script would print as a traceback
                traceback.print_exc(file=err)
                returncode = 1
    finally:
        os.chdir(previous)
    return classify(case, ws, returncode, err.getvalue(), out.getvalue(), time.perf_counter() - start)


def environment() -> str:
    import platform

    import torch

    return (f"{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, torch {torch.__version__}, "
            f"{os.cpu_count()} CPU cores (shared), no GPU used")  # fmt: skip


def markdown(outcomes: list[Outcome], command: str, workspace: Path) -> str:
    """The table; the temporary folder is written ``<tmp>`` and the checkout ``<repo>``."""
    counts = {
        "cases": len(outcomes),
        "clear errors": sum(o.outcome == "clear error" for o in outcomes),
        "counted skips": sum(o.outcome == "counted skip" for o in outcomes),
        "failures": sum(o.outcome.startswith("FAILURE") for o in outcomes),
    }
    lines = [
        "# Bad inputs through the CLI",
        "",
        f"Command: `{command}` (each case: `python -m genalign.cli ...` in a subprocess, a fresh temporary folder, "
        "the embedded arithmetic LM, `run.max_steps=1`). Classification: **clear error** = exit 2, no traceback, the "
        "message names the field / file / line and the fix; **counted skip** = exit 0 and the bad rows are counted in "
        "metrics.jsonl (and named in a warning); **FAILURE** = anything else (traceback, other exit code, vague "
        "message, silently accepted, hang).",
        "",
        f"Environment: {environment()}; disk errors ENOSPC, EROFS and EACCES are injected (module docstring).",
        "",
        "Totals: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".",
        "",
        "| case | input | outcome | message (first line) or count | s |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        message = o.message.replace(str(workspace), "<tmp>").replace(str(ROOT), "<repo>").replace("|", "\\|")
        message = message if len(message) <= 220 else message[:217] + "..."
        lines.append(
            f"| {o.case.name} | {o.case.input.replace('|', '/')} | {o.outcome} | {message} | {o.seconds:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a handful of fast cases, in one process (seconds)")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (subprocesses)")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument("--verbose", action="store_true", help="print the output of every failed case")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    all_cases = cases()
    names = [c.name for c in all_cases]
    assert len(set(names)) == len(names), "case names must be unique"
    chosen = all_cases
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            parser.error(f"--only: unknown cases {unknown}")
        chosen = [c for c in all_cases if c.name in wanted]
    elif args.smoke:
        chosen = [c for c in all_cases if c.smoke]
    with tempfile.TemporaryDirectory(prefix="genalign-bad-inputs-") as tmp:
        ws = Workspace(Path(tmp))
        if args.smoke:
            outcomes = [run_subprocess(chosen[0], ws)] + [run_in_process(c, ws) for c in chosen[1:]]
        else:
            with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                outcomes = list(pool.map(lambda c: run_subprocess(c, ws), chosen))
    command = "HF_HUB_OFFLINE=1 python benchmarks/bad_inputs.py" + (" --smoke" if args.smoke else "")
    table = markdown(outcomes, command, ws.root)
    print(table)
    if args.verbose:
        for o in outcomes:
            if o.outcome.startswith("FAILURE"):
                print(f"==== {o.case.name}: {o.outcome}\n{o.output[-3000:]}\n")
    if args.out:
        args.out.write_text(table)
    return 1 if any(o.outcome.startswith("FAILURE") for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
