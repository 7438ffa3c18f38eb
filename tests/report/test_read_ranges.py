"""Byte ranges of whole lines, which worker processes read themselves."""

from __future__ import annotations

import random

from otel_rl._internal.read.ranges import line_ranges, read_range


def _write(tmp_path, lines: list[bytes], tail: bytes = b"") -> str:
    path = tmp_path / "sessions-r0.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines) + tail)
    return str(path)


def test_ranges_cover_the_file_in_whole_lines_up_to_its_last_part(tmp_path):
    rng = random.Random(3)
    lines = [b"x" * rng.randrange(0, 300) for _ in range(5000)]
    path = _write(tmp_path, lines, tail=b'{"cut sh')
    blocks, rest = line_ranges(path, chunk=20_000, window=1_000)
    data = open(path, "rb").read()
    assert blocks[0][0] == 0 and all(a[1] == b[0] for a, b in zip(blocks, blocks[1:])) and blocks[-1][1] == rest
    assert all(data[end - 1:end] == b"\n" and end - start >= 20_000 for start, end in blocks)
    assert len(data) - rest <= 21_000
    assert b"".join(read_range(path, start, end) for start, end in blocks) + data[rest:] == data


def test_a_line_longer_than_the_window_leaves_the_file_to_the_streaming_reader(tmp_path):
    path = _write(tmp_path, [b"a" * 100] * 500 + [b"b" * 5_000] + [b"c" * 100] * 500)
    assert line_ranges(path, chunk=2_000, window=1_000) is None


def test_a_compressed_file_is_not_cut(tmp_path):
    path = tmp_path / "sessions-r0.jsonl.gz"
    path.write_bytes(b"")
    assert line_ranges(str(path)) is None


def test_a_range_of_a_file_cut_shorter_since_ends_at_its_last_newline(tmp_path):
    path = _write(tmp_path, [b"one", b"two"], tail=b"thr")
    assert read_range(path, 0, 100) == b"one\ntwo\n"
