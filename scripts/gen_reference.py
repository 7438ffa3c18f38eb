#!/usr/bin/env python3
"""Writes ``docs/reference.md`` from the modules that define otel_rl's names.

    .venv/bin/python scripts/gen_reference.py           # write docs/reference.md
    .venv/bin/python scripts/gen_reference.py --check   # exit 1 when it is stale

Three sources, each defined once in the package:

* the configuration registry, ``otel_rl/_internal/config.py`` (``PARAMS``: setting,
  environment variable, default, unit, AReaL config path, description), and the
  docstrings of ``otel_rl/environment_variables.py`` for the other variables read;
* the attribute, baggage and file-name keys, ``otel_rl/_internal/keys.py``;
* the diagnostic kinds, ``otel_rl/_internal/diagnostics.py``.

A key's or kind's description is the ``#:`` comment above its constant; the
``# --- title`` comments of ``keys.py`` become the sections of the page.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import sys
import types
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(ROOT, "docs", "reference.md")
sys.path.insert(0, ROOT)


# --- reading the sources ------------------------------------------------------------------
def _module(name: str) -> Any:
    """``otel_rl.<name>``, without running ``otel_rl/__init__.py`` when it is not imported yet.

    The modules read here sit on the package's base floor and import nothing but
    each other, so the page can be written without importing the SDK, and
    without ``OTEL_RL_ENABLED=1`` in the environment configuring tracing on import.
    """
    if "otel_rl" not in sys.modules:
        for package in ("otel_rl", "otel_rl._internal"):
            stub = types.ModuleType(package)
            stub.__path__ = [os.path.join(ROOT, *package.split("."))]
            sys.modules[package] = stub
    return importlib.import_module(f"otel_rl.{name}")


def _source(module: Any) -> str:
    with open(module.__file__, encoding="utf-8") as f:
        return f.read()


def _documented_constants(module: Any) -> list[tuple[str | None, str, str]]:
    """``(section, name, description)`` for each top-level ``NAME = ...`` in ``module``.

    The description is the block of ``#:`` comment lines right above the
    assignment; the section is the latest ``# --- title`` comment before it.
    """
    source = _source(module)
    lines = source.splitlines()
    found = []
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper()):
            continue
        row = node.lineno - 1
        doc: list[str] = []
        i = row - 1
        while i >= 0 and lines[i].startswith("#:"):
            doc.insert(0, lines[i][2:].strip())
            i -= 1
        section = None
        for j in range(row - 1, -1, -1):
            if lines[j].startswith("# --- "):
                section = lines[j][len("# --- "):].strip()
                break
        found.append((section, node.targets[0].id, " ".join(doc)))
    return found


def _param_sections() -> dict[str, str]:
    """Parameter name -> the ``# --- title`` comment it follows inside ``PARAMS``."""
    config = _module("_internal.config")
    source = _source(config)
    lines = source.splitlines()
    sections: dict[str, str] = {}
    for node in ast.parse(source).body:
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        if not any(isinstance(t, ast.Name) and t.id == "PARAMS" for t in targets):
            continue
        current = "General"
        previous_end = node.value.lineno
        for element in node.value.elts:
            for text in lines[previous_end:element.lineno - 1]:
                stripped = text.strip()
                if stripped.startswith("# --- "):
                    current = stripped[len("# --- "):].strip()
            if isinstance(element, ast.Call) and element.args and isinstance(element.args[0], ast.Constant):
                sections[element.args[0].value] = current
            previous_end = element.end_lineno
    return sections


def _env_docs() -> list[tuple[str, str]]:
    """``(variable, docstring)`` from ``otel_rl/environment_variables.py``, in file order."""
    environment_variables = _module("environment_variables")
    body = ast.parse(_source(environment_variables)).body
    docs = []
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs.append((node.value.value, " ".join(after.value.value.split())))
    return docs


# --- rendering ----------------------------------------------------------------------------
def _md(text: str) -> str:
    """reST inline markup of the sources as Markdown, safe inside a table cell.

    Outside code spans, ``<``, ``>`` and ``*`` are escaped (``<run_dir>`` is no
    HTML tag, ``* allows any`` no emphasis); ``|`` is escaped everywhere.
    """
    text = re.sub(r":[a-z]+:`~?(?:[\w.]*\.)?([^`]+)`", r"``\1``", text)
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "`".join(parts).replace("|", "\\|")


def _code(value: Any) -> str:
    return "`" + str(value).replace("|", "\\|") + "`"


def _default(param: Any) -> str:
    value = param.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if param.unit == "octal" and isinstance(value, int):
        return _code(f"0{value:o}")
    if value == "":
        return "empty"
    return _code(value)


