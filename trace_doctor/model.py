"""The lossless model every stage shares: ingested tables, run metadata and findings.

Data flows one way: discover -> ingest -> RunTables -> rules -> Finding -> renderers. Nothing
downstream of RunTables re-reads a file.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import polars as pl

if TYPE_CHECKING:
    from trace_doctor.decision import Gate, Verdict
    from trace_doctor.policy import Policy

Severity = Literal["info", "warning", "error"]
SEVERITY_RANK: dict[str, int] = {"info": 1, "warning": 2, "error": 3}


@dataclass(frozen=True)
class IngestWarning:
    """One record that could not be read: where it was and what was wrong with it."""

    path: str
    line: int | None
    problem: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "problem": self.problem}


@dataclass
class InputFile:
    """A file discovery recognised, with how many records its parser kept and skipped."""

    kind: str
    path: str
    records: int = 0
    skipped: int = 0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "records": self.records, "skipped": self.skipped}


@dataclass
class PassedOver:
    """A file discovery looked at and did not read, with the reason."""

    path: str
    reason: str


@dataclass(frozen=True)
class WandbMetadata:
    """What W&B recorded about the machine and process that trained (`wandb-metadata.json`).

    Only the fields support asks about are kept; the user's e-mail and login name are not read.
    Older W&B (`heartbeatAt`, `cuda`) and wandb-core (`cpu`, `gpu_nvidia`, `cudaVersion`) shapes both fill it.
    """

    path: str
    wandb_run_id: str | None = None  # from the `run-<date>_<time>-<id>` folder name
    python: str | None = None  # "3.11.9" (wandb-core writes "CPython 3.11.9")
    os: str | None = None
    host: str | None = None
    program: str | None = None
    code_path: str | None = None
    args: tuple[str, ...] = ()
    started_at: str | None = None
    executable: str | None = None
    git_remote: str | None = None
    git_commit: str | None = None
    cpu_count: int | None = None
    cpu_count_logical: int | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    cuda_version: str | None = None
    memory_total_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "wandb_run_id": self.wandb_run_id,
            "python": self.python,
            "os": self.os,
            "host": self.host,
            "program": self.program,
            "code_path": self.code_path,
            "args": list(self.args),
            "started_at": self.started_at,
            "executable": self.executable,
            "git": {"remote": self.git_remote, "commit": self.git_commit},
            "cpu_count": self.cpu_count,
            "cpu_count_logical": self.cpu_count_logical,
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "cuda_version": self.cuda_version,
            "memory_total_bytes": self.memory_total_bytes,
        }


@dataclass
class RunMeta:
    """What the run says about itself: config.json fields and the inferred trainer kind."""

    path: str = ""
    trainer: str = "unknown"  # sl | rl | dpo | distillation | unknown
    trainer_mode: str | None = None  # rl: sync | stream | async; distillation: on_policy | off_policy
    model_name: str | None = None
    renderer_name: str | None = None
    lora_rank: int | None = None
    temperature: float | None = None
    enable_trace: bool | None = None
    submit_ahead: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    # One per W&B run folder found (a relaunched run has several), in path order.
    wandb: list[WandbMetadata] = field(default_factory=list)
    # Set by `trace-doctor watch` only, when it judged the run stalled: the wall-clock seconds it saw
    # nothing written, past its stall bound, while it followed the files. A cold read has no such reading.
    watched_stall_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "trainer": self.trainer,
            "trainer_mode": self.trainer_mode,
            "model_name": self.model_name,
            "renderer_name": self.renderer_name,
            "lora_rank": self.lora_rank,
            "temperature": self.temperature,
            "enable_trace": self.enable_trace,
            "submit_ahead": self.submit_ahead,
        }


def _empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


# Core schemas of the tables (ARCHITECTURE.md). Parsers may add columns; these always exist.
STEPS_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64,
    "segment": pl.Int32,
    "line": pl.Int64,
    "source": pl.String,
    "superseded": pl.Boolean,
    "is_eval_row": pl.Boolean,
}
SPANS_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "thread": pl.String,
    "track": pl.String,
    "start_us": pl.Float64,
    "end_us": pl.Float64,
    "dur_us": pl.Float64,
    "depth": pl.Int32,
    "step": pl.Int64,
    "segment": pl.Int32,
    "closed": pl.Boolean,
    "args": pl.String,
}
STEP_SPANS_SCHEMA: dict[str, pl.DataType] = {
    "step": pl.Int64,
    "name": pl.String,
    "duration_s": pl.Float64,
    "wall_start_s": pl.Float64,
    "wall_end_s": pl.Float64,
    "line": pl.Int64,
}
FRAMES_SCHEMA: dict[str, pl.DataType] = {
    "profile": pl.String,
    "frame_id": pl.Int64,
    "parent_id": pl.Int64,
    "depth": pl.Int32,
    "function": pl.String,
    "file_path": pl.String,
    "line_no": pl.Int64,
    "class_name": pl.String,
    "time_s": pl.Float64,
    "self_time_s": pl.Float64,
    "await_time_s": pl.Float64,
    "is_application_code": pl.Boolean,
    "synthetic": pl.Boolean,
}
PROFILES_SCHEMA: dict[str, pl.DataType] = {
    "profile": pl.String,
    "format": pl.String,  # json | pyisession | html-session
    "async_mode": pl.String,  # enabled | disabled | unknown
    "target_description": pl.String,
    "start_time": pl.Float64,
    "duration_s": pl.Float64,
    "cpu_time_s": pl.Float64,
    "sample_count": pl.Int64,
}
TASK_SNAPSHOTS_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String,
    "line": pl.Int64,
    "timestamp": pl.Datetime("us"),
    "label": pl.String,
    "snapshot": pl.Int64,  # index of the dump block within the file
    "task_count": pl.Int64,
    "interval_s": pl.Float64,
    "task_name": pl.String,
    "state": pl.String,
    "coroutine": pl.String,
}
STACK_SNAPSHOTS_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String,
    "line": pl.Int64,
    "timestamp": pl.Datetime("us"),
    "snapshot": pl.Int64,
    "label": pl.String,
    "thread_ident": pl.Int64,
    "frame_index": pl.Int32,  # 0 = outermost
    "file_path": pl.String,
    "line_no": pl.Int64,
    "function": pl.String,
    "code": pl.String,
}
LOG_EVENTS_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String,
    "line": pl.Int64,
    "timestamp": pl.Datetime("us"),
    "logger": pl.String,
    "level": pl.String,
    "kind": pl.String,
    "message": pl.String,
    "fields": pl.String,  # JSON text of parsed fields
}
CHECKPOINTS_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String,
    "batch": pl.Int64,
    "epoch": pl.Int64,
    "final": pl.Boolean,
    "state_path": pl.String,
    "sampler_path": pl.String,
    "rolling": pl.Boolean,
    "line": pl.Int64,
}
# One row per trajectory of the RL rollout summaries (FORMATS.md 3.6): the exact per-group rewards
# and per-sample lengths that metrics.jsonl only has as batch averages.
ROLLOUTS_SCHEMA: dict[str, pl.DataType] = {
    "source": pl.String,
    "line": pl.Int64,
    "split": pl.String,  # train | eval/<label>
    "iteration": pl.Int64,
    "group_idx": pl.Int64,
    "traj_idx": pl.Int64,
    "sampling_client_step": pl.Int64,
    "total_reward": pl.Float64,
    "final_reward": pl.Float64,
    "n_turns": pl.Int64,
    "ac_tokens": pl.Int64,  # sum of the steps' ac_len
    "max_ac_len": pl.Int64,
    "last_ac_len": pl.Int64,  # the final turn's ac_len (truncation is decided there)
    "last_stop_reason": pl.String,  # the final turn's stop_reason (newer exports: "length" / "stop")
    "ob_len": pl.Int64,  # sum of the steps' ob_len (as metrics' total_ob_tokens counts them)
    "final_ob_len": pl.Int64,
    "tags": pl.String,  # comma-joined
}


@dataclass
class RunTables:
    """Everything ingested from one run, as polars tables plus metadata and an ingest account."""

    meta: RunMeta = field(default_factory=RunMeta)
    steps: pl.DataFrame = field(default_factory=lambda: _empty(STEPS_SCHEMA))
    spans: pl.DataFrame = field(default_factory=lambda: _empty(SPANS_SCHEMA))
    step_spans: pl.DataFrame = field(default_factory=lambda: _empty(STEP_SPANS_SCHEMA))
    frames: pl.DataFrame = field(default_factory=lambda: _empty(FRAMES_SCHEMA))
    profiles: pl.DataFrame = field(default_factory=lambda: _empty(PROFILES_SCHEMA))
    task_snapshots: pl.DataFrame = field(default_factory=lambda: _empty(TASK_SNAPSHOTS_SCHEMA))
    stack_snapshots: pl.DataFrame = field(default_factory=lambda: _empty(STACK_SNAPSHOTS_SCHEMA))
    log_events: pl.DataFrame = field(default_factory=lambda: _empty(LOG_EVENTS_SCHEMA))
    checkpoints: pl.DataFrame = field(default_factory=lambda: _empty(CHECKPOINTS_SCHEMA))
    rollouts: pl.DataFrame = field(default_factory=lambda: _empty(ROLLOUTS_SCHEMA))
    inputs: list[InputFile] = field(default_factory=list)
    # The processes that wrote the metrics (ingest.launches.Launch): one, or several after relaunches.
    launches: list[Any] = field(default_factory=list)
    passed_over: list[PassedOver] = field(default_factory=list)
    warnings: list[IngestWarning] = field(default_factory=list)
    # Facts about the other runs of a folder the fleet analyses alongside this one (peers.py), e.g.
    # {"step0_kl": [first-step KL of each other run of the same model and renderer]}; empty alone.
    peers: dict[str, Any] = field(default_factory=dict)
    # Whether credentials were removed from every string read from the files (trace_doctor.redact).
    redacted: bool = False

    # The data tables: every field above that holds a DataFrame, in field order (set below, so a new
    # table is one new field).
    TABLE_NAMES: ClassVar[tuple[str, ...]] = ()

    # Tables that ingest may leave on disk (a StoredTable: any object with `scan()` and `height`):
    # reading the attribute reads the table whole (and keeps it); the analysis scans instead.
    STORED_TABLES = ("spans", "step_spans")

    def tables(self) -> dict[str, pl.DataFrame]:
        return {name: getattr(self, name) for name in self.TABLE_NAMES}

    def scan(self, name: str) -> pl.LazyFrame:
        """A lazy scan of one table: only the columns and rows the query asks for are read."""
        value = self._raw(name) if name in self.STORED_TABLES else getattr(self, name)
        if isinstance(value, pl.DataFrame):
            return value.lazy()
        scan = value.scan()
        self.take_late_warnings(value)
        return scan

    def take_late_warnings(self, stored: Any) -> None:
        """A stored table's warnings from its first read (a file changed since ingest) join the run's."""
        late = getattr(stored, "late_warnings", None)
        if late:
            self.warnings.extend(late)
            late.clear()

    def height(self, name: str) -> int:
        """A table's row count, without reading a stored table."""
        value = self._raw(name) if name in self.STORED_TABLES else getattr(self, name)
        return value.height

    def ensure_tables(self) -> None:
        """Have the tables at hand: a run answered from the result cache reads them on first use."""

    def _raw(self, name: str) -> Any:
        """A stored table as held: a DataFrame, or the stored table not yet read."""
        key = f"_{name}"
        if key not in self.__dict__:
            self.ensure_tables()
        return self.__dict__[key]

    def spans_where(self, where: pl.Expr, columns: list[str] | None = None) -> pl.DataFrame:
        """The spans matching `where`, a row-wise predicate (in table order), with only `columns` if
        given: the filter is applied as the stored table is scanned, so only the matching rows are ever
        held, and a stored table's parts seen before (a grown run's) are not read again (part_memo)."""
        value = self._raw("spans")
        if isinstance(value, pl.DataFrame) or not hasattr(value, "where"):
            scan = self.scan("spans").filter(where)
            return (scan.select(columns) if columns else scan).collect()
        found = value.where(where, columns)
        self.take_late_warnings(value)
        return found

    def spans_per_part(self, key: Hashable, query: Callable[[pl.LazyFrame], pl.LazyFrame]) -> list[pl.DataFrame]:
        """A part-local `query` (a filter, or an aggregate the caller combines over parts) on each part of
        the spans table, in order; a stored table's parts seen before are answered from memory (part_memo).
        `key` names the query: two queries with the same key must be the same query."""
        value = self._raw("spans")
        if isinstance(value, pl.DataFrame) or not hasattr(value, "per_part"):
            return [query(self.scan("spans")).collect()]
        found = value.per_part(key, query)
        self.take_late_warnings(value)
        return found

    def spans_combined(
        self,
        key: Hashable,
        query: Callable[[pl.LazyFrame], pl.LazyFrame],
        combine: Callable[[pl.LazyFrame], pl.LazyFrame],
    ) -> pl.DataFrame:
        """`combine` of the per-part results of `query` (spans_per_part) as one frame: a per-part extent
        re-aggregated, a union of unions. With no part, `query` on no rows (its columns)."""
        parts = self.spans_per_part(key, query)
        if not parts:
            return query(self.scan("spans").head(0)).collect()
        return combine(pl.concat(parts, how="vertical").lazy()).collect()

    def has_input(self, kind: str) -> bool:
        return any(i.kind == kind and i.records > 0 for i in self.inputs)

    @property
    def records_read(self) -> int:
        return sum(i.records for i in self.inputs)

    @property
    def records_skipped(self) -> int:
        return sum(i.skipped for i in self.inputs)


