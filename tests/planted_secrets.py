"""A planted-secrets corpus: every credential type trace-doctor must redact, and what it must keep.

The values are fakes with the real shapes (prefixes, lengths, alphabets), assembled at run time
so no credential-shaped literal sits in the repository. `write_secret_run` plants each one where
runs really carry them: metric keys and values, config.json, logs.log, trace span names and
arguments, a file name. The benchmark (benchmarks/redaction.py) reuses the catalogue.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from pathlib import Path

_RNG = random.Random(14)
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _body(n: int, alphabet: str = _ALNUM) -> str:
    """`n` deterministic random characters; from the default alphabet they start with `PLANTED`."""
    if alphabet == _ALNUM:
        return "PLANTED" + "".join(_RNG.choice(alphabet) for _ in range(n - 7))
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _join(*parts: str) -> str:
    return "".join(parts)


# label -> the secret value. Every one must be absent from every output once redacted.
SECRETS: dict[str, str] = {
    "tinker": _join("tml", "-", _body(40)),
    "openai": _join("sk", "-proj-", _body(48)),
    "openai_legacy": _join("sk", "-", _body(48)),
    "anthropic": _join("sk", "-ant-api03-", _body(60)),
    "huggingface": _join("hf", "_", _body(34)),
    "slack": _join("xo", "xb-", _body(12, "0123456789"), "-", _body(13, "0123456789"), "-", _body(24)),
    "github": _join("gh", "p_", _body(36)),
    "github_pat": _join("github", "_pat_", _body(22), "_", _body(59)),
    "gitlab": _join("gl", "pat-", _body(20)),
    "aws_key_id": _join("AK", "IA", _body(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")),
    "aws_secret": _body(40, _ALNUM + "+/"),
    "google": _join("AI", "za", _body(35)),
    "stripe": _join("sk", "_live_", _body(24)),
    "stripe_restricted": _join("rk", "_live_", _body(24)),
    "npm": _join("np", "m_", _body(36)),
    "jwt": _join("ey", "JhbGciOiJIUzI1NiJ9.", "eyJzdWIiOiJQTEFOVEVEIn0.", _body(43)),
    "wandb": _body(40, "0123456789abcdef"),
    "url_password": "PLANTEDurlPass9",
    "db_password": "PLANTEDdbPass7",
    "private_key": "MIIEowIBAAKCAQEA" + _body(60) + "\n" + _body(64) + "\n" + _body(24) + "==",
    "prose_password": "Hunter2-PLANTED",
    "pwd": "PLANTEDpwd42",
    "azure": _body(86, _ALNUM + "+/") + "==",
    "bearer": _body(32, _ALNUM + "._-"),
    "api_header": _body(32),
    "client_secret": _body(28),
    # A password with a JSON-escaped quote in it: what follows the quote is as secret as what precedes.
    "escaped_quote": _body(24),
    "spaced_password": "PLANTED correct horse battery staple",
    "url_encoded": _body(26),
    # Azure OpenAI keys are 32 hex digits (an LLM grader's key in an RL run's environment dump).
    "azure_openai": _body(32, "0123456789abcdef"),
    "cookie_pair": _body(32),
    # Wrapped forms: encoded, split over lines, or with no word naming them.
    "basic_auth": base64.b64encode(("trainer:" + _body(18)).encode()).decode(),
    "base64_key": base64.b64encode(_join("tml", "-", _body(40)).encode()).decode(),
    "aws_secret_logged": _body(40, _ALNUM + "+/"),
    "pem_body": _body(64) + "\n" + _body(64) + "\n" + _body(20) + "==",
    "wandb_glued": _body(40, "0123456789abcdef"),
}

# Each secret in the sentence or assignment a run writes it in.
CONTEXTS: dict[str, str] = {
    "tinker": f"env: TINKER_API_KEY={SECRETS['tinker']}",
    "openai": f"OpenAI client created with key {SECRETS['openai']}",
    "openai_legacy": f"fallback key {SECRETS['openai_legacy']}",
    "anthropic": f"ANTHROPIC_API_KEY={SECRETS['anthropic']}",
    "huggingface": f"using token {SECRETS['huggingface']}",
    "slack": f"Slack webhook failed for token {SECRETS['slack']}",
    "github": f"git clone https://{SECRETS['github']}@github.com/org/repo.git",
    "github_pat": f"GITHUB_TOKEN={SECRETS['github_pat']}",
    "gitlab": f"gitlab token {SECRETS['gitlab']}",
    "aws_key_id": f"aws_access_key_id = {SECRETS['aws_key_id']}",
    "aws_secret": f"aws_secret_access_key = {SECRETS['aws_secret']}",
    "google": f"GOOGLE_API_KEY {SECRETS['google']}",
    "stripe": f"charge with {SECRETS['stripe']}",
    "stripe_restricted": f"restricted key {SECRETS['stripe_restricted']}",
    "npm": f"//registry.npmjs.org/:_authToken={SECRETS['npm']}",
    "jwt": f"credential {SECRETS['jwt']}",
    "wandb": f"wandb login {SECRETS['wandb']}",
    "url_password": f"proxy https://alice:{SECRETS['url_password']}@proxy.example.com:8080 in use",
    "db_password": f"DATABASE_URL=postgresql://trainer:{SECRETS['db_password']}@db.internal:5432/runs",
    "private_key": ("-----BEGIN RSA PRIVATE KEY-----\n" + SECRETS["private_key"] + "\n-----END RSA PRIVATE KEY-----"),
    "prose_password": f"the password is {SECRETS['prose_password']}",
    "pwd": f"mysql -u root pwd={SECRETS['pwd']}",
    "azure": (
        f"DefaultEndpointsProtocol=https;AccountName=runs;AccountKey={SECRETS['azure']};EndpointSuffix=core.windows.net"
    ),
    "bearer": f"request headers: Authorization: Bearer {SECRETS['bearer']}",
    "api_header": f"X-API-Key: {SECRETS['api_header']}",
    "client_secret": f'{{"client_secret": "{SECRETS["client_secret"]}"}}',
    "escaped_quote": f'{{"password": "x\\"{SECRETS["escaped_quote"]}"}}',
    "spaced_password": f".env: DB_PASSWORD = {SECRETS['spaced_password']}",
    "url_encoded": f"redirect to /login?next=%2Fcallback%3Fclient_secret%3D{SECRETS['url_encoded']}%26state%3D7",
    "azure_openai": f"AZURE_OPENAI_KEY={SECRETS['azure_openai']}",
    "cookie_pair": f"request headers: Cookie: theme=dark; sessionid={SECRETS['cookie_pair']}",
    "basic_auth": f"proxy answered 407 to Basic {SECRETS['basic_auth']}",
    "base64_key": f"mounted secret data: tinker: {SECRETS['base64_key']}",
    "aws_secret_logged": f"s3 upload as {SECRETS['aws_key_id']}/{SECRETS['aws_secret_logged']}",
    # A key body between its markers, the last line glued to the END marker.
    "pem_body": "-----BEGIN PRIVATE KEY-----\n"
    + SECRETS["pem_body"].rsplit("\n", 1)[0]
    + "\n"
    + SECRETS["pem_body"].rsplit("\n", 1)[1]
    + " -----END PRIVATE KEY-----",
    "wandb_glued": f"profile: wandb_upload{SECRETS['wandb_glued']} took 2.1 s",
}
# Secrets a run logs one record per line: a private key printed by a logger line by line.
LOGGED_LINE_BY_LINE = ("private_key", "pem_body")

# What must survive redaction: ids, digests, names, numbers a support engineer needs.
SESSION_ID = "1259b3ad-1f7e-4b6c-9a51-5d0c3f1a2b7e"
TRAINING_RUN = "cfe049fa-4efe-561c-971f-f89d65e7faf3:train:0"
CHECKPOINT_SHA256 = hashlib.sha256(b"checkpoint 000020").hexdigest()
GIT_COMMIT = hashlib.sha1(b"tinker-cookbook").hexdigest()
MODEL_NAME = "meta-llama/Llama-3.1-8B-Instruct"
NOT_SECRETS = {
    "session id": SESSION_ID,
    "training run id": TRAINING_RUN,
    "checkpoint sha256": CHECKPOINT_SHA256,
    "git commit": GIT_COMMIT,
    "model name": MODEL_NAME,
    "metric name": "optim/kl_sample_train_v1",
}


def leaks(data: bytes | str, secrets: dict[str, str] = SECRETS) -> list[str]:
    """Labels of the secrets found in `data`: the whole value, or any 16-character piece of it."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    found = []
    for label, secret in secrets.items():
        for line in secret.splitlines():
            pieces = {line[i : i + 16] for i in range(0, max(1, len(line) - 15), 8)} | {line[-16:]}
            if any(piece in text for piece in pieces if len(piece) >= 12):
                found.append(label)
                break
    return found


