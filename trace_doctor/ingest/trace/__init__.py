"""The trace pipeline: Chrome-trace events read a chunk at a time (trace_*), paired into spans and
spilled to disk (span_*)."""