def _read_when_used(name: str) -> property:
    """RunTables.<name>: a DataFrame, read from its stored table the first time it is asked for."""
    attr = f"_{name}"

    def get(self: RunTables) -> pl.DataFrame:
        value = self._raw(name)
        if not isinstance(value, pl.DataFrame):
            stored, value = value, value.read()
            self.take_late_warnings(stored)
            self.__dict__[attr] = value
        return value

    def set(self: RunTables, value: Any) -> None:
        self.__dict__[attr] = value

    return property(get, set)


RunTables.TABLE_NAMES = tuple(f.name for f in fields(RunTables) if f.type == "pl.DataFrame")

for _name in RunTables.STORED_TABLES:
    setattr(RunTables, _name, _read_when_used(_name))


@dataclass
class Finding:
    """One diagnosis: what is wrong, where, with which evidence, what it cost, and the fix."""

    rule: str
    code: str
    severity: Severity
    title: str
    message: str
    fix: str
    steps: list[int] = field(default_factory=list)
    time_ranges_us: list[list[float]] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    seconds_lost: float | None = None
    fraction_of_wall: float | None = None
    confidence: str | None = None  # low | medium | high, where a rule combines evidence
    fingerprint: str | None = None  # rule + what it is about, stable across runs (baseline)
    # Keys (fingerprints) of the findings that explain this one: a symptom names its causes (triage).
    explained_by: list[str] = field(default_factory=list)

    def sort_key(self) -> tuple:
        return (
            -SEVERITY_RANK[self.severity],
            -(self.seconds_lost or 0.0),
            self.code,
            self.fingerprint or "",
            self.message,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "code": self.code,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "steps": list(self.steps),
            "time_ranges_us": [list(r) for r in self.time_ranges_us],
            "evidence": self.evidence,
            "impact": {"seconds_lost": self.seconds_lost, "fraction_of_wall": self.fraction_of_wall},
            "fix": self.fix,
            "confidence": self.confidence,
            "fingerprint": self.fingerprint or self.rule,
            "explained_by": list(self.explained_by),
        }


