"""The Tinker SDK's and the cookbook's vocabulary: call names, metric keys, phase names, id patterns.

One spelling of each fact, imported wherever it is needed. Section numbers refer to
/work/shared/FORMATS.md, which says which SDK or cookbook version writes what.
"""

from __future__ import annotations

import re

# --- SDK calls, as span names in trace_events.jsonl and `time/*` keys --------------------------
# ≤0.5.x cookbooks instrument the `*_async` methods, 0.6.1 the plain names (FORMATS.md 1.4).

# The forward-backward submissions of TrainingClient (FORMATS.md 1.4, patched method lists).
FORWARD_BACKWARD_CALLS = (
    "forward_backward",
    "forward_backward_async",
    "forward_backward_custom",
    "forward_backward_custom_async",
)
# TrainingClient.forward: a forward pass without gradients, submit-only like forward_backward (1.4).
FORWARD_CALLS = ("forward", "forward_async")
# TrainingClient.optim_step: the optimizer step, submit-only (FORMATS.md 1.4).
OPTIM_STEP_CALLS = ("optim_step", "optim_step_async")
# The submit-only calls of a training step: they return a future in milliseconds (FORMATS.md 1.4).
TRAINING_SUBMIT_CALLS = (*FORWARD_BACKWARD_CALLS, *FORWARD_CALLS, *OPTIM_STEP_CALLS)
# Weight/state saves that only submit (FORMATS.md 1.4: ≤0.5.x `*_async` list, 0.6.1 plain names).
SAVE_SUBMIT_CALLS = (
    "save_state",
    "save_state_async",
    "save_weights_for_sampler",
    "save_weights_for_sampler_async",
    "save_weights_external",
)
# State loads that only submit; 0.6.1 no longer instruments them (FORMATS.md 1.4).
LOAD_SUBMIT_CALLS = ("load_state_async", "load_state_with_optimizer_async")
# Every submit-only SDK call: a long span means the calling thread was blocked (FORMATS.md 1.4).
# `get_info`, which 0.6.1 also counts as "the rest", returns its answer rather than a future.
# Sorted, not a set: a filter's list of names is part of the key its results are kept under (part_memo),
# and a set's order changes from one process to the next.
SUBMIT_ONLY_CALLS = tuple(sorted({*TRAINING_SUBMIT_CALLS, *SAVE_SUBMIT_CALLS, *LOAD_SUBMIT_CALLS}))
# SamplingClient.sample, timed over the full round trip until the samples arrive (FORMATS.md 1.4).
SAMPLE_CALLS = ("sample", "sample_async")
# SamplingClient.compute_logprobs, a full round trip like sample (FORMATS.md 1.4).
LOGPROB_CALLS = ("compute_logprobs", "compute_logprobs_async")
# The sampling client's round trips (FORMATS.md 1.4).
SAMPLING_CALLS = (*SAMPLE_CALLS, *LOGPROB_CALLS)
# The save that returns a sampling client on the new weights (RL's per-step weight sync): a full
# round trip, like `create_sampling_client` (FORMATS.md 1.4).
SAVE_FOR_SAMPLING_CALLS = ("save_weights_and_get_sampling_client", "save_weights_and_get_sampling_client_async")

# --- Cookbook phases (`time/<name>` keys and span names, FORMATS.md 1.4) -------------------------

