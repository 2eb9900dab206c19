"""The import layering of src/pagecast, read from every module's imports (ast, nothing imported).

Data flows one way: sources produce traces, consumers read them, the runtime acts on a
running program, the CLI drives everything. In import terms the trace is the contract
at the bottom: sources write it and consumers read it, so both import it and neither
imports the other's side. A package may import its own layer and the layers listed
before it, never one after it; inside a layer the packages import each other without
cycles. docs/architecture.md shows the same table.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "pagecast"

# layer             packages (top-level modules of pagecast count as packages)
LAYERS: list[tuple[str, set[str]]] = [
    ("foundation", {"__init__", "constants", "errors", "util"}),
    ("trace", {"trace"}),
    ("sources", {"collect", "importers"}),
    ("consumers", {"learn", "policies", "sim", "gym", "plan", "report"}),
    ("runtime", {"live", "pager", "cuda", "launch", "bench"}),
    ("cli", {"cli", "__main__"}),
]
RANK = {pkg: i for i, (_, pkgs) in enumerate(LAYERS) for pkg in pkgs}
LAYER_NAME = {pkg: name for name, pkgs in LAYERS for pkg in pkgs}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _package_of(module: str) -> str:
    """``pagecast.live.loop`` → ``live``; ``pagecast.errors`` → ``errors``; ``pagecast`` → ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@functools.cache
def _imports(path: Path) -> tuple[tuple[int, str], ...]:
    """(line, module) of every pagecast import, lazy ones inside functions included; each file
    is parsed once for all the checks."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "pagecast"]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] == "pagecast"
        ):
            # `from pagecast.x import y` may name a submodule y: count it as pagecast.x.y when it is one
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((node.lineno, sub if _exists(sub) else node.module))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            out.append((node.lineno, f"<relative import in {path.name}>"))
    return tuple(out)


def _exists(module: str) -> bool:
    p = SRC.joinpath(*module.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def _edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) → where, for imports crossing packages."""
    return _edges_under(ROOT)


@functools.cache
def _edges_under(root: Path) -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = {}
    for path in _modules():
        src_mod = _module_name(path)
        for line, target in _imports(path):
            a, b = _package_of(src_mod), _package_of(target)
            if a != b:
                edges.setdefault((a, b), []).append(f"{path.relative_to(SRC)}:{line} imports {target}")
    return edges


def test_every_package_is_in_the_table():
    present = {_package_of(_module_name(p)) for p in _modules()}
    assert present - RANK.keys() == set(), "a new package needs a row in LAYERS"
    assert RANK.keys() - present == set(), "LAYERS names a package that does not exist"


def test_imports_resolve_and_are_absolute():
    """Catches imports left behind by a move (e.g. of the old pagecast.online)."""
    bad = []
    for path in _modules():
        for line, target in _imports(path):
            if target.startswith("<") or not _exists(target):
                bad.append(f"{path.relative_to(SRC)}:{line}: {target}")
    assert bad == []


@pytest.mark.parametrize("where", ["tests", "benchmarks"])
def test_tests_and_benchmarks_import_existing_modules(where):
    bad = []
    for path in sorted((SRC.parent / where).glob("*.py")):
        for line, target in _imports(path):
            if not target.startswith("<") and not _exists(target):
                bad.append(f"{where}/{path.name}:{line}: {target}")
    assert bad == []


def test_nothing_imports_a_later_layer():
    # a package missing from LAYERS is reported by test_every_package_is_in_the_table
    upward = [
        f"{LAYER_NAME[a]} → {LAYER_NAME[b]}: {w}"
        for (a, b), where in sorted(_edges().items())
        if a in RANK and b in RANK and RANK[b] > RANK[a]
        for w in where
    ]
    assert upward == []


def test_only_the_cli_imports_the_cli():
    users = sorted({a for (a, b) in _edges() if b == "cli"})
    assert users == ["__main__"]


def test_no_cycles_between_packages():
    graph: dict[str, set[str]] = {}
    for a, b in _edges():
        graph.setdefault(a, set()).add(b)
    cycles = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(
                    " → ".join(stack[stack.index(nxt) :] + [node, nxt]) if nxt in stack else f"{node} → {nxt}"
                )
            elif nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert cycles == []


def test_the_checks_see_a_violation(tmp_path, monkeypatch):
    """The rules are not vacuous: a planted upward import and a planted cycle are reported."""
    fake = tmp_path / "src" / "pagecast"
    for pkg in ("trace", "live", "cli"):
        (fake / pkg).mkdir(parents=True)
        (fake / pkg / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "trace" / "bad.py").write_text("from pagecast.live import x\n")
    (fake / "live" / "x.py").write_text("import pagecast.trace.bad\nfrom pagecast.cli import main\n")
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "SRC", tmp_path / "src")
    monkeypatch.setattr(this, "ROOT", fake)
    edges = _edges()
    assert ("trace", "live") in edges and RANK["live"] > RANK["trace"]
    assert ("live", "cli") in edges
    with pytest.raises(AssertionError):
        test_no_cycles_between_packages()
    with pytest.raises(AssertionError):
        test_nothing_imports_a_later_layer()
