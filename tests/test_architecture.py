"""The shape of the code base: no import cycles between modules, and no module over ~700 lines.

Imports are read from the source with :mod:`ast`, function-level ones included (a cycle closed inside a
function is still a cycle: the two modules cannot be understood, tested or replaced one without the other).
Only imports between the project's own modules count; ``TYPE_CHECKING`` blocks are skipped (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("teachers", "inference", "smaso")
#: The longest a module may be (the issue's "about 700 lines", with room for a docstring).
MAX_LINES = 750


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = f
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` imports (anywhere in its body)."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    out: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for c in child.orelse:
                    visit(c)
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    if (m := resolve(a.name)) is not None:
                        out.add(m)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*up, base] if base else up)
                for a in child.names:  # ``from pkg import sub`` imports the submodule
                    full = f"{base}.{a.name}" if base else a.name
                    m = full if full in modules else resolve(base)
                    if m is not None:
                        out.add(m)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    # a package's __init__ that only re-exports lazily is not a dependency of its submodules: count edges
    # between modules, not into a package's own __init__ from inside it
    graph = {}
    for name, path in modules.items():
        deps = _imports(name, path, modules)
        graph[name] = {d for d in deps if not (name.startswith(d + ".") and modules[d].name == "__init__.py")}
    return graph


def test_no_import_cycles_between_modules():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (function-level imports included): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_module_is_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