@dataclass
class RuleOutcome:
    """How one rule ended: fired, passed, not_applicable (with the missing input) or error."""

    rule: str
    status: Literal["fired", "passed", "not_applicable", "error"]
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "status": self.status, "reason": self.reason}


@dataclass
class Analysis:
    """The result of analysing a run: the lossless input to every renderer.

    `verdict` and `gate` are decided once (trace_doctor.decision) after every rule and the baseline
    comparison ran; renderers and the exit code only display them. `policy` is the thresholds the
    rules ran with, so a renderer draws the band the user configured, not the default.
    """

    run: RunTables
    findings: list[Finding]
    outcomes: list[RuleOutcome]
    # The summary block as the stages assemble it (summarize, the training machine, the triage's
    # TimeAccount, the verdict's quality cause); read it typed through `run_summary`.
    summary: dict[str, Any]
    baseline: BaselineComparison | None = None
    # Series the rules derived once (per-step times with phases, warm-up length), kept for the
    # renderers that draw them so no renderer re-derives them: {"step_times": DataFrame, "warmup_steps": int}.
    derived: dict[str, Any] = field(default_factory=dict)
    policy: Policy | None = None
    verdict: Verdict | None = None
    gate: Gate | None = None

    @property
    def run_summary(self) -> RunSummary:
        """The summary block, typed."""
        return RunSummary.from_dict(self.summary or {})


