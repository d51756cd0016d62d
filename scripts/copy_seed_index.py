"""Copy the seed methods index into the repository: docs/seeds.csv (number, method, relevance, component).

The coverage table (docs/coverage.md, written by ``python -m genalign.docs``) reads the committed CSV, so the test
suite never reads the shared design folder outside the repository. Run it after shared/methods.md changes, then
regenerate the docs:

    python scripts/copy_seed_index.py                      # reads ../shared/methods.md (beside the checkout)
    python scripts/copy_seed_index.py --methods PATH       # another copy of methods.md
    python scripts/copy_seed_index.py --check              # exit 1 when docs/seeds.csv differs from methods.md
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_METHODS = ROOT.parent / "shared" / "methods.md"
SEEDS_CSV = ROOT / "docs" / "seeds.csv"
COLUMNS = ("number", "method", "relevance", "component")

#: a table row of methods.md: ``| N | method | modality | component | mechanism | relevance |``
ROW = re.compile(r"^\|\s*(\d+)\s*\|")
#: a cell boundary: a pipe not escaped as ``\|``
CELL_BOUNDARY = re.compile(r"(?<!\\)\|")


def seed_rows(methods_text: str) -> list[dict[str, str]]:
    """The index's rows as ``{number, method, relevance, component}`` dicts, in file order.

    Raises ``ValueError`` naming the line when a numbered row does not have the six columns
    ``N | method | modality | component | mechanism | relevance``.
    """
    rows = []
    for line_number, line in enumerate(methods_text.splitlines(), start=1):
        if not ROW.match(line):
            continue
        cells = [cell.strip() for cell in CELL_BOUNDARY.split(line.strip())[1:-1]]
        if len(cells) != 6:
            raise ValueError(
                f"methods.md line {line_number}: expected 6 columns (N | method | modality | component | mechanism "
                f"| relevance), found {len(cells)}; escape a pipe inside a cell as \\|"
            )
        number, method, _modality, component, _mechanism, relevance = cells
        rows.append({"number": number, "method": method, "relevance": relevance, "component": component})
    if not rows:
        raise ValueError("methods.md holds no numbered table rows ('| N | method | ... |')")
    return rows


def csv_text(rows: list[dict[str, str]]) -> str:
    """``rows`` as CSV with a header line and ``\\n`` line ends."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", type=Path, default=DEFAULT_METHODS, help=f"default: {DEFAULT_METHODS}")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/seeds.csv is out of date")
    args = parser.parse_args(argv)
    if not args.methods.is_file():
        print(f"{args.methods} not found; pass --methods PATH (the shared methods index)", file=sys.stderr)
        return 2
    text = csv_text(seed_rows(args.methods.read_text(encoding="utf-8")))
    if args.check:
        current = SEEDS_CSV.read_text(encoding="utf-8") if SEEDS_CSV.exists() else ""
        if current != text:
            print(f"{SEEDS_CSV} is out of date; run: python scripts/copy_seed_index.py", file=sys.stderr)
            return 1
        return 0
    SEEDS_CSV.write_text(text, encoding="utf-8")
    print(f"wrote {SEEDS_CSV} ({text.count(chr(10)) - 1} seeds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
