"""Known error messages and Tinker SDK log messages, each with its root cause and fix.

Sources: the cookbook debug skill's error reference (FORMATS.md section 6) and the SDK's own log
messages (FORMATS.md 5.4). Rules import these tables; the log parser tags matching lines with
the entry id so a rule never has to re-match text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from trace_doctor.knowledge.tinker import SESSION_ID
from trace_doctor.model import Severity


@dataclass(frozen=True)
class KnownError:
    """One error signature: a regex over the message, why it happens and what to do."""

    id: str
    pattern: re.Pattern[str]
    root_cause: str
    fix: str
    severity: Severity = "error"
    # A case-folded literal that every match contains: a cheap prefilter before the regex.
    needle: str = ""


def _known(
    id: str, pattern: str, root_cause: str, fix: str, severity: Severity = "error", needle: str = ""
) -> KnownError:
    return KnownError(id, re.compile(pattern, re.IGNORECASE), root_cause, fix, severity, needle.lower())


# Errors the service's side or the way to it causes, not the run's own code or data: reported with the session id.
SERVICE_SIDE_ERRORS = frozenset(
    {"server-error", "connection-error", "stuck-requests", "publish-timeout", "retries-exhausted"}
)

# Order matters: the first match wins, so specific messages come before generic exception types.
KNOWN_ERRORS: tuple[KnownError, ...] = (
    # The guide's smoke test (FORMATS.md 5.5): which of its two steps failed is the reading.
    _known(
        "smoke-api-unreachable",
        r"\bAPI unreachable: ",
        "step 1 of the debug guide's smoke test failed (get_server_capabilities): the service is down or the "
        "network between this machine and it is",
        "check the service status page and this machine's connectivity (proxy, firewall, DNS); rerun the smoke "
        "test from another network to tell the two apart",
        needle="api unreachable",
    ),
    _known(
        "smoke-client-failed",
        r"\bTraining client failed: ",
        "step 2 of the debug guide's smoke test failed (create_lora_training_client) after step 1 reached the "
        "API: a model-specific capacity shortage, or the request itself (the exception says which)",
        "try a smaller base model; if the exception is an authentication or bad-request error, fix that first",
        needle="training client failed",
    ),
    _known(
        "empty-datum",
        r"max\(\) iterable argument is empty",
        "a Datum with an empty token list (an EncodedTextChunk with no tokens)",
        "ensure every datum has at least one non-empty chunk",
        needle="max() iterable",
    ),
    _known(
        "loss-fn-inputs",
        r"Could not convert loss function inputs to array record",
        "extra fields in loss_fn_inputs (e.g. `mask`)",
        "build datums with the cookbook helpers, or drop the extra field such as `mask`",
        needle="loss function inputs",
    ),
    _known(
        "unknown-client-error",
        r"Unknown client error",
        "often a wrong checkpoint type: a training-state path used for sampling",
        "use the paths returned by save_weights_for_sampler for sampling",
        needle="unknown client error",
    ),
    _known(
        "prompt-too-long",
        r"prompt tokens \+ max_tokens > context window"
        r"|Prompt length plus max_tokens exceeds the model's context window|\bPromptTooLong\b",
        "the prompt plus max_tokens exceeds the model's context window",
        "shorten the prompt or lower max_tokens",
        needle="",
    ),
    _known(
        "retries-exhausted",
        r"Failed (?:to \w+ )?after exhausting retries|Failed after \d+ attempts",
        "a transient server error that did not recover",
        "check the service status; retry with a fresh session",
        needle="failed",
    ),
    _known(
        "sdk-unsupported",
        r"The version of the Tinker SDK you are using is no longer supported|session_id is required",
        "the installed tinker SDK is too old for the service",
        "pip install --upgrade tinker",
        needle="",
    ),
    _known(
        "invalid-session",
        r"Invalid session_id",
        "the session is missing or belongs to another user",
        "create a new session",
        needle="invalid session_id",
    ),
    _known(
        "access-blocked",
        r"Access blocked|You do not have access to this model",
        "no permission for the model or checkpoint",
        "check the API key, organisation membership and checkpoint visibility",
        needle="",
    ),
    _known(
        "billing-paused",
        r"paused due to billing status|Error code: 402\b",
        "billing is blocked (HTTP 402)",
        "add credits to the account",
        needle="",
    ),
    _known(
        "rate-limited",
        r"\bRateLimitError\b|Error code: 429\b",
        "too many concurrent requests (about 2000 sampling requests)",
        "reduce concurrency and back off",
        needle="",
    ),
    _known(
        "checkpoint-exists",
        r"Error code: 409\b|\bResourceAlreadyExists\b",
        "the checkpoint or resource already exists (the first save succeeded)",
        "check whether it exists before retrying; handle saves idempotently",
        "warning",
        needle="",
    ),
    _known(
        "base-model-required",
        r"base_model is required",
        "the request has no model name",
        "pass base_model",
        needle="base_model is required",
    ),
    _known(
        "bad-lora-rank",
        r"lora_config\.rank must be (?:positive|a power of 2)",
        "an invalid LoRA rank",
        "use a power of two such as 16, 32 or 64",
        needle="lora_config.rank",
    ),
    _known(
        "no-trainable-params",
        r"At least one of train_unembed, train_mlp, or train_attn must be True",
        "every training flag is off",
        "enable at least one of train_unembed, train_mlp, train_attn",
        needle="train_unembed",
    ),
    _known(
        "publish-timeout",
        r"Timeout while publishing request",
        "the server queue is full or slow (HTTP 504)",
        "retry",
        needle="publishing request",
    ),
    _known(
        "stuck-requests",
        r"No progress made in [\d.]+s\. Requests appear to be stuck",
        "requests made no progress for the SDK's stuck-request limit",
        "check the service status and network; run a smoke test",
        needle="no progress made",
    ),
    _known(
        "non-finite-tensor",
        r"\bNonFiniteInTensor\b",
        "NaN or Inf in the inputs",
        "check the data and loss weights for non-finite values",
        needle="nonfiniteintensor",
    ),
    _known(
        "unknown-model",
        r"Unknown model: \S+",
        "the model is not in the cookbook registry",
        "check the model name",
        needle="unknown model:",
    ),
    _known(
        "log-dir-exists",
        r"Log directory already exists",
        "the log directory was reused",
        "resume from the same path or delete the directory",
        needle="log directory already exists",
    ),
    _known(
        "tokens-weights-length",
        r"tokens and weights must be the same length",
        "truncation cut the tokens but not the weights",
        "build datums with datum_from_model_input_weights()",
        needle="same length",
    ),
    _known(
        "image-token-count",
        r"Expected \d+ tokens, got \d+ from image",
        "the transformers<5.0 Qwen2VLImageProcessor miscounts image tokens",
        "upgrade to transformers>=5.0 or install torchvision",
        needle="from image",
    ),
    _known(
        "unknown-renderer",
        r"RendererError: Unknown renderer|Unknown renderer",
        "a bad renderer name",
        "use get_recommended_renderer_name(model)",
        needle="unknown renderer",
    ),
    _known(
        "missing-image-processor",
        r"image_processor is required to render image content|requires an image_processor",
        "a vision-language renderer without an image processor",
        "pass get_image_processor(model) to the renderer",
        needle="image_processor",
    ),
    _known(
        "multimodal-to-text-renderer",
        r"Expected text content, got multimodal content",
        "images sent to a text-only renderer",
        "use a vision-language renderer",
        needle="multimodal content",
    ),
    _known(
        "dataset-format",
        r"Each line must contain a 'messages' field",
        "a malformed JSONL dataset",
        'write one {"messages": [...]} object per line',
        needle="'messages' field",
    ),
    _known(
        "streaming-seek-backward",
        r"only supports forward iteration|Cannot seek backward",
        "a streaming dataset was seeked backward (e.g. on resume)",
        "iterate the streaming dataset forward only",
        needle="",
    ),
    _known(
        "weights-error",
        r"\bWeights(?:Download|Merge|Adapter)Error\b",
        "a bad tinker:// path, a base-model mismatch or empty expert tensors",
        "verify the path with `tinker checkpoint list` and the model name",
        needle="weights",
    ),
    _known(
        "checkpoint-error",
        r"\bCheckpointError\b",
        "saving or loading a checkpoint failed",
        "check the path format and permissions",
        needle="checkpointerror",
    ),
    _known(
        "all-trajectories-failed",
        r"\bAllTrajectoriesFailedError\b",
        "every trajectory in a group failed",
        "inspect the environment code and rollout logs",
        needle="alltrajectoriesfailederror",
    ),
    _known(
        "pkg-resources-missing",
        r"No module named '?pkg_resources'?",
        "Python 3.14 no longer ships pkg_resources",
        "use Python 3.13 or older, or update the package that imports it",
        needle="pkg_resources",
    ),
    _known(
        "hf-unauthorized",
        r"401 Client Error|401 Unauthorized",
        "a gated Hugging Face model without a token",
        "set HF_TOKEN",
        needle="401",
    ),
    _known(
        "sync-from-async",
        r"Synchronous method '?[\w.]+\(\)'? called from async context",
        "a blocking SDK call inside async code stalls the event loop",
        "await the *_async method's future instead",
        "warning",
        needle="called from async context",
    ),
    _known(
        "fork-process-pool",
        r"ProcessPoolExecutor uses the 'fork' start method",
        "a fork-started rollout pool hangs with the SDK's threads",
        'create the pool with mp_context=multiprocessing.get_context("spawn")',
        needle="'fork' start method",
    ),
    # The guide's error reference beyond the 400 table (FORMATS.md 6): what the service or the client says
    # when the model, the batch, the tokenizer or the API key is wrong. The service's exact wording varies
    # with its version, so each pattern takes the phrasings of the error family, not one sentence.
    _known(
        "api-key-missing",
        r"api_key client option must be set|TINKER_API_KEY(?: environment variable)?(?: is)? not set"
        r"|Missing (?:the )?TINKER_API_KEY",
        "no API key reached the client: TINKER_API_KEY is not set in this process's environment",
        "export TINKER_API_KEY (from the Tinker console) in the shell or job that runs training, or pass api_key=",
        needle="api_key",
    ),
    _known(
        "model-not-supported",
        r"\b(?:base[_ ])?model\b[^\n]{0,120}?\bis not (?:a )?supported\b|\bUnsupported (?:base[_ ])?model\b"
        r"|\bnot a supported (?:base[_ ])?model\b",
        "the service does not train or serve this base model (a misspelled name, or one not in its list)",
        "use a name from get_server_capabilities() (the smoke test's model list), spelled as it is, e.g. "
        "`Qwen/Qwen3-8B`",
        needle="support",
    ),
    _known(
        "batch-too-large",
        r"\bbatch(?: size)? (?:is )?too large\b|\btoo many (?:tokens|datums|examples) in (?:the |one )?"
        r"(?:batch|request)\b|\bexceeds the maximum (?:batch size|number of tokens)\b|\bPayload Too Large\b"
        r"|Error code: 413\b",
        "one request carries more data than the service accepts in a single call",
        "lower batch_size or max_length, or split the batch over several forward_backward calls before optim_step",
        needle="",
    ),
    _known(
        "tokenizer-error",
        r"Can't load tokenizer|Error tokeni[sz]ing|Failed to tokeni[sz]e|tokeni[sz]ation (?:error|failed)"
        r"|Tokenizer class \w+ does not exist|Unable to load (?:the )?tokenizer",
        "the tokenizer could not be loaded or could not encode the input: a gated or misspelled model, "
        "transformers 5.3.0 (wrong DeepSeek V2/V3 tokenizer_class) or a corrupted Hugging Face cache",
        "check the model name and HF_TOKEN; use transformers>=5.3.1; if it still fails, delete "
        "~/.cache/huggingface/hub/models--<org>--<model>/ and retry",
        needle="tokeni",
    ),
    # A process killed by a crash signal, as faulthandler or the shell reports it (FORMATS.md 3.5 console).
    _known(
        "native-crash",
        r"Fatal Python error: |\bsegmentation fault\b|\(core dumped\)|\billegal (?:hardware )?instruction\b"
        r"|^(?:zsh: )?(?:bus error|aborted?)(?::? \d+)?(?: {2,}\S.*)?$",
        "a crash in native code (a C extension such as torch, a tokenizer or numpy, or the interpreter itself): "
        "the process died on a signal, not on a Python exception",
        "find the call that crashed (the crashing thread's frames when faulthandler printed them; otherwise rerun "
        "with `python -X faulthandler`), reproduce it alone, and upgrade or pin the extension it is in (a known-bad "
        "build, torch/numpy/tokenizers versions that do not match)",
        needle="",
    ),
    _known(
        "connection-error",
        r"\bAPI(?:Connection|Timeout)Error\b",
        "the service is down, the network failed or the service is overloaded",
        "run a smoke test; check the service status",
        needle="api",
    ),
    _known(
        "authentication-error",
        r"\bAuthenticationError\b|Error code: 401\b",
        "the API key was rejected",
        "check TINKER_API_KEY",
        needle="",
    ),
    _known(
        "not-found",
        r"\bNotFoundError\b|Error code: 404\b",
        "the model, session or checkpoint was not found",
        "check the name, session id and the tinker://<id>/sampler_weights/<name> path",
        needle="",
    ),
    _known(
        "permission-denied",
        r"\bPermissionDeniedError\b|Error code: 403\b",
        "no permission for the model or checkpoint",
        "check the API key, organisation membership and checkpoint visibility",
        needle="",
    ),
    _known(
        "server-error",
        r"\bInternalServerError\b|Error code: 50[0-3]\b",
        "a server-side bug",
        "report it with the session id",
        needle="",
    ),
    _known(
        "bad-request",
        r"\bBadRequestError\b|Error code: 400\b",
        "the service rejected the request as malformed (not retryable)",
        "read the detail in the message; fix the request",
        needle="",
    ),
)


@dataclass(frozen=True)
class SdkMessage:
    """A Tinker SDK log message: its logger, the log-event kind it maps to, and what it means."""

    id: str
    logger: str
    kind: Literal["heartbeat", "retry", "paused", "sdk-warning", "session"]
    pattern: re.Pattern[str]
    meaning: str
    fields: tuple[str, ...] = field(default=())


def _sdk(id: str, logger: str, kind: str, pattern: str, meaning: str) -> SdkMessage:
    compiled = re.compile(pattern)
    return SdkMessage(id, logger, kind, compiled, meaning, tuple(compiled.groupindex))  # type: ignore[arg-type]


SDK_MESSAGES: tuple[SdkMessage, ...] = (
    _sdk(
        "heartbeat-failed",
        "tinker.lib.internal_client_holder",
        "heartbeat",
        rf"Session heartbeat failed for (?P<secs>[\d.]+) seconds for session (?P<session_id>{SESSION_ID})\.?"
        r" Last exception: (?P<exception>.*)",
        "no successful heartbeat for over 120 s: a GIL-starved SDK thread or the network",
    ),
    _sdk(
        "heartbeat-stopped",
        "tinker.lib.internal_client_holder",
        "heartbeat",
        rf"Session (?P<session_id>{SESSION_ID}) has finished; stopping its heartbeat loop",
        "the service returned 410 for the session heartbeat",
    ),
    _sdk(
        "billing-paused",
        "tinker.lib.internal_client_holder",
        "paused",
        r"The job (?:is|was) paused due to billing status(?: for (?P<secs>[\d.]+) seconds)?",
        "HTTP 402: billing blocked",
    ),
    _sdk(
        "cancel-failed",
        "tinker.lib.internal_client_holder",
        "sdk-warning",
        r"Failed to cancel sampling request (?P<request_id>\S+): (?P<exception>.*)",
        "a sampling request could not be cancelled",
    ),
    _sdk(
        "training-paused",
        "tinker.lib.queue_state_logger",
        "paused",
        r"Training (?:for (?P<model_id>\S+) is paused|is paused for (?P<model_id_old>\S+))\.?"
        r" Reason: (?P<reason>.*?)\.?$",
        "the server queue paused training (rate limit or capacity)",
    ),
    _sdk(
        "model-creation-paused",
        "tinker.lib.queue_state_logger",
        "paused",
        r"Model creation for (?P<base_model>\S+) is paused\. Reason: (?P<reason>.*?)\.?$",
        "model creation waits for capacity",
    ),
    _sdk(
        "sampling-paused",
        "tinker.lib.public_interfaces.sampling_client",
        "paused",
        r"Sampling is paused for sampler (?P<sampler_id>\S+)\. Reason: (?P<reason>.*?)\.?$",
        "sampling is paused (sampler weights limit or capacity)",
    ),
    _sdk(
        "retry-try-again",
        "tinker.lib.api_future_impl",
        "retry",
        r"Retrying request (?:self\.)?request_id='?(?P<request_id>[^' ]+)'? because of (?P<reason>\w+)",
        "the server asked the client to retry the poll",
    ),
    _sdk(
        "non-retryable",
        "tinker.lib.retry_handler",
        "retry",
        r"Request failed with non-retryable error: (?P<exception>.*)",
        "a request failed with an error the SDK does not retry",
    ),
    _sdk(
        "sync-from-async",
        "tinker.lib.sync_only",
        "sdk-warning",
        r"Synchronous method '(?P<method>[\w.]+)\(\)' called from async context",
        "a blocking .result() on an event loop",
    ),
    _sdk(
        "futures-poll-failed",
        "tinker.lib.session_futures_poller",
        "sdk-warning",
        r"retrieve_futures polling failed for sampling session (?P<session_id>\S+)"
        r" \(clone (?P<clone>\d+)\): (?P<exception>.*)",
        "polling sampling futures failed",
    ),
    _sdk(
        "telemetry-dropped",
        "tinker.lib.telemetry",
        "sdk-warning",
        r"Telemetry queue full, dropping events|Dropping telemetry batch that failed to send",
        "telemetry events were dropped",
    ),
    _sdk(
        "jwt-refresh",
        "tinker.lib._jwt_auth",
        "sdk-warning",
        r"On-demand JWT refresh failed: (?P<exception>.*)"
        r"|JWT refresh rejected, stopping background refresh: (?P<rejected>.*)",
        "authentication token refresh failed",
    ),
    _sdk(
        "async-deprecated",
        "warnings",
        "sdk-warning",
        r"DEPRECATED: (?P<method>[\w.]+)\(\) is deprecated",
        "tinker 0.38 deprecates the *_async methods (see the cookbook <=0.5.x + Python 3.11 span trap)",
    ),
)


def decode_error(text: str) -> KnownError | None:
    """The first known error whose pattern occurs in `text`, or None."""
    folded = text.lower()
    for known in KNOWN_ERRORS:
        if known.needle and known.needle not in folded:
            continue
        if known.pattern.search(text):
            return known
    return None


def error_by_id(error_id: str) -> KnownError | None:
    """The known error with this id, or None."""
    return next((k for k in KNOWN_ERRORS if k.id == error_id), None)


def match_sdk_message(message: str) -> tuple[SdkMessage, dict[str, str]] | None:
    """The SDK message template `message` matches, with its captured fields, or None."""
    for sdk in SDK_MESSAGES:
        found = sdk.pattern.search(message)
        if found:
            return sdk, {k: v for k, v in found.groupdict().items() if v is not None}
    return None