# --- Result objects: what the analysis computed, each with the JSON form of the contract ------------
# Frozen: built once by the stage that computes them, then only read. `to_dict()` writes the keys in
# the order the JSON contract has always had (documents are compared byte for byte); `from_dict()`
# reads that form back (a document on disk, or the form redaction walks).


@dataclass(frozen=True, slots=True)
class AccountCause:
    """One finding's share of the wall time in the time account."""

    finding: str  # the finding's key (triage.locate.finding_key)
    rule: str
    title: str
    kind: str  # loss | service | benign
    seconds: float
    share: float | None
    confidence: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "finding": self.finding,
            "rule": self.rule,
            "title": self.title,
            "kind": self.kind,
            "seconds": self.seconds,
            "share": self.share,
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AccountCause:
        return cls(d["finding"], d["rule"], d["title"], d["kind"], d["seconds"], d.get("share"), d.get("confidence"))


@dataclass(frozen=True, slots=True)
class Counterfactual:
    """The run time if every fix were applied: `seconds` (the low end) and its range."""

    seconds: float
    range_s: tuple[float, float]
    speedup: float | None
    floor_s: float
    clock_cycle_s: float | None
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "range_s": list(self.range_s),
            "speedup": self.speedup,
            "floor_s": self.floor_s,
            "clock_cycle_s": self.clock_cycle_s,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Counterfactual:
        low, high = d["range_s"]
        return cls(
            d["seconds"],
            (low, high),
            d.get("speedup"),
            d.get("floor_s", 0.0),
            d.get("clock_cycle_s"),
            d.get("note", ""),
        )


