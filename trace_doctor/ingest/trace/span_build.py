"""A trace's paired spans -> the `spans` table: names, order and steps composed.

Pairing, segments and ignored phases are done as the file is read (span_stream.py).

Names. A span's track and thread come from its args (the cookbook's); otherwise the track from the
`thread_name` metadata of its tid (else the tid itself) and the thread from the `process_name`
metadata of its pid (else a string pid).
"""

from __future__ import annotations

import polars as pl

from trace_doctor.ingest.reading.file_warnings import FileWarnings
from trace_doctor.ingest.storage.stored_table import PartWriter
from trace_doctor.ingest.trace.span_spill import write_sorted
from trace_doctor.ingest.trace.span_stream import SpanStream
from trace_doctor.model import SPANS_SCHEMA

# The spans table (SPANS_SCHEMA) and what it keeps of where each span came from.
SPAN_COLUMNS: dict[str, pl.DataType] = {
    **SPANS_SCHEMA,
    "cat": pl.String,
    "step_source": pl.String,
    "line_begin": pl.Int64,
    "line_end": pl.Int64,
    "source": pl.String,
}


def empty_spans() -> pl.DataFrame:
    """The spans table with no rows (every column present)."""
    return pl.DataFrame(schema=SPAN_COLUMNS)


def build_spans(stream: SpanStream, source: str, warnings: FileWarnings, out: PartWriter) -> int:
    """Write the spans of one file to `out`, from its events as paired while they were read
    (span_stream.py); the file's warnings go to `warnings`. Returns the number of spans."""
    built = stream.finish()
    if built is None:
        return 0
    spill, unmatched = built
    # Ignored phases first, then unmatched E events: the order the whole-table builder reported them.
    stream.ignored_phase_warnings(warnings)
    warnings.absorb(unmatched)
    stream.imprecise_clock_warning(warnings)
    write_sorted(spill, stream.names(), source, out)
    return out.height