# Evaluation timers: SFT `evals`/`infrequent_evals`/`run_evaluator`, RL `run_evals`,
# `run_evaluations_parallel` (FORMATS.md 1.3 and 1.4 span lists).
EVAL_PHASES = ("run_evals", "evals", "infrequent_evals", "run_evaluator", "run_evaluations_parallel")
# Checkpoint timers: periodic saves in every trainer (FORMATS.md 1.4 span lists).
CHECKPOINT_PHASES = ("save_checkpoint", "save_checkpoint_async")
# Evaluation and checkpoint phases, which recur periodically by design (FORMATS.md 1.4).
PERIODIC_PHASES = (*EVAL_PHASES, *CHECKPOINT_PHASES)
# Legacy pipelined SFT (cookbook 2025-10-26 to 2026-03-17, supervised/train.py): the loop runs
# submit_batch(k+1) then finish_batch(k), and step k's `time/total` runs from the start of its own
# submit_batch to the end of its finish_batch, so it also holds step k+1's submission and step k-1's
# finish. Its timers by the side of the loop they run in (`timed(...)` inside each function):
LEGACY_SFT_SUBMIT_PHASES = ("get_batch", "evals", "infrequent_evals")
LEGACY_SFT_FINISH_PHASES = ("save_checkpoint", "step")
# Async RL (rl/train.py `do_async_training`): the task that trains. `main` only awaits it (and the
# rollout workers, `trajectory_group_worker_loop_<i>`), so the trainer's timeline is this track's.
ASYNC_TRAINING_TRACK = "training_loop"
# One trajectory group's rollout in the async and stream RL loops (`trajectory_group_worker`, inside
# `trajectory_group_worker_loop` / `trajectory_group_worker_task`); its end hands the group to training.
ROLLOUT_WORKER_SPAN = "trajectory_group_worker"
# rl/train.py's rollouts of one group (a task per group) and each rollout's sampling call inside it.
ROLLOUT_GROUP_SPAN = "do_group_rollout_and_filter_constant_reward"
ROLLOUT_SAMPLE_SPAN = "policy_sample"
# The streaming-minibatch train step: it waits on the rollout queue inside its own span, between the
# minibatches it trains (rl/train.py `do_train_step_streaming_and_get_sampling_client`).
STREAM_TRAIN_STEP_SPAN = "do_train_step_streaming_and_get_sampling_client"
# Phases during which an SFT/DPO client waits for the service's results: `step` (awaiting the
# forward-backward and optimizer results) inside `finish_batch` (FORMATS.md 1.4, SFT spans).
RESULT_WAIT_PHASES = ("step", "finish_batch")
# Phases (trace spans, `timed()` log lines) that run the user's own code: data loading, the environment
# and its reward, client-side math on results. A run stuck in one is stuck in user code.
USER_CODE_PHASES = (
    "get_batch",
    "env_initial_observation",
    "env_step",
    "compute_group_rewards",
    "assemble_training_data",
    "compute_kl_sample_train",
)
# Phases that wait on the service: result waits, SDK calls, and the cookbook phases made of them.
SERVICE_WAIT_PHASES = (
    *RESULT_WAIT_PHASES,
    "train_step",
    "train",
    "sample",
    "policy_sample",
    "save_checkpoint",
    "compute_kl_penalty",
)
# The SDK's own heartbeat task in a dump of its event loop: present whether or not a request is in flight.
HEARTBEAT_TASK = "_session_heartbeat"

# --- Metric keys (metrics.jsonl, FORMATS.md 1.3-1.5) -----------------------------------------------

# Every timer key starts with this; the span name is everything after it (FORMATS.md 1.4).
TIME_PREFIX = "time/"
# recipes/sl_loop.py logs its iteration time as `time_total`, with an underscore (FORMATS.md 1.3).
RECIPE_TIME_TOTAL_KEY = "time_total"
# Whole-iteration timers, in order of preference: `time/total` (trace_iteration, legacy timed()),
# the recipe's `time_total`, async RL's `time/training_loop/total` (FORMATS.md 1.3, 1.4).
WHOLE_STEP_KEYS = ("time/total", RECIPE_TIME_TOTAL_KEY, "time/training_loop/total")
# Evaluation keys: `test/…` (evaluators) and 0.6.1 async `eval/…` rows (FORMATS.md 1.3).
EVAL_KEY_PREFIXES = ("test/", "eval/")


def is_eval_key(column: str) -> bool:
    """Whether a metric key is an evaluation's (held-out prompts), not the trained batch's."""
    return column.startswith(EVAL_KEY_PREFIXES)


