"""Write the JSONL files the full-scale presets in configs/ read (data/gsm8k_train.jsonl, data/geometry3k/train.jsonl...).

    python scripts/prepare_data.py --list
    python scripts/prepare_data.py gsm8k --out data/
    python scripts/prepare_data.py gsm8k --out data/ --from gsm8k_raw            # a save_to_disk folder (offline)
    python scripts/prepare_data.py pickscore --out data/ --from train=train.txt --from test=test.txt
    python scripts/prepare_data.py all --out data/ --limit 100                   # every dataset, 100 rows per file

Online, a dataset comes from the Hugging Face Hub (``datasets.load_dataset``) or from the raw prompt files its spec
names. Offline (``HF_HUB_OFFLINE=1``, or the source does not answer within 2 s) pass a local copy with ``--from``: a
``save_to_disk`` folder (of a DatasetDict: splits by name), a folder of ``<split>.jsonl`` / ``.json`` / ``.parquet`` /
``.csv`` / ``.txt`` files, ``SPLIT=FILE`` pairs, or one file for a dataset read from one split. The specs (sources,
column conversions, output files, presets) are in genalign/data/published_datasets.py; docs/data.md has the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from genalign.data.errors import DataError
from genalign.data.prepare import prepare
from genalign.data.published_datasets import BY_NAME, DATASETS
from genalign.registry import did_you_mean


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", nargs="?", help=f"one of: {', '.join(BY_NAME)}, or 'all'")
    parser.add_argument("--out", default="data", help="folder the presets read (default: data)")
    parser.add_argument(
        "--from",
        dest="local",
        action="append",
        metavar="[SPLIT=]PATH",
        help="a local copy to read instead of downloading (repeat SPLIT=PATH for one file per split)",
    )
    parser.add_argument("--limit", type=int, help="keep at most N rows per output file")
    parser.add_argument("--list", action="store_true", help="list the datasets, their sources, files and presets")
    return parser.parse_args(argv)


def list_datasets() -> str:
    lines = []
    for spec in DATASETS:
        files = ", ".join(f"data/{output.file}" for output in spec.outputs)
        lines.append(f"{spec.name}: {spec.about}")
        lines.append(f"    source:  {spec.source_text()}")
        lines.append(f"    writes:  {files}")
        lines.append(f"    presets: {', '.join(f'configs/{preset}.yaml' for preset in spec.presets)}")
        if spec.notes:
            lines.append(f"    note:    {spec.notes}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        print(list_datasets())
        return 0
    if args.dataset is None:
        print("name a dataset (see --list) or 'all'", file=sys.stderr)
        return 2
    if args.dataset != "all" and args.dataset not in BY_NAME:
        print(
            f"unknown dataset {args.dataset!r}.{did_you_mean(args.dataset, list(BY_NAME))} "
            f"Valid: {', '.join(BY_NAME)}, all.",
            file=sys.stderr,
        )
        return 2
    if args.dataset == "all" and args.local:
        print("--from reads one dataset's copy; name the dataset instead of 'all'", file=sys.stderr)
        return 2
    specs = DATASETS if args.dataset == "all" else (BY_NAME[args.dataset],)
    failed = 0
    for spec in specs:
        try:
            prepare(spec, args.out, local=args.local, limit=args.limit)
        except DataError as error:
            print(f"error: {error}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
