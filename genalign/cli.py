"""``genalign train | validate | eval | sample CONFIG [key=value ...]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from genalign.config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="genalign", description="Align generative models with group-relative RL.")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("config", help="YAML config (see configs/)")
        p.add_argument("overrides", nargs="*", help="key.path=value overrides, e.g. optim.lr=1e-5 run.max_steps=10")
        return p

    add("train", "train a policy")
    add("validate", "check a config (types, option names, hyper-parameters) and print it resolved")
    p = add("eval", "held-out reward/accuracy of a checkpoint, written to eval.json")
    p.add_argument("--checkpoint", help="checkpoint directory (default: the run's latest; none: the base model)")
    p.add_argument("--out", help="where to write eval.json (default: run.output_dir/eval.json)")
    p = add("sample", "generate outputs for prompts with a (trained) policy")
    p.add_argument("--prompt", action="append", required=True, help="a prompt (repeatable)")
    p.add_argument("--num", type=int, default=1, help="samples per prompt")
    p.add_argument("--checkpoint", help="checkpoint directory (default: base model)")
    p.add_argument("--out", help="folder for image/video outputs (default: print text)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
    except (ConfigError, KeyError, FileNotFoundError) as err:
        print(f"genalign: invalid config: {err}", file=sys.stderr)
        return 2
    if args.command == "validate":
        import yaml

        from genalign.config import to_dict

        print(yaml.safe_dump(to_dict(config), sort_keys=False), end="")
        print(f"# {args.config}: valid", file=sys.stderr)
        return 0
    if args.command == "train":
        from genalign.trainer import train

        result = train(config)
        print(json.dumps(result, indent=2, default=str))
        return 0
    if args.command == "eval":
        return _eval(config, args)
    return _sample(config, args)


def _load_policy(config, checkpoint: str | None):
    import torch

    from genalign.trainer.recipe import build_policy

    policy = build_policy(
        config, torch.device("cpu") if config.run.cpu or not torch.cuda.is_available() else torch.device("cuda")
    )
    if checkpoint:
        policy.load(Path(checkpoint) / "policy")
    return policy


def _eval(config, args) -> int:
    from genalign.data import load_rows
    from genalign.trainer.checkpoint import list_checkpoints
    from genalign.trainer.evaluate import evaluate
    from genalign.trainer.rewards import RewardSet

    if config.data.eval is None:
        print("genalign: data.eval is not set; give held-out prompts (data.eval.source=...).", file=sys.stderr)
        return 2
    checkpoint = args.checkpoint
    if checkpoint is None:
        found = list_checkpoints(config.run.output_dir)
        checkpoint = str(found[-1]) if found else None
    elif checkpoint == "none":
        checkpoint = None
    policy = _load_policy(config, checkpoint)
    rows = load_rows(config.data.eval)[: config.eval.num_prompts]
    result = evaluate(policy, rows, RewardSet(config.rewards), batch_size=config.eval.batch_size,
                      accuracy_reward=config.eval.accuracy_reward)  # fmt: skip
    result["checkpoint"] = checkpoint or "base model"
    out = Path(args.out) if args.out else Path(config.run.output_dir) / "eval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


def _sample(config, args) -> int:
    policy = _load_policy(config, args.checkpoint)
    for module in policy.modules_to_train():
        module.eval()
    import torch

    with torch.no_grad():
        rollout = policy.rollout(
            [{"prompt": p} for p in args.prompt], args.num, mode="eval" if args.num == 1 else "train"
        )
    out = Path(args.out) if args.out else None
    for i, output in enumerate(rollout.outputs):
        prompt = rollout.rows[i]["prompt"]
        if isinstance(output, str):
            print(json.dumps({"prompt": prompt, "output": output}))
        else:
            if out is None:
                print("genalign: this policy produces images; pass --out FOLDER.", file=sys.stderr)
                return 2
            out.mkdir(parents=True, exist_ok=True)
            output.save(out / f"sample-{i}.png")
            print(json.dumps({"prompt": prompt, "output": str(out / f"sample-{i}.png")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