# RL progress counter, one per training batch (FORMATS.md 1.3 RL keys, recipes/rl_loop).
RL_BATCH_KEY = "progress/batch"
# Rollout statistics prefix of every RL trainer's row (FORMATS.md 1.3 RL keys).
RL_ENV_PREFIX = "env/all/"
# Sampler-vs-trainer KL, logged as `optim/kl_sample_train_v1|_v2`; docs drop the `optim/`
# prefix, so match by suffix (FORMATS.md 1.3 KL keys, 1.5).
KL_SAMPLE_TRAIN_V1 = "kl_sample_train_v1"
KL_SAMPLE_TRAIN_V2 = "kl_sample_train_v2"
KL_SAMPLE_TRAIN_SUFFIXES = (KL_SAMPLE_TRAIN_V1, KL_SAMPLE_TRAIN_V2)
# config.json keys naming a system prompt (`system_prompt`, `system_message`, `teacher_system_prompt`,
# `sampling.system_prompt`), and the words that put one on a side of the loop. A loop that samples
# with one prompt and trains with another (context / prompt distillation) has a KL at step 0 by
# design: the trainer scores the sampled tokens after a different prefix.
SYSTEM_PROMPT_KEY = re.compile(r"system_?(?:prompt|message|msg)", re.IGNORECASE)
SAMPLING_SIDE_WORDS = ("sampl", "rollout", "generat", "teacher", "actor")
TRAINING_SIDE_WORDS = ("train", "student", "learner")
# Distillation's student-vs-teacher KL, also per dataset as `teacher_kl/dataset_<i>` (FORMATS.md 1.3).
TEACHER_KL = "teacher_kl"
# Async/stream RL: which policy version sampled the batch (`sampling_client/step_min|max|mean`), the
# async loop's own counter, and 0.6.1 async's `async/staleness_max|min|mean` (FORMATS.md 1.3).
SAMPLER_STEP_PREFIX = "sampling_client/step_"
TRAINING_CLIENT_STEP = "training_client/step"
ASYNC_STALENESS_PREFIX = "async/staleness_"
# Training-health metrics by family (FORMATS.md 1.3), matched on a key's last path component so
# `train/loss:sum`, `loss:sum` and `optim/entropy` all count. Loss: SFT `train_mean_nll`, DPO
# `dpo_loss`, server forward-backward `loss:sum`, custom loops' `loss`/`train_loss`.
LOSS_NAMES = (
    "train_mean_nll",
    "train_mean_bpb",
    "nll",
    "bpb",
    "dpo_loss",
    "loss",
    "loss:sum",
    "loss:mean",
    "train_loss",
    "total_loss",
)
# KL and entropy: `optim/kl_sample_train_*`, `kl_pre_post_*`, `kl_policy_base`, `teacher_kl…`, `optim/entropy`.
KL_NAME_PREFIXES = ("kl_sample_train_", "kl_pre_post_", "kl_policy_base", "teacher_kl", "reverse_kl")
ENTROPY_NAME_MARK = "entropy"
# Gradient norms: `grad_norm`, `unclipped_grad_l2:mean`, `…grad…norm…` (server optimizer metrics).
GRAD_NAME_MARKS = (("grad", "norm"), ("grad", "_l2"))

# The cookbook trainers' metric keys (FORMATS.md 1.3), for mapping a key the console table cut to
# `prefix…` back to its full name when the capture itself never shows it whole. Keys a table hides
# (`:total`, `:count`) are not listed: a cut key is never one of them.
_RL_ENV_STATS = (
    "ac_tokens_per_turn",
    "ob_tokens_per_turn",
    "turns_per_episode",
    "total_episodes",
    "total_turns",
    "total_ac_tokens",
    "total_ob_tokens",
    "reward/total",
    "by_group/frac_mixed",
    "by_group/frac_all_good",
    "by_group/frac_all_bad",
    "num_truncations_max_turn_tokens",
    "zero_reward_on_limit",
    "parse_error_masked",
)
COOKBOOK_METRIC_KEYS = (
    *(RL_ENV_PREFIX + stat for stat in _RL_ENV_STATS),
    "progress/batch",
    "progress/done_frac",
    "optim/lr",
    "optim/entropy",
    "optim/kl_sample_train_v1",
    "optim/kl_sample_train_v2",
    "kl_pre_post_v1",
    "kl_pre_post_v2",
    "kl_policy_base",
    "sampling_client/step_max",
    "sampling_client/step_min",
    "sampling_client/step_mean",
    "training_client/step",
    "async/staleness_max",
    "async/staleness_min",
    "async/staleness_mean",
    "time/sampling_time_max",
    "time/sampling_time_min",
    "time/sampling_time_mean",
    "time/assemble_training_data",
    "time/compute_kl_sample_train",
    "time/save_checkpoint",
    "time/run_evals",
    "time/training_loop/total",
    "time/evaluation_loop/total",
    "rollout_errors/total",
    "rollout_errors/groups_skipped",
    "epoch",
    "progress",
    "learning_rate",
    "num_sequences",
    "num_tokens",
    "num_loss_tokens",
    "train_mean_nll",
    "train_mean_bpb",
    "test/nll",
    "test/bpb",
    "teacher_kl",
    "dpo_loss",
    "tokens/sampled",
    "tokens/prefill_cached",
    "tokens/prefill_uncached",
    "tokens/trained",
    "cost/step_usd",
    "cost/cumulative_usd",
)

# --- Ids (FORMATS.md 3.4, 3.5, 5.4) ----------------------------------------------------------------