@dataclass(frozen=True, slots=True)
class StructurePart:
    """A part of the wall time the loop's structure explains (derive.loop_phases): a group of timed
    phases, or the untimed remainder the loop names (`timed` False)."""

    part: str
    seconds: float  # in the account: scaled with the other parts to the time no finding holds
    share: float
    timed: bool
    phases: tuple[str, ...]
    steps: int  # steps it ran in
    median_step_s: float  # median seconds per step where it ran

    def to_dict(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "seconds": self.seconds,
            "share": self.share,
            "timed": self.timed,
            "phases": list(self.phases),
            "steps": self.steps,
            "median_step_s": self.median_step_s,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StructurePart:
        return cls(
            d["part"],
            d["seconds"],
            d.get("share", 0.0),
            d.get("timed", True),
            tuple(d.get("phases", ())),
            d.get("steps", 0),
            d.get("median_step_s", 0.0),
        )


@dataclass(frozen=True, slots=True)
class StructureAccount:
    """The time account's structure-explained time: its parts, the median step they sit in, the
    evidence for the named untimed remainder, and what would time what stays unexplained."""

    parts: tuple[StructurePart, ...]
    basis: str
    median_step_s: float
    timed_steps: int
    untimed_evidence: dict[str, Any]
    to_explain_rest: str | None

    def to_dict(self) -> dict[str, Any]:
        """The account's keys (flat in it, before the counterfactual)."""
        return {
            "structure": [p.to_dict() for p in self.parts],
            "structure_basis": self.basis,
            "median_step_s": self.median_step_s,
            "timed_steps": self.timed_steps,
            "untimed_evidence": self.untimed_evidence,
            "to_explain_rest": self.to_explain_rest,
        }

    @classmethod
    def from_account_dict(cls, d: dict[str, Any]) -> StructureAccount | None:
        if not d.get("structure"):
            return None
        return cls(
            parts=tuple(StructurePart.from_dict(p) for p in d["structure"]),
            basis=d.get("structure_basis", ""),
            median_step_s=d.get("median_step_s", 0.0),
            timed_steps=d.get("timed_steps", 0),
            untimed_evidence=d.get("untimed_evidence") or {},
            to_explain_rest=d.get("to_explain_rest"),
        )


@dataclass(frozen=True, slots=True)
class TimeAccount:
    """Where the wall time went (triage.account.time_account): service work, each cause, unexplained."""

    wall_time_s: float
    wall_basis: str
    useful_service_s: float | None
    useful_basis: str
    causes: tuple[AccountCause, ...]
    lost_s: float
    unexplained_s: float
    counterfactual: Counterfactual
    # Time the loop's structure explains (its phases, a named untimed remainder), None when it explains none.
    structure: StructureAccount | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_time_s": self.wall_time_s,
            "wall_basis": self.wall_basis,
            "useful_service_s": self.useful_service_s,
            "useful_basis": self.useful_basis,
            "causes": [c.to_dict() for c in self.causes],
            "lost_s": self.lost_s,
            "unexplained_s": self.unexplained_s,
            **(self.structure.to_dict() if self.structure is not None else {}),
            "counterfactual": self.counterfactual.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TimeAccount:
        return cls(
            wall_time_s=d["wall_time_s"],
            wall_basis=d.get("wall_basis", ""),
            useful_service_s=d.get("useful_service_s"),
            useful_basis=d.get("useful_basis", ""),
            causes=tuple(AccountCause.from_dict(c) for c in d.get("causes", [])),
            lost_s=d.get("lost_s", 0.0),
            unexplained_s=d.get("unexplained_s", 0.0),
            counterfactual=Counterfactual.from_dict(d["counterfactual"]),
            structure=StructureAccount.from_account_dict(d),
        )


@dataclass(frozen=True, slots=True)
class StepSummary:
    """What the run's step times measure (summary.summarize): wall time, median and steady step, warm-up."""

    wall_time_s: float | None
    step_time_p50_s: float | None
    steady_step_time_s: float | None
    warmup_steps: int | None  # None: no step times, so no warm-up could be measured
    # The run's step timers overlapped and were rebuilt into one wall (derive.overlap), or None.
    overlapping_step_timers: dict[str, Any] | None = None
    # Processes that wrote the metrics at the same time, each with its own wall and step time
    # (derive.writers), or None for a run written by one process at a time.
    writers: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "wall_time_s": self.wall_time_s,
            "step_time_p50_s": self.step_time_p50_s,
            "steady_step_time_s": self.steady_step_time_s,
            "warmup_steps": self.warmup_steps,
        }
        if self.overlapping_step_timers is not None:
            out["overlapping_step_timers"] = self.overlapping_step_timers
        if self.writers is not None:
            out["writers"] = self.writers
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepSummary:
        return cls(
            d.get("wall_time_s"),
            d.get("step_time_p50_s"),
            d.get("steady_step_time_s"),
            d.get("warmup_steps"),
            d.get("overlapping_step_timers"),
            d.get("writers"),
        )


