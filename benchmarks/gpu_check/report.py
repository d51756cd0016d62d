"""The GPU check's markdown report (``benchmarks/gpu_results.md``): environment, a summary line per part, then each
part's table and notes."""

from __future__ import annotations

from benchmarks.gpu_check.common import PartResult


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def render(environment: dict[str, str], results: list[PartResult], *, command: str, smoke: bool) -> str:
    """The whole report."""
    total = sum(r.seconds for r in results)
    packages = ("torch", "transformers", "diffusers", "peft", "trl", "vllm")
    versions = ", ".join(f"{name} {environment[name]}" for name in packages)
    lines = [
        "# GPU check",
        "",
        *(["**Smoke run (`--smoke`): tiny sizes, the figures mean nothing.**", ""] if smoke else []),
        f"`{command}` on {environment['date']}: {environment['device']} (CUDA {environment['cuda']}); {versions}. "
        f"Parts took {total:.0f} s in all.",
        "",
        *_table(
            ["part", "what", "status", "seconds"], [[r.part, r.title, r.status, f"{r.seconds:.0f}"] for r in results]
        ),
    ]
    for r in results:
        lines += ["", f"## {r.part}. {r.title}: {r.status}", ""]
        if r.rows:
            lines += [*_table(r.header, r.rows), ""]
        lines += [f"- {note}" for note in r.notes]
    return "\n".join(lines) + "\n"
