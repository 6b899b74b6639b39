"""Input kinds: every kind of file trace-doctor reads, each declared once, in its own module.

A kind says how a file is recognised as one of its own (by name, by content), how its files are
parsed, which RunTables fields that fills, and its place in the ingest order. discover.py asks the
registered kinds what a file is; ingest/read_run.py runs their parsers. Adding a kind is adding a
module here (it registers itself when the registry is first read) and its tests.
"""
