"""What a conversion read, wrote and skipped (:class:`ConvertStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MAX_REPORTED", "ConvertStats"]

#: Malformed lines (and warnings) listed one by one; all are counted.
MAX_REPORTED = 1000


@dataclass
class ConvertStats:
    """What a conversion read, wrote and skipped.

    Attributes:
        files: Input files whose events were converted.
        events: Events written to the output.
        spans: OTLP spans converted (their events are part of ``events``).
        skipped_truncated: Incomplete last lines skipped (a writer was killed mid-line).
        malformed: ``(file, line, message)`` for lines that could not be read
            (the first 1000; ``malformed_count`` counts all).
        malformed_count: Every malformed line.
        skipped_files: ``(file, reason)`` for inputs that were not converted.
        cut_short: ``(file, reason)`` for inputs converted only in part: a
            gzipped file that expanded past its decompression bound
            (:class:`InputLimits`) was read up to there.
        ignored: Files found in a directory or by a pattern that hold no trace
            (session records, metrics): left out without a warning.
        remapped_pids: Processes given a new pid because another file used theirs.
        annotated: Session spans given the args of their consume and annotation lines
            (``annotations-*.jsonl`` among the inputs; :mod:`.annotations`).
        output: The file written.
        seconds: Wall-clock duration of the conversion.
    """

    files: int = 0
    events: int = 0
    spans: int = 0
    skipped_truncated: int = 0
    malformed: list[tuple[str, int, str]] = field(default_factory=list)
    malformed_count: int = 0
    skipped_files: list[tuple[str, str]] = field(default_factory=list)
    cut_short: list[tuple[str, str]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    remapped_pids: int = 0
    annotated: int = 0
    output: str = ""
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def bad_line(self, path: str, line: int, message: str) -> None:
        """Counts a malformed line (and lists it while fewer than :data:`MAX_REPORTED` are)."""
        self.malformed_count += 1
        if len(self.malformed) < MAX_REPORTED:
            self.malformed.append((path, line, message))
