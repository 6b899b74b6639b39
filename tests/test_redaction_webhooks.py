"""Webhook URLs are credentials (whoever holds the path posts to the channel): they go from every
text a bundle keeps, while the hosts named without a token stay."""

from __future__ import annotations

import re

import polars as pl
import pytest

from trace_doctor.redact import REDACTED, redact_frame, redact_text
from trace_doctor.redact.shapes import TRIGGER

SLACK = "https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF2/Xy9aBcDeFgHiJkLmNoPqRsTu"
SLACK_WORKFLOW = "https://hooks.slack.com/workflows/T0ABCDEF1/A0ABCDEF2/498765432109876543/AbCdEfGhIjKlMnOpQrStUv"
DISCORD = "https://discord.com/api/webhooks/1234567890123456789/AbCdEf-GhIjKlMnOpQrStUvWxYz_0123456789abcdefGHIJ"
DISCORDAPP = "https://discordapp.com/api/webhooks/987654321098765432/abcdefghijklmnopqrstuvwxyz012345"
SECRET_PARTS = [
    "Xy9aBcDeFgHiJkLmNoPqRsTu",
    "AbCdEfGhIjKlMnOpQrStUv",
    "GhIjKlMnOpQrStUvWxYz",
    "abcdefghijklmnopqrstuvwxyz012345",
]


@pytest.mark.parametrize("url", [SLACK, SLACK_WORKFLOW, DISCORD, DISCORDAPP])
@pytest.mark.parametrize(
    "template",
    [
        "{}",
        "INFO notify: posting run summary to {} (200)",
        '{{"notify_url": "{}"}}',
        "--webhook={}",
        "a\\n{}",
    ],
)
def test_webhook_urls_are_redacted_where_runs_write_them(url, template):
    text = template.format(url)
    clean = redact_text(text)
    assert not any(part in clean for part in SECRET_PARTS), clean
    assert "https://" + REDACTED in clean
    # polars only sends the strings its trigger matches through the scanner.
    assert re.search(TRIGGER, text)


@pytest.mark.parametrize(
    "text",
    [
        "see https://hooks.slack.com/ for how to set one up",
        "https://discord.com/api/webhooks/ is the endpoint",
        "https://api.slack.com/messaging/webhooks",
        "step=12 loss=0.31",
    ],
)
def test_webhook_hosts_without_a_token_stay(text):
    assert redact_text(text) == text


def test_a_webhook_in_a_table_column_goes_and_its_rows_stay():
    frame = pl.DataFrame({"step": [0, 1], "message": [f"sent to {SLACK}", "plain"]})
    clean = redact_frame(frame)
    assert clean["message"].to_list() == [f"sent to https://{REDACTED}", "plain"]
