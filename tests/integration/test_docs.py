"""The documentation: the generated reference is current and every relative link resolves.

``docs/reference.md`` is written by ``scripts/gen_reference.py`` from the
configuration registry, the keys module and the diagnostic kinds; a change to
any of them without running the generator fails here. Links are checked the
way GitHub renders them: a relative path must name a file of the repository,
and a ``#fragment`` must be the slug of a heading in the page it points at.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest
from support.paths import ROOT


DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
GENERATOR = ROOT / "scripts" / "gen_reference.py"

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """``text`` without fenced blocks and code spans, where nothing is a link."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercased, punctuation
    removed, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for _, text in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = _slug(text)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _relative_links(page: pathlib.Path) -> list[str]:
    return [target for target in _LINK.findall(_prose(page.read_text(encoding="utf-8")))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)]


def test_the_reference_is_what_the_generator_writes():
    expected = _generator().render()
    current = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert current == expected, "docs/reference.md is stale: run .venv/bin/python scripts/gen_reference.py"


def test_the_generator_check_flag_fails_on_a_stale_page_and_passes_on_a_fresh_one(tmp_path):
    out = tmp_path / "reference.md"
    out.write_text("# stale\n", encoding="utf-8")
    command = [sys.executable, str(GENERATOR), "--out", str(out)]
    stale = subprocess.run(command + ["--check"], capture_output=True, text=True, timeout=120)
    assert stale.returncode == 1, stale.stderr
    assert "stale" in stale.stderr
    subprocess.run(command, check=True, timeout=120)
    fresh = subprocess.run(command + ["--check"], capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    assert out.read_text(encoding="utf-8") == (DOCS / "reference.md").read_text(encoding="utf-8")


def test_every_parameter_key_and_diagnostic_kind_has_a_description():
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    empty = [line for line in reference.splitlines()
             if line.startswith("| `") and line.rstrip().endswith("|  |")]
    assert empty == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page):
    broken = []
    for target in _relative_links(page):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved.relative_to(ROOT) if ROOT in resolved.parents else resolved}")
        elif fragment and resolved.suffix == ".md" and fragment not in _anchors(resolved):
            broken.append(f"{target}: no heading #{fragment} in {resolved.relative_to(ROOT)}")
    assert broken == []


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in _relative_links(README)}
    assert sorted(p.name for p in DOCS.glob("*.md") if p.resolve() not in linked) == []


def test_the_readme_opens_with_the_demo_and_the_test_command():
    """A fresh machine runs these two first; CI's ``.ci/run`` runs the second."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    assert blocks[:2] == [
        'python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e ".[demo]" '
        "&& .venv/bin/python -m otel_rl.demo\n",
        "scripts/test\n",
    ]
    assert "exec scripts/test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_slugs_follow_githubs_rules():
    assert _slug("Reports (`otel-rl report`)") == "reports-otel-rl-report"
    assert _slug("Owner-only files, never through someone else's link") == \
        "owner-only-files-never-through-someone-elses-link"
    assert _slug("Training and rollout metrics (`otel_rl.stats`)") == "training-and-rollout-metrics-otel_rlstats"
