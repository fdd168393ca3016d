"""Four families of secrets the public scanners' examples hold and the earlier rules missed,
each with the benign shapes of coding sessions that look like it:

* a provider's name as the only key word (``asana: '…'``, ``BITBUCKET_APP_ID=…``), where a
  commit SHA, a UUID, a number, a host or a version after the same name stays;
* a key word ending a line, the value alone on the next one (raw or a JSON ``\\n`` escape),
  where words, paths and SQL on the next line stay;
* a UUID joined by hyphens to a strong key word and the name before it, taken whole
  (``launchdarkly-private-<uuid>``), where a bare ``key`` does not vouch for it;
* a token shaped as a JWT whose header is not base64 JSON (``ey…`` in three dotted parts).
"""

from __future__ import annotations

import json

import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms.redact import REDACTED, RuleSet, redact_text

UUID = "3f2a9c1e-8b7d-4e6f-a5c4-1b2d3e4f5a6b"
PART = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("asana: 'Q7f3kP9mZ2xW8vR4tY6uN1bC5dE0gH3j'", "Q7f3kP9mZ2xW8vR4tY6uN1bC5dE0gH3j"),
        ("asana :'20c2F0d03201af478ca1aBE9515A1A4FEfb'", "20c2F0d03201af478ca1aBE9515A1A4FEfb"),
        ("BITBUCKET_APP_ID=q8w7e6r5t4y3u2i1o0p9a8s7d6f5g4h3", "q8w7e6r5t4y3u2i1o0p9a8s7d6f5g4h3"),
        ("github_client_id: 3f9c2a7b1e8d4c6a0b5f", "3f9c2a7b1e8d4c6a0b5f"),
        ('{"sentry": "a8F3kLq9Zx2Vw7Rt5Yp1"}', "a8F3kLq9Zx2Vw7Rt5Yp1"),
        ("eventbrite oauth token\nQ2W3E4R5T6Y7U8I9O0PA", "Q2W3E4R5T6Y7U8I9O0PA"),
        ("private access key:\nZXC2JK3HV4TY5UIO6PLK", "ZXC2JK3HV4TY5UIO6PLK"),
        (
            json.dumps(
                {"type": "function_call_output", "output": "api token\nZ8Y7X6W5V4U3T2S1R0QP"}
            ),
            "Z8Y7X6W5V4U3T2S1R0QP",
        ),
        (f"acme-secret-{UUID}", f"acme-secret-{UUID}"),
        (f"launchdarkly-private-{UUID}", f"launchdarkly-private-{UUID}"),
        (f"urlscan-access-token-key-{UUID}", f"urlscan-access-token-key-{UUID}"),
        (f"ey{PART}.{PART}.{PART}", f"ey{PART}.{PART}.{PART}"),
        (f"x = 'eyH8{PART}.{PART}.ey{PART}.{PART}'", f"eyH8{PART}.{PART}.ey{PART}.{PART}"),
    ],
)
def test_each_family_is_redacted_whole(text: str, value: str, rules: RuleSet) -> None:
    redacted = redact_text(text, rules=rules)
    assert REDACTED in redacted
    assert not any(value[i : i + 16] in redacted for i in range(len(value) - 15)), redacted


@pytest.mark.parametrize(
    "text",
    [
        "GITHUB_SHA=4f2c8a9e1b7d3c6f0a5e8b2d9c4f7a1e3b6d8c0f",
        "sentry_release = a8f3e1b2c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9",
        f"github_run_uuid: {UUID}",
        "github_run_id: 1234567890",
        "git@github.com:user123/project-x9.git",
        "github: https://github.com/acme/app",
        "slack_channel: C0123ABCDEF",
        "stripe_version = '2024-06-20'",
        "openai_model: gpt-4o-mini-2024-07-18",
        "datadog_site: datadoghq.eu",
        "press any key\nto continue",
        "the primary key\nCREATE TABLE users (id INTEGER PRIMARY KEY)",
        "access token\nsee docs/auth/token_refresh.md for details",
        "the signing key\nsrc/memkiln/transforms/redact_context.py",
        f"cache-key-{UUID}",
        f"sentry-session-{UUID}",
        f"Idempotency-Key: {UUID}",
        "page-token-list",
        "ey.and.then",
        f"eyShort.{PART}.{PART}",
    ],
)
def test_the_benign_shapes_beside_them_stay(text: str, rules: RuleSet) -> None:
    assert redact_text(text, rules=rules) == text
    line = json.dumps({"type": "function_call_output", "output": text})
    assert redact_text(line, rules=rules) == line