# A session id: a UUID in every real log (`ServiceClient initialized for session 1259b3ad-…`,
# heartbeat and telemetry lines, FORMATS.md 3.5 and 5.4); a following "." or ":" is prose.
SESSION_ID = r"[\w-]+"
# A training-run id: the first segment of a tinker:// path (the SDK's ParsedCheckpointTinkerPath),
# `<uuid>:train:<n>` in every real checkpoints.jsonl and logs.log (FORMATS.md 3.4); the SDK logs
# the same id as the TrainingClient's model id (`TrainingClient initialized for model …`, 3.5).
RUN_ID = r"[\w-]+(?::train:\d+)?"
# A Tinker API key starts with this prefix: the SDK refuses any other key unless it is a JWT
# (`eyJ…`, a dynamic credential) — tinker/lib/auth ApiKeyAuthProvider; it is sent as `X-API-Key`.
API_KEY_PREFIX = "tml-"
# A tinker:// checkpoint path and the run id in it (FORMATS.md 3.4).
TINKER_URI = re.compile(rf"tinker://(?P<run_id>{RUN_ID})")
# A session id named in free text (`session <id>`, `session ID: <id>`, `session_id=<id>`); at least
# six characters and a digit, so `session is` and the SDK's own `Session heartbeat failed ...` name no
# id (the lines of FORMATS.md 3.5 and 5.4; the ids are UUIDs).
SESSION_MENTION = re.compile(
    rf"\bsession(?:[ _-]?id)?[\s:=]+['\"]?(?P<session_id>(?=[A-Za-z0-9][\w-]{{5}})(?=[\w-]*\d){SESSION_ID})",
    re.IGNORECASE,
)

# --- The debug skill's diagnostic output (FORMATS.md 5.3) ------------------------------------------

# A decimal number as Python prints a float; `[\d.]+` would also take `1..2`, which float() refuses.
NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
# The GIL monitor's line, `[GIL monitor] slept 3.47s instead of 2.0s (jitter: 1.47s) — …` (5.3).
GIL_MONITOR_LINE = re.compile(
    rf"\[GIL monitor\] slept (?P<actual>{NUMBER})s instead of (?P<expected>{NUMBER})s"
    rf" \(jitter: (?P<jitter>-?{NUMBER})s\)"
)
# The serialization test's timing line, `model_dump() took 0.007s` (FORMATS.md 5.3).
MODEL_DUMP_TOOK = re.compile(r"model_dump\(\) took (?P<seconds>\d+(?:\.\d+)?)s")

# --- The debug guide's own printouts (FORMATS.md 5.5): snippets users run and capture -------------

# Step 6 network check: `API round-trip: {s:.2f}s`.
ROUND_TRIP_LINE = re.compile(rf"\bAPI round-trip: (?P<seconds>{NUMBER})s\b")
# Smoke test step 1: `API reachable ({s:.2f}s), {n} models available` / `API unreachable: {Type}: {message}`.
API_REACHABLE_LINE = re.compile(rf"\bAPI reachable \((?P<seconds>{NUMBER})s\), (?P<models>\d+) models available")
API_UNREACHABLE_LINE = re.compile(r"\bAPI unreachable: (?P<type>[A-Za-z_][\w.]*)(?:: (?P<message>.*))?$")
# Smoke test step 2: `Training client created: <get_info() repr>` / `Training client failed: {Type}: {message}`.
CLIENT_CREATED_LINE = re.compile(r"\bTraining client created: (?P<info>.*)$")
CLIENT_FAILED_LINE = re.compile(r"\bTraining client failed: (?P<type>[A-Za-z_][\w.]*)(?:: (?P<message>.*))?$")
# Step 3 timing around a call: `submit: {t_submit:.2f}s, wait: {t_wait:.2f}s`.
CALL_TIMING_LINE = re.compile(rf"\bsubmit: (?P<submit>{NUMBER})s, wait: (?P<wait>{NUMBER})s\b")
# httpx's response line, written for every request with TINKER_LOG=info|debug:
# `HTTP Request: POST https://…/api/v1/asample "HTTP/1.1 429 Too Many Requests"`.
HTTPX_RESPONSE_LINE = re.compile(
    r"^HTTP Request: (?P<method>[A-Z]+) (?P<url>\S+) \"HTTP/[\d.]+ (?P<status>\d{3})(?: (?P<reason>[^\"]*))?\""
)
# Hosts of the Tinker service (its URLs name it); an httpx line to any other host is the user's own client.
TINKER_HOST = re.compile(r"^https?://[^/]*(?:thinkingmachines|tinker)[^/]*/", re.IGNORECASE)
# A user's own retry loop around the SDK's calls (the guide's example): `Timeout on attempt 2/3, retrying...`
# and, when it gives up, `Failed after 3 attempts due to timeout`.
USER_RETRY_LINE = re.compile(
    r"\b(?P<cause>Timeout|Error|Exception|[A-Z]\w*Error) on attempt (?P<attempt>\d+)/(?P<attempts>\d+),? retrying\b"
)
USER_GAVE_UP_LINE = re.compile(r"\bFailed after (?P<attempts>\d+) attempts(?: due to (?P<cause>[\w ]+?))?\.?$")
