"""Merges trace files into one Chrome trace JSON that Perfetto opens.

``python -m otel_rl.convert RUN_DIR/ -o trace.json`` (or ``otel-rl convert``)
reads any mix of:

* per-rank Chrome trace JSONL files written by otel_rl (``traces-r*.jsonl``),
* OTLP/JSON files, one ``ExportTraceServiceRequest`` per line or per file (what
  the OpenTelemetry Collector's file exporter writes),
* Chrome JSON documents (``{"traceEvents": [...]}`` or a bare array), such as
  torch profiler traces,

each optionally gzipped, and writes one ``{"traceEvents": [...]}`` document
(``.json`` or ``.json.gz``). Events are streamed through: memory stays flat
however large the inputs (a JSON *document* input is the exception: it is
parsed whole). What one input may cost is bounded (:class:`InputLimits`): a
line over ``--max-line-mb`` is skipped, a ``.gz`` input is read only until it
expands past ``--max-gzip-ratio`` times its size; both are reported.
Processes that used the same pid in different files get distinct pids, so
ranks on different machines never share a track.

The files are found and read by the reader layer ``otel-rl report`` shares
(``otel_rl._internal.read``); this package is the merge (:mod:`.merge`, with
its fast path :mod:`.fast_path`), the output (:mod:`.output`) and the command
line (:mod:`.cli`).
"""

from __future__ import annotations

from .._internal.read.chrome_json import iter_chrome_json_events
from .._internal.read.discovery import discover_inputs
from .._internal.read.limits import InputLimitError, InputLimits
# Also importable from here, as before the readers moved: the bounds' defaults and
# options (``otel-rl report`` shares them) and the fast path's line scanner.
from .._internal.read.limits import DEFAULT_MAX_GZIP_RATIO as DEFAULT_MAX_GZIP_RATIO
from .._internal.read.limits import DEFAULT_MAX_LINE_BYTES as DEFAULT_MAX_LINE_BYTES
from .._internal.read.limits import DEFAULT_MIN_GZIP_BYTES as DEFAULT_MIN_GZIP_BYTES
from .._internal.read.limits import add_limit_options as add_limit_options
from .._internal.read.limits import limits_from_args as limits_from_args
from .._internal.read.lines import iter_lines
from .._internal.read.otlp_json import spans_from_otlp_json
from .._internal.read.sniff import sniff_file
from .cli import main
from .fast_path import scan_chrome_lines as scan_chrome_lines
from .merge import convert
from .stats import ConvertStats

__all__ = ["ConvertStats", "InputLimitError", "InputLimits", "convert", "discover_inputs",
           "iter_chrome_json_events", "iter_lines", "main", "sniff_file", "spans_from_otlp_json"]
