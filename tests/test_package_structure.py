"""The package's shape: no import cycle between genalign modules nor between its packages (module-level or lazy
imports alike; the experimental tier is named by registries as a catalogue string, never imported by the core), no
module over
800 lines (files are cut by purpose, not by a count) and no function over 80 lines (the few that read better whole
are listed with the reason)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "genalign"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80
#: functions allowed to be longer, with the reason
LONG_FUNCTIONS: dict[str, str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """genalign modules imported anywhere in ``path`` (``from a import b`` counts as ``a.b`` when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (node -> the nodes it imports) as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def module_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    # a package's __init__ re-exporting its submodules is not a dependency of those submodules on the package
    return {name: {t for t in targets if not (known[t].name == "__init__.py" and name.startswith(t + "."))}
            for name, targets in graph.items()}  # fmt: skip


def package_of(module: str) -> str:
    """The package-level node of ``module``: ``genalign.<first part>`` (a top-level module is its own node)."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_inside_genalign():
    cycle = first_cycle(module_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycle_between_packages():
    """Packages form layers: no chain of imports leads from a package back to itself (genalign/__init__ excluded: it
    re-exports the public API)."""
    graph: dict[str, set[str]] = {}
    examples: dict[tuple[str, str], str] = {}
    for module, targets in module_graph().items():
        if module == "genalign":
            continue
        source = package_of(module)
        graph.setdefault(source, set())
        for target in targets:
            if package_of(target) not in (source, "genalign"):
                graph[source].add(package_of(target))
                examples.setdefault((source, package_of(target)), f"{module} imports {target}")
    cycle = first_cycle(graph)
    assert cycle is None, (
        "package cycle: "
        + " -> ".join(cycle or [])
        + "\n"
        + "\n".join(examples[edge] for edge in zip(cycle or [], (cycle or [])[1:]))
    )


def test_the_core_never_imports_the_experimental_tier():
    """Only the tier itself imports genalign.experimental (registries and the signal table name it as a string)."""
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in module_graph().items()
        if package_of(module) != "genalign.experimental"
        for target in targets
        if package_of(target) == "genalign.experimental"
    )
    assert not offenders, "\n".join(offenders)


def test_modules_and_functions_stay_small():
    too_long = []
    for name, path in sorted(modules().items()):
        lines = path.read_text().splitlines()
        if len(lines) > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {len(lines)} lines")
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and f"{name}.{node.name}" not in LONG_FUNCTIONS:
                    too_long.append(f"function {name}.{node.name}: {length} lines")
    assert not too_long, "split these (or list a function in LONG_FUNCTIONS with the reason):\n" + "\n".join(too_long)


def test_only_a_family_compares_family_or_architecture_names():
    """Planning, export, the CLI and the trainer ask a family (its traits, its architecture registry) instead of
    comparing its name: no ``==`` / ``in`` against a built-in family or flow-architecture name outside the families'
    folders."""
    names = {"causal_lm", "vlm", "diffusion_lm", "flow", "sd3", "flux", "wan"}
    rooms = (PACKAGE / "policies", PACKAGE / "pipelines" / "architectures")
    offenders = []
    for name, path in sorted(modules().items()):
        if any(path.is_relative_to(room) for room in rooms):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            literals = {c.value for o in operands for c in ast.walk(o) if isinstance(c, ast.Constant)}
            if literals & names:
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders, "compare a family's traits, not its name: " + ", ".join(offenders)
