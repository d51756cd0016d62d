"""``genalign train | validate | eval | plan CONFIG [key=value ...]``, ``genalign sample CONFIG_OR_RUN [key=value ...]
[--score --seed S --num K --compare base ...]`` (:mod:`genalign.sample_command`), ``genalign report RUN`` (the run's
dashboard and summary: :mod:`genalign.trainer.dashboard`), ``genalign list [KIND]``, ``genalign export
RUN_OR_CHECKPOINT OUT``, ``--version``.

Every failure the user can fix (a :class:`genalign.errors.UserError`: config, data, model path, run folder, checkpoint;
or a disk that is full, read-only or forbidden) prints one paragraph naming what, where and the fix, and exits with
code 2; ``--debug`` (or ``GENALIGN_DEBUG=1``) prints the traceback before it. Any other exception is a bug and keeps
its traceback.
Exit codes: 0 done; 2 a failure the user can fix (above: also a run directory held by another trainer, or a full or
read-only disk); 75 ``train`` stopped by SIGTERM / SIGINT after saving a checkpoint
(:mod:`genalign.trainer.shutdown`).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import sys
import traceback
from pathlib import Path

from genalign import __version__
from genalign.errors import UserError


def _presets_epilog() -> str:
    from genalign.catalog import preset_summaries

    presets = preset_summaries()
    if not presets:
        return "Presets live in the configs/ folder of the genalign repository."
    return "presets (configs/):\n" + "\n".join(f"  {name:<34} {text[:80]}" for name, text in presets)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="genalign", description="Align generative models with group-relative RL.")
    parser.add_argument("--version", action="version", version=f"genalign {__version__}")
    debug_help = "also print the traceback of an expected error (a bad config, data file or path)"
    parser.add_argument("--debug", action="store_true", default=False, help=debug_help)
    debug = argparse.ArgumentParser(add_help=False)  # the same flag after the command: genalign train cfg --debug
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str, config_help: str = "", **kwargs) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, parents=[debug], **kwargs)
        p.add_argument("config", help=config_help or "YAML config (a preset in configs/, or a run's saved config.yaml)")
        p.add_argument("overrides", nargs="*", help="key.path=value overrides, e.g. optim.lr=1e-5 run.max_steps=10")
        return p

    add("train", "train a policy", epilog=_presets_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p = add("validate", "check a config (types, option names, hyper-parameters) and print it resolved")
    p.add_argument("--plan", action="store_true", help="also plan the memory of the config's hardware section and "
                   "warn when it does not fit (traces the model: seconds; `genalign plan` shows the components)")  # fmt: skip
    p = add("eval", "held-out reward/accuracy of a checkpoint, written to eval.json")
    p.add_argument("--checkpoint", help="a checkpoint folder, a run folder, 'latest' (default) or 'none' (base model)")
    p.add_argument("--out", help="where to write eval.json (default: run.output_dir/eval.json)")
    from genalign.sample_command import add_sample_arguments

    sample_help = "generate (and with --score, score) outputs of a trained policy or its base model"
    add_sample_arguments(add("sample", sample_help, "a YAML config or a run folder (its config.yaml and checkpoints)"))
    p = sub.add_parser("report", help="redraw a run's dashboard.png and print a summary", parents=[debug],
                       description="redraw a run's dashboard.png from its metrics.jsonl / eval.jsonl and print a "
                       "summary: steps, wall time, best held-out accuracy and its step, last values of the main "
                       "metrics")  # fmt: skip
    p.add_argument("run", help="a run folder (run.output_dir)")
    p = add("plan", "memory per GPU by component, and whether the config fits (exit 0: fits, 1: does not)")
    p.add_argument("--gpus", type=int, help="GPUs (training processes) in all; default: hardware.gpus of the config")
    p.add_argument("--gpu-memory", type=float, help="memory per GPU in GB; default: hardware.gpu_memory_gb")
    p = sub.add_parser("list", help="list what a config can name: rewards, methods, families, presets", parents=[debug])
    from genalign.catalog import KINDS

    p.add_argument("kind", nargs="?", choices=KINDS, help="what to list (default: every kind)")
    from genalign.export import add_export_arguments

    export_help = "write a checkpoint as a standard transformers / peft / diffusers folder, loadable without genalign"
    add_export_arguments(sub.add_parser("export", help=export_help, description=export_help, parents=[debug]))
    return parser


#: errno -> what an OSError of writing means and what to do (the other OSErrors are bugs or the system's business)
DISK_ERRORS = {
    errno.ENOSPC: "no space is left on its disk: free space there, or point run.output_dir (or --out) at another disk; "
    "a run stopped mid-checkpoint resumes from its last complete checkpoint with run.resume=latest",
    errno.EDQUOT: "the disk quota is exceeded: free space, or point run.output_dir (or --out) at another disk",
    errno.EROFS: "it is on a read-only filesystem: point run.output_dir (or --out) at a writable folder",
    errno.EACCES: "permission denied: point run.output_dir (or --out) at a folder you can write, or fix its permissions",
    errno.EPERM: "the operation is not permitted there: point run.output_dir (or --out) at a folder you can write",
}


def expected_failure(err: BaseException) -> str | None:
    """The one-paragraph message of an error the user can fix, or None for a bug (which keeps its traceback)."""
    import yaml

    from genalign.config import ConfigError

    if isinstance(err, ConfigError):
        return f"invalid config: {err}"
    if isinstance(err, UserError):
        return str(err)
    if isinstance(err, yaml.YAMLError):
        return f"invalid YAML: {' '.join(str(err).split())}"
    if isinstance(err, OSError) and err.errno in DISK_ERRORS:
        where = err.filename if err.filename is not None else "a file"
        return f"cannot write {where} ({errno.errorcode[err.errno]}, {err.strerror}): {DISK_ERRORS[err.errno]}."
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except BrokenPipeError:  # the reader of the output stopped (`genalign list | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 128 + 13  # SIGPIPE's status
    except Exception as err:
        message = expected_failure(err)
        if message is None:
            raise
        if getattr(args, "debug", False) or os.environ.get("GENALIGN_DEBUG", "0") not in ("", "0"):
            traceback.print_exc()
        print(f"genalign: {message}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "list":
        return _list(args)
    if args.command == "plan":
        return _plan(args)
    if args.command == "export":
        from genalign.export import run_export

        return run_export(args)
    if args.command == "report":
        from genalign.trainer.dashboard import report

        print(report(args.run))
        return 0
    if args.command == "sample":
        from genalign.sample_command import run_sample

        return run_sample(args)
    return _run_config_command(args)


def _run_config_command(args: argparse.Namespace) -> int:
    """``validate``, ``train`` and ``eval``: the config of ``args.config`` with its overrides, then the command."""
    from genalign.catalog.registries import catalogued_checks
    from genalign.config import ConfigError, load_config

    # validate checks the config against the catalogue (no option module, no torch; genalign.catalog.registries)
    checks = catalogued_checks() if args.command == "validate" else contextlib.nullcontext()
    try:
        with checks:
            config = load_config(args.config, args.overrides)
    except (KeyError, FileNotFoundError) as err:  # raised outside the checks that turn them into ConfigErrors
        raise ConfigError(str(err)) from err
    if args.command == "validate":
        import yaml

        from genalign.config import to_dict

        print(yaml.safe_dump(to_dict(config), sort_keys=False), end="")
        print(f"# {args.config}: valid", file=sys.stderr)
        _check_hardware(config, args.config, plan=args.plan)
        return 0
    if args.command == "train":
        from genalign.trainer import train
        from genalign.trainer.distributed import rank_and_world
        from genalign.trainer.shutdown import STOP_ERRORS

        try:
            result = train(config)
        except STOP_ERRORS as err:  # stopped on purpose by a signal: one line (main process) and a distinct code
            if rank_and_world()[0] == 0:
                print(f"genalign: {err}", file=sys.stderr)
            return err.exit_code
        if rank_and_world()[0] == 0:
            print(json.dumps(result, indent=2, default=str))
        return 0
    from genalign.runs import resolve_checkpoint
    from genalign.trainer.checkpoint import CheckpointError

    try:
        checkpoint = resolve_checkpoint(args.checkpoint, output_dir=config.run.output_dir)
    except (FileNotFoundError, ValueError, CheckpointError) as err:
        print(f"genalign: {err}", file=sys.stderr)
        return 2
    return _eval(config, args, checkpoint)


def _list(args) -> int:
    from genalign.catalog import KINDS, format_listing

    for kind in [args.kind] if args.kind else KINDS:
        if not args.kind:
            print(f"\n== {kind}")
        print(format_listing(kind))
    return 0


def _plan(args) -> int:
    """``genalign plan``: 0 when the config fits its GPUs, 1 when it does not, 2 for an invalid config or value."""
    from genalign.config import ConfigError
    from genalign.planning.command import run_plan

    try:
        text, fits = run_plan(args.config, args.overrides, args.gpus, args.gpu_memory)
    except (ConfigError, KeyError, FileNotFoundError, ValueError) as err:
        print(f"genalign plan: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0 if fits else 1


def _check_hardware(config, name: str, *, plan: bool) -> None:
    """``validate``: with ``--plan`` a warning (not an error) when the config's hardware section is too small for its
    plan; without it, a note that the hardware section was not planned (planning imports the model libraries and
    traces the model: seconds, where the checks of ``validate`` take a fraction of one)."""
    if config.hardware.gpus is None or config.hardware.gpu_memory_gb is None:
        return
    if not plan:
        print(f"# hardware section not planned: `genalign validate --plan {name}` or `genalign plan {name}`",
              file=sys.stderr)  # fmt: skip
        return
    from genalign.planning.command import hardware_warning

    warning = hardware_warning(config, name)
    if warning:
        print(warning, file=sys.stderr)


def _eval(config, args, checkpoint: str | None) -> int:
    from genalign.data import load_rows
    from genalign.trainer.evaluate import evaluate
    from genalign.trainer.rewards import RewardSet

    if config.data.eval is None:
        print("genalign: data.eval is not set; give held-out prompts (data.eval.source=...).", file=sys.stderr)
        return 2
    rows = load_rows(config.data.eval)[: config.eval.num_prompts]
    rewards = RewardSet(config.rewards)
    policy = _checkpoint_policy(config, checkpoint)
    if policy is None:
        return 2
    result = evaluate(policy, rows, rewards, batch_size=config.eval.batch_size,
                      accuracy_reward=config.eval.accuracy_reward, seed=config.eval.seed)  # fmt: skip
    result["checkpoint"] = checkpoint or "base model"
    out = Path(args.out) if args.out else Path(config.run.output_dir) / "eval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


def _checkpoint_policy(config, checkpoint: str | None):
    """The policy with the (verified) checkpoint's weights; None after printing why a checkpoint cannot be loaded."""
    from genalign.runs import load_policy
    from genalign.trainer.checkpoint import CheckpointError

    try:
        return load_policy(config, checkpoint, verified=True)  # resolve_checkpoint verified it
    except CheckpointError as err:
        print(f"genalign: {err}", file=sys.stderr)
        return None


if __name__ == "__main__":
    raise SystemExit(main())
