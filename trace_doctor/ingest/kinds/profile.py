"""pyinstrument profiles (JSON renderer output, `.pyisession`, speedscope-like frame records) ->
`frames` and `profiles`."""

from __future__ import annotations

from pathlib import Path

from trace_doctor.ingest.kinds.registry import ContentTest, InputKind, Parsed, Reading, Sniffed, register
from trace_doctor.ingest.parsers.profiles import parse_profile_files
from trace_doctor.model import IngestWarning


def parse(paths: list[Path], warnings: list[IngestWarning], reading: Reading) -> Parsed:
    frames, profiles, inputs = parse_profile_files(paths, warnings)
    return Parsed({"frames": frames, "profiles": profiles}, inputs)


def profile_document(sniffed: Sniffed) -> bool:
    document = sniffed.document
    if not document.startswith(b"{"):
        return False
    window = document[:8192]
    return (
        b'"root_frame"' in document
        or (b'"frame_tree"' in window and b'"session"' in window)
        or b'"frame_records"' in document
    )


KIND = register(
    InputKind(
        name="profile",
        order=70,
        fills=("frames", "profiles"),
        parse=parse,
        name_test=lambda name: name.endswith(".pyisession"),
        content=(ContentTest("json", profile_document, rank=10, noun="a pyinstrument profile"),),
    )
)
