"""otel-rl convert to .pftrace with the compiled encoder: the same file as the Python encoder writes.

Each test converts the same inputs twice, once with the compiled encoder and once
with the Python one (the extension switched off the way a machine without a C
compiler lacks it), and compares the files byte for byte.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from test_convert_perfetto import rollout, run, write_rank  # noqa: F401 - the run fixture

from otel_rl._internal.encode.perfetto import native
from otel_rl.convert import convert
from otel_rl.convert.perfetto_output import PerfettoOutput
from support.perfetto import load_file

needs_compiled = pytest.mark.skipif(native._native is None, reason="the compiled encoder was not built")


def python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_native", None)


def converted(inputs: list[str], output: Path, monkeypatch: pytest.MonkeyPatch, *, compiled: bool, **options):
    with monkeypatch.context() as patch:
        if not compiled:
            python_only(patch)
        stats = convert(inputs, str(output), **options)
    return stats, output.read_bytes()


@needs_compiled
@pytest.mark.parametrize("workers", [0, 2])
def test_the_compiled_encoder_writes_the_python_encoders_file(run, tmp_path, monkeypatch, workers):  # noqa: F811
    ours = converted([str(run)], tmp_path / "python.pftrace", monkeypatch, compiled=False, workers=workers)
    theirs = converted([str(run)], tmp_path / "compiled.pftrace", monkeypatch, compiled=True, workers=workers)
    assert theirs[1] == ours[1]
    assert (theirs[0].events, theirs[0].files) == (ours[0].events, ours[0].files)
    assert load_file(tmp_path / "compiled.pftrace").slices


@needs_compiled
def test_a_gzipped_output_is_the_same_too(run, tmp_path, monkeypatch):  # noqa: F811
    ours = converted([str(run)], tmp_path / "python.pftrace.gz", monkeypatch, compiled=False)[1]
    theirs = converted([str(run)], tmp_path / "compiled.pftrace.gz", monkeypatch, compiled=True)[1]
    assert gzip.decompress(theirs) == gzip.decompress(ours)


@needs_compiled
def test_other_writers_lines_and_pids_claimed_late_give_the_same_file(tmp_path, monkeypatch):
    # AReaL-style lines without batch markers, two processes in one file (the second pid is
    # claimed when its lines come), a pid another file already took (remapped), odd values.
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("\n".join([
        '{"ph":"M","name":"process_name","pid":7,"tid":0,"args":{"name":"[actor] Rank 0, Process"}}',
        '{"ph":"X","name":"fwd","cat":"c","ts":1.5,"dur":3,"pid":7,"tid":1,"args":{"rank":0,"x":[1,{"y":2}]}}',
        '{"ph":"X","name":"other","ts":2,"dur":1,"pid":8,"tid":"s","args":{"v":1.25,"s":"\\u00e9t\\u00e9"}}',
        '{"ph":"C","name":"mem","ts":3,"pid":7,"tid":0,"args":{"used":5,"free":0.5}}',
    ]) + "\n")
    second.write_text('{"ph":"X","name":"fwd","ts":1,"dur":2,"pid":7,"tid":1}\n{"ph":"i","name":"mark","ts":1.5,"pid":7,"tid":1}')
    inputs = [str(first), str(second)]
    ours = converted(inputs, tmp_path / "python.pftrace", monkeypatch, compiled=False)
    theirs = converted(inputs, tmp_path / "compiled.pftrace", monkeypatch, compiled=True)
    assert theirs[1] == ours[1]
    assert (theirs[0].events, theirs[0].remapped_pids) == (ours[0].events, ours[0].remapped_pids)


@needs_compiled
@pytest.mark.parametrize("odd", [
    '{"ph":"X","name":"big","ts":1,"dur":1,"pid":7,"tid":1,"args":{"n":18446744073709551615}}',
    'not json at all',
    '',
])
def test_input_the_compiled_encoder_does_not_mirror_is_converted_again_in_python(tmp_path, monkeypatch, odd):
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join([
        '{"ph":"X","name":"before","ts":1,"dur":5,"pid":7,"tid":1}', odd,
        '{"ph":"X","name":"after","ts":2,"dur":1,"pid":7,"tid":1}']) + "\n")
    ours = converted([str(path)], tmp_path / "python.pftrace", monkeypatch, compiled=False)
    theirs = converted([str(path)], tmp_path / "compiled.pftrace", monkeypatch, compiled=True)
    assert theirs[1] == ours[1]
    assert theirs[0].malformed == ours[0].malformed
    names = [s.name for s in load_file(tmp_path / "compiled.pftrace").slices]
    assert names[0] == "before" and names[-1] == "after"


def test_without_the_extension_the_python_encoder_writes_the_trace(run, tmp_path, monkeypatch):  # noqa: F811
    python_only(monkeypatch)
    with open(tmp_path / "t.pftrace", "wb") as raw:
        out = PerfettoOutput(raw, str(tmp_path / "t.pftrace"), compiled=True)
        assert not out.compiled
    stats = convert([str(run)], str(tmp_path / "trace.pftrace"))
    assert stats.events and load_file(tmp_path / "trace.pftrace").slices


@needs_compiled
def test_standard_output_is_written_by_the_python_encoder(tmp_path):
    # It cannot be rewound, so nothing the compiled encoder might give up on may reach it.
    with open(tmp_path / "t.pftrace", "wb") as raw:
        assert PerfettoOutput(raw, "t.pftrace", compiled=True).compiled
        assert not PerfettoOutput(raw, "t.pftrace").compiled