# Keys of the summary block written by later stages than summarize (training machine, triage, verdict).
SUMMARY_LATER_KEYS = ("training_machine", "account", "quality_cause")


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The `summary` block of the JSON document, typed: the step measures, the training machine,
    the time account and the verdict's training-quality finding.

    `Analysis.summary` holds it as the stages assembled it (a mapping, the later keys absent until
    their stage ran); `Analysis.run_summary` is this view of it.
    """

    steps: StepSummary
    training_machine: dict[str, Any] | None = None
    account: TimeAccount | None = None
    quality_cause: dict[str, Any] | None = None
    # Which of SUMMARY_LATER_KEYS the block holds (a value of None is written as null; an absent key not at all).
    present: frozenset[str] = frozenset()

    def __getattr__(self, name: str) -> Any:
        # wall_time_s, step_time_p50_s, ... read through to the step measures.
        if name in StepSummary.__dataclass_fields__:
            return getattr(self.steps, name)
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        out = self.steps.to_dict()
        for key in SUMMARY_LATER_KEYS:
            if key in self.present:
                value = getattr(self, key)
                out[key] = value.to_dict() if isinstance(value, TimeAccount) else value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        account = d.get("account")
        if isinstance(account, dict):
            account = TimeAccount.from_dict(account)
        return cls(
            steps=StepSummary.from_dict(d),
            training_machine=d.get("training_machine"),
            account=account,
            quality_cause=d.get("quality_cause"),
            present=frozenset(k for k in SUMMARY_LATER_KEYS if k in d),
        )


@dataclass(frozen=True, slots=True)
class StepTimeComparison:
    """What step-time-regression measured: steady step times of candidate and baseline compared."""

    verdict: str  # regression | no regression | inconclusive
    message: str
    statistics: dict[str, Any]
    breakdown: list[dict[str, Any]]  # per-phase change of the median step time
    structural: dict[str, Any]  # clock cycles, cycles per step and warm-up of both runs


@dataclass(frozen=True, slots=True)
class QualityComparison:
    """What quality-regression measured: one entry per training-quality metric family of both runs."""

    verdict: str
    message: str
    metrics: list[dict[str, Any]]
    # The trainer kind of each run; None when the rule failed before it compared anything.
    trainers: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.trainers is None:
            return {"verdict": self.verdict, "message": self.message, "metrics": self.metrics}
        return {"trainers": self.trainers, "metrics": self.metrics, "verdict": self.verdict, "message": self.message}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QualityComparison:
        return cls(d.get("verdict", "inconclusive"), d.get("message", ""), d.get("metrics", []), d.get("trainers"))

    def regressed(self) -> list[dict[str, Any]]:
        """The decisive metric entries that regressed."""
        return [e for e in self.metrics if e.get("decisive") and e.get("verdict") == "regression"]


@dataclass(frozen=True, slots=True)
class NewFindings:
    """What new-finding measured: candidate fingerprints the baseline lacks, and the ones not judged."""

    fingerprints: list[str]
    # Candidate findings whose rule could not run on the baseline: {rule, fingerprint, baseline_status}.
    not_compared: list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class BaselineComparison:
    """The `baseline` block: the candidate compared with a baseline run (trace_doctor.comparison).

    Speed and training quality are two axes: `step_time_verdict` and `quality.verdict` say each,
    `verdict` combines them. Reading it by key (`result.baseline["verdict"]`) reads the JSON form:
    the documented Python API did so when the block was a dict.
    """

    path: str
    verdict: str
    message: str
    step_time_verdict: str
    quality: QualityComparison | None
    statistics: dict[str, Any] | None
    breakdown: list[dict[str, Any]]
    structural: dict[str, Any]
    new_fingerprints: list[str]
    not_compared: list[dict[str, str]]
    summary: StepSummary
    rules: tuple[RuleOutcome, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "verdict": self.verdict,
            "message": self.message,
            "step_time_verdict": self.step_time_verdict,
            "quality": self.quality.to_dict() if self.quality is not None else None,
            "statistics": self.statistics,
            "breakdown": self.breakdown,
            "structural": self.structural,
            "new_fingerprints": self.new_fingerprints,
            "not_compared": self.not_compared,
            "summary": self.summary.to_dict(),
            "rules": [o.to_dict() for o in self.rules],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BaselineComparison:
        """A block read back; a document from before the quality axis has only `verdict` (step time's)."""
        verdict = d.get("verdict", "inconclusive")
        quality = d.get("quality")
        return cls(
            path=d.get("path", ""),
            verdict=verdict,
            message=d.get("message", ""),
            step_time_verdict=d.get("step_time_verdict", verdict),
            quality=QualityComparison.from_dict(quality) if quality else None,
            statistics=d.get("statistics"),
            breakdown=d.get("breakdown", []),
            structural=d.get("structural", {}),
            new_fingerprints=d.get("new_fingerprints", []),
            not_compared=d.get("not_compared", []),
            summary=StepSummary.from_dict(d.get("summary") or {}),
            rules=tuple(RuleOutcome(o["rule"], o["status"], o.get("reason", "")) for o in d.get("rules", [])),
        )

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)