def _value(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ", ".join(_code(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return ", ".join(_code(v) for v in sorted(value))
    return _code(value)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _configuration() -> list[str]:
    config = _module("_internal.config")
    out = [
        "## Configuration parameters",
        "",
        "From `PARAMS` in `otel_rl/_internal/config.py`. Precedence, lowest first: default, "
        "environment variable, `config` object (the *AReaL config* path, for AReaL's "
        "`PerfTracerConfig`), keyword overrides of `configure()` (the *setting* name). "
        "See [Configuration](configuration.md) for what the values mean together.",
        "",
    ]
    sections = _param_sections()
    order: list[str] = []
    for param in config.PARAMS:
        section = sections.get(param.name, "General")
        if section not in order:
            order.append(section)
    for section in order:
        if len(order) > 1:
            out += [f"### {section[:1].upper()}{section[1:]}", ""]
        rows = [
            (_code(p.env), _code(p.name), _code(p.areal) if p.areal else "—", _default(p), p.unit, _md(p.doc))
            for p in config.PARAMS if sections.get(p.name, "General") == section
        ]
        out += _table(("environment variable", "setting", "AReaL config", "default", "unit", "meaning"), rows)
        out.append("")
    registered = {p.env for p in config.PARAMS}
    others = [(name, doc) for name, doc in _env_docs() if name not in registered]
    if others:
        out += [
            "### Other variables read",
            "",
            "From `otel_rl/environment_variables.py`: variables otel_rl reads that are no setting "
            "of their own (fallbacks, and standard endpoints checked at `configure()`).",
            "",
        ]
        out += _table(("environment variable", "meaning"), [(_code(n), _md(d)) for n, d in others])
        out.append("")
    return out


_NO_SECTION = object()


def _keys() -> list[str]:
    keys = _module("_internal.keys")
    out = [
        "## Keys and file names",
        "",
        "From `otel_rl/_internal/keys.py`: every attribute key, baggage key, span kind, "
        "session status and run file name otel_rl writes. In a file name `r{rank}` becomes "
        "`r0` for rank 0, or `trainer-r0` when the process has the role `trainer`; the files "
        "live in the run directory (see [Files on disk](data-model.md#files-on-disk)).",
        "",
    ]
    current: Any = _NO_SECTION
    rows: list[tuple[str, ...]] = []

    def close() -> None:
        nonlocal rows
        if rows:
            out.extend(_table(("constant", "value", "meaning"), rows))
            out.append("")
        rows = []

    for section, name, doc in _documented_constants(keys):
        if section != current:
            close()
            current = section
            if section:
                title = re.sub(r"\s*\(.*$", "", section).strip()
                out += [f"### {title[:1].upper()}{title[1:]}", ""]
        rows.append((_code(name), _value(getattr(keys, name)), _md(doc)))
    close()
    return out


def _diagnostics() -> list[str]:
    diagnostics = _module("_internal.diagnostics")
    out = [
        "## Diagnostic kinds",
        "",
        "From `otel_rl/_internal/diagnostics.py`. A problem inside otel_rl never raises into "
        "the training loop: it is counted by kind in `otel_rl.diagnostics()` and the run "
        "summary's `problems`, and logged the first time it is seen (see "
        "[Reliability](reliability.md)).",
        "",
    ]
    rows = []
    for _, name, doc in _documented_constants(diagnostics):
        value = getattr(diagnostics, name)
        if isinstance(value, str):
            rows.append((_code(value), _code(name), _md(doc)))
    out += _table(("kind", "constant", "meaning"), rows)
    suffixes = getattr(diagnostics, "DYNAMIC_SUFFIXES", ())
    if suffixes:
        out += [
            "",
            "Kinds built at run time: "
            + ", ".join(f"`<file kind>{s}`" for s in suffixes)
            + " for an append-only run file (`session_records`, `metrics`, `stats`, ...), and "
            "`otlp_<signal>_exporter_log` for the SDK OTLP exporters' own log lines after the "
            "first (`otlp_traces_exporter_log`, `otlp_metrics_exporter_log`).",
        ]
    out.append("")
    return out


def render() -> str:
    """The whole of ``docs/reference.md``."""
    out = [
        "# Reference",
        "",
        "<!-- Generated by scripts/gen_reference.py; edit the sources it names, then run it. -->",
        "",
        "Every configuration parameter, attribute key and diagnostic kind otel_rl defines, "
        "generated from the modules that define them (`.venv/bin/python scripts/gen_reference.py`; "
        "`tests/integration/test_docs.py` fails when this page is stale).",
        "",
        "- [Configuration parameters](#configuration-parameters)",
        "- [Keys and file names](#keys-and-file-names)",
        "- [Diagnostic kinds](#diagnostic-kinds)",
        "",
    ]
    out += _configuration() + _keys() + _diagnostics()
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/reference.md differs from what would be written")
    parser.add_argument("--out", default=OUTPUT, help="where to write (default: docs/reference.md)")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        try:
            with open(args.out, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current != text:
            print(f"{os.path.relpath(args.out)} is stale: run .venv/bin/python scripts/gen_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
