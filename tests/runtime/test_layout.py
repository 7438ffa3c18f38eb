"""The package's floors: ``otel_rl._internal`` depends only downward.

Each sub-package of ``_internal`` is a floor; a module imports from its own
floor or from floors below it, never from above and never from the public
modules built on top (``tracing``, ``sessions``, ...). Lazy imports inside
functions count too: they are how cycles hide.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
from support.paths import ROOT

PACKAGE = ROOT / "otel_rl"

#: Floor of each part of ``otel_rl._internal``; modules directly in it are the base.
FLOORS = {
    "": 0,
    "recording": 1,
    "encode": 2,
    "propagate": 2,
    "export": 3,
    "read": 3,
    "stats": 4,
    "events": 4,
    "control": 5,
    "runtime": 6,
}
#: The only module above ``_internal`` that it may import: constants, no code.
ALLOWED_PUBLIC = {"otel_rl.environment_variables"}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, str | None, int]]:
    """``(module, imported name or None, line)`` for every import in ``name``, lazy ones included."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:
                    found.append((sub, None, node.lineno))
                else:
                    found.append((target, alias.name, node.lineno))
    return [item for item in found if item[0] == "otel_rl" or item[0].startswith("otel_rl.")]


def _floor(name: str) -> tuple[str, int] | None:
    """The floor part and number of an ``_internal`` module; None outside it."""
    prefix = "otel_rl._internal"
    if name == prefix:
        return "", 0
    if not name.startswith(prefix + "."):
        return None
    rest = name[len(prefix) + 1:].split(".")
    part = rest[0] if len(rest) > 1 or rest[0] in FLOORS else ""
    return part, FLOORS[part]


def test_every_internal_module_sits_on_a_known_floor():
    unknown = sorted(n for n in MODULES if n.startswith("otel_rl._internal.")
                     and n.split(".")[2] not in FLOORS and MODULES[n].parent != PACKAGE / "_internal")
    assert unknown == []


def test_internal_modules_never_import_the_public_modules_above_them():
    upward = [
        f"{name}:{line} imports {target}"
        for name in MODULES if _floor(name) is not None
        for target, _, line in _imports(name)
        if _floor(target) is None and target not in ALLOWED_PUBLIC
    ]
    assert upward == []


def test_internal_floors_import_only_their_own_floor_or_those_below():
    upward = []
    for name in MODULES:
        here = _floor(name)
        if here is None:
            continue
        for target, _, line in _imports(name):
            there = _floor(target)
            if there is None or there[0] == here[0]:
                continue
            if there[1] >= here[1]:
                upward.append(f"{name}:{line} imports {target} (floor {there[0]!r} over {here[0] or 'base'!r})")
    assert upward == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_internal_modules_import_each_other_without_cycles():
    graph = {name: {t for t, _, _ in _imports(name) if _floor(t) is not None and t != name}
             for name in MODULES if _floor(name) is not None}
    # A package's __init__ importing its own modules is how a floor is re-exported, not a cycle.
    for name, targets in graph.items():
        if MODULES[name].name == "__init__.py":
            targets.difference_update(t for t in set(targets) if t.startswith(name + "."))
    assert _cycles(graph) == []


def _compiled(target: str, attr: str) -> bool:
    """A compiled accelerator (``_name.c`` in the package), which only its Python twin imports."""
    return PACKAGE.parent.joinpath(*target.split("."), f"{attr}.c").exists()


def test_no_module_imports_a_private_name_from_another_module():
    private = [
        f"{name}:{line} imports {target}.{attr}"
        for name in MODULES
        for target, attr, line in _imports(name)
        if attr is not None and attr.startswith("_") and not attr.startswith("__") and target != name
        and not _compiled(target, attr)
    ]
    assert private == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_stays_under_600_lines(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= 620, f"{name} has {lines} lines"
