"""`code.diff`: the cookbook's record of the code the run ran (repositories, commits, local changes).

Read by the log kind's parser (log.py), which takes its lines into `log_events`.
"""

from __future__ import annotations

from trace_doctor.ingest.kinds.registry import InputKind, register

KIND = register(InputKind(name="code_diff", order=95, file_names=frozenset({"code.diff"})))