def write_secret_run(root: Path) -> Path:
    """A cookbook-format SL run with every secret planted in every kind of input."""
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "log_path": str(root),
        "model_name": MODEL_NAME,
        "renderer_name": "llama3",
        "learning_rate": 1e-4,
        "lora_rank": 32,
        "max_tokens": 1024,
        "tokenizer": MODEL_NAME,
        "git_commit": GIT_COMMIT,
        "session_id": SESSION_ID,
        "api_key": SECRETS["tinker"],
        "hf_token": SECRETS["huggingface"],
        "wandb": {"api_key": SECRETS["wandb"], "project": "planted"},
        "db_url": f"postgresql://trainer:{SECRETS['db_password']}@db.internal:5432/runs",
        "notes": "; ".join(CONTEXTS[k] for k in ("openai", "github_pat", "slack", "prose_password", "azure")),
        "aws": {"aws_access_key_id": SECRETS["aws_key_id"], "aws_secret_access_key": SECRETS["aws_secret"]},
        # Under neutral names: the vendor is named only by the enclosing key.
        "storage": {"aws": {"id": SECRETS["aws_key_id"], "value": SECRETS["aws_secret_logged"]}},
        "tracking": {"wandb": {"key": SECRETS["wandb_glued"], "git_commit": GIT_COMMIT}},
        "mounted": {"tinker": SECRETS["base64_key"], "proxy": f"Basic {SECRETS['basic_auth']}"},
        "private_key": CONTEXTS["private_key"],
        "dataset_builder": {"common_config": {"batch_size": 128, "max_length": 4096}},
    }
    (root / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")

    rows = []
    for step in range(12):
        total = 6.0 if step == 0 else 1.0 + 0.01 * (step % 3)
        row = {
            "step": step,
            "time/total": total,
            "time/get_batch": 0.1,
            "optim/kl_sample_train_v1": 0.001,
            "train_mean_nll": 1.0 / (step + 1),
            # A metric whose name carries a key after a newline (JSON-escaped in every output).
            f"debug/env\n{SECRETS['anthropic']}": 1.0,
            f"debug/GOOGLE_API_KEY={SECRETS['google']}": 0.0,
            # Text values of metrics: kept as text columns.
            "debug/request": CONTEXTS["bearer"],
            "debug/npm": CONTEXTS["npm"],
        }
        rows.append(row)
    (root / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")

    log = [
        "root:10 [INFO] Starting training",
        f"tinker.lib.public_interfaces.service_client:87 [INFO] ServiceClient initialized for session {SESSION_ID}",
        f"root:12 [INFO] Saved checkpoint tinker://{TRAINING_RUN}/weights/000020 sha256={CHECKPOINT_SHA256}",
        f"root:13 [WARNING] running tinker-cookbook commit {GIT_COMMIT} with local changes",
    ]
    for label, context in CONTEXTS.items():
        level = "ERROR" if label in ("slack", "github", "stripe", "jwt") else "WARNING"
        first, *rest = context.splitlines()
        log.append(f"planted.{label}:{len(log)} [{level}] {first}")
        log.extend(rest)
    for label in LOGGED_LINE_BY_LINE:  # again, each line its own record: the markers are other records
        log.extend(f"planted.{label}:{len(log)} [WARNING] {line}" for line in CONTEXTS[label].splitlines())
    # An error record the decoder does not know, quoting a Slack token: error grouping blanks its digits.
    log.append(f"root:99 [ERROR] RuntimeError: notify failed 3 times with {SECRETS['slack']}")
    (root / "logs.log").write_text("\n".join(log) + "\n", encoding="utf-8")

    trace = []
    tid = 1001
    for step in range(12):
        t0 = 1_000_000.0 + step * 1_100_000.0
        name = f"train_step {SECRETS['github']}" if step == 3 else "train_step"
        args = {"track": "main", "thread": "MainThread"}
        if step == 2:
            args["headers"] = {"Authorization": f"Bearer {SECRETS['bearer']}", "X-API-Key": SECRETS["api_header"]}
            args["note"] = f"\n{SECRETS['openai_legacy']}"
            # JSON text inside a span argument: its quotes are escaped twice in the stored arguments.
            args["request"] = CONTEXTS["escaped_quote"]
        trace.append({"name": name, "ph": "B", "pid": 0, "tid": tid, "ts": t0, "args": args, "cat": "async"})
        end = {"track": "main", "thread": "MainThread", "step": step}  # the cookbook puts the step on E
        trace.append({"name": name, "ph": "E", "pid": 0, "tid": tid, "ts": t0 + 900_000.0, "args": end, "cat": "async"})
    (root / "trace_events.jsonl").write_text("\n".join(json.dumps(e) for e in trace) + "\n", encoding="utf-8")

    (root / "checkpoints.jsonl").write_text(
        json.dumps(
            {"name": "000020", "batch": 20, "state_path": f"tinker://{TRAINING_RUN}/weights/000020", "final": False}
        )
        + "\n",
        encoding="utf-8",
    )
    # File names are input too: a log named after a key, and a file passed over with one in its name.
    (root / f"worker-{SECRETS['stripe_restricted']}.log").write_text(
        f"root:1 [INFO] worker up, {CONTEXTS['client_secret']}\n", encoding="utf-8"
    )
    (root / f"notes-{SECRETS['gitlab']}.bin").write_bytes(b"\x00\x01binary")
    return root
