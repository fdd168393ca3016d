"""Tests for memkiln.transforms.redact.

Secrets are rendered at test time from the shapes in tests/fixtures/secrets/secret_formats.toml
(seeded, so every run sees the same strings) and placed where a rollout carries them: plain
text, a user message, a tool output, doubly escaped function-call arguments and a JSON
key/value inside a tool output. Redaction runs on the raw JSONL line, as ingest does.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import re
import string
import tomllib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from memkiln.io.rules import load_rules
from memkiln.transforms import redact
from memkiln.transforms.redact import (
    REDACTED,
    RuleSet,
    redact_expr,
    redact_secrets,
    redact_text,
    rule_hit_counts,
    secret_count_expr,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "secrets"
CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"


# -- rendering fake secrets --------------------------------------------------------------------

_ALPHABETS: dict[str, str] = {
    "alnum": string.ascii_letters + string.digits,
    "hex": "0123456789abcdef",
    "HEX": "0123456789ABCDEF",
    "upper": string.ascii_uppercase + string.digits,
    "b32": string.ascii_uppercase + "234567",
    "lower": string.ascii_lowercase + string.digits,
    "letters": string.ascii_letters,
    "digits": string.digits,
    "b64": string.ascii_letters + string.digits + "+/",
    "urlsafe": string.ascii_letters + string.digits + "_-",
    "pw": string.ascii_letters + string.digits + "!#%^_~-",
    "bech32": "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L",
}
_PLACEHOLDER = re.compile(r"\{(\w+)(?::([^}]*))?\}")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _random(kind: str, length: int, rng: random.Random) -> str:
    return "".join(rng.choice(_ALPHABETS[kind]) for _ in range(length))


def _pem(label: str, lines: int, rng: random.Random, *, truncated: bool = False) -> str:
    body = [_random("b64", 64, rng) for _ in range(lines)] + [_random("b64", 20, rng) + "=="]
    if label.startswith("PGP"):
        body = ["", *body, "=" + _random("b64", 4, rng)]
    head = [f"-----BEGIN {label}-----"]
    if label == "DSA PRIVATE KEY":  # legacy encrypted PEM headers
        head += ["Proc-Type: 4,ENCRYPTED", f"DEK-Info: AES-128-CBC,{_random('HEX', 32, rng)}", ""]
    tail = [] if truncated else [f"-----END {label}-----"]
    return "\n".join(head + body + tail)


def _render(template: str, rng: random.Random) -> str:
    def one(match: re.Match[str]) -> str:
        kind, arg = match.group(1), match.group(2)
        if kind in _ALPHABETS:
            return _random(kind, int(arg), rng)
        if kind == "jwt":
            header = _b64url(b'{"alg":"HS256","typ":"JWT"}')
            claims = {"sub": _random("digits", 10, rng), "name": _random("letters", 8, rng)}
            payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
            return f"{header}.{payload}.{_random('urlsafe', 43, rng)}"
        if kind == "basic":
            return base64.b64encode(f"deploy:{_random('alnum', 14, rng)}".encode()).decode()
        if kind == "b64json":  # base64 of {"<arg>": "<32 letters and digits>"}
            value = _random("alnum", 31, rng) + _random("digits", 1, rng)
            return base64.b64encode(json.dumps({arg: value}).encode()).decode()
        if kind == "b64text":  # base64 of <arg> then 36 letters and digits
            return base64.b64encode(f"{arg}{_random('alnum', 36, rng)}\n".encode()).decode()
        if kind in ("pem", "pem_cut"):
            label, lines = arg.rsplit(":", 1)
            return _pem(label, int(lines), rng, truncated=kind == "pem_cut")
        raise ValueError(f"unknown placeholder {match.group(0)}")

    return _PLACEHOLDER.sub(one, template)


@dataclass(frozen=True)
class Fixture:
    name: str
    format: str
    rule: str
    secret: str
    text: str
    key: str
    value: str

    @property
    def needles(self) -> tuple[str, ...]:
        """What must not survive: the secret, its first and last 10 characters; for a key block,
        every line of 16+ characters (BEGIN line, headers, base64 body)."""
        if "PRIVATE KEY" in self.secret:
            return tuple(line for line in self.secret.splitlines() if len(line) >= 16)
        return (self.secret, self.secret[:10], self.secret[-10:])


def _fixture(entry: dict[str, str]) -> Fixture:
    secret = _render(entry["secret"], random.Random(entry["name"]))
    return Fixture(
        name=entry["name"],
        format=entry["format"],
        rule=entry["rule"],
        secret=secret,
        text=entry.get("text", "{secret}").replace("{secret}", secret),
        key=entry.get("key", "credential"),
        value=entry.get("value", "{secret}").replace("{secret}", secret),
    )


def _load_fixtures() -> list[Fixture]:
    raw = tomllib.loads((FIXTURES / "secret_formats.toml").read_text(encoding="utf-8"))
    return [_fixture(entry) for entry in raw["secret"]]


FIXTURE_SECRETS = _load_fixtures()
BARE_TOKENS = [fx for fx in FIXTURE_SECRETS if fx.text == fx.secret and "\n" not in fx.secret]


# -- rollout-shaped lines ----------------------------------------------------------------------


def _line(payload: dict[str, object]) -> str:
    return json.dumps({"timestamp": "2026-01-02T03:04:05.678Z", **payload}, ensure_ascii=False)


def _user_message(fx: Fixture) -> str:
    text = f"Here is the config, please wire it up:\n{fx.text}\nthanks"
    content = [{"type": "input_text", "text": text}]
    return _line(
        {
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": content},
        }
    )


def _tool_output(fx: Fixture) -> str:
    output = f"$ cat config\nFOO=1\n{fx.text}\nBAR=2\n"
    return _line(
        {
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "call_1", "output": output},
        }
    )


def _tool_call_arguments(fx: Fixture) -> str:
    arguments = {
        "command": ["bash", "-lc", f"printf '%s\\n' '{fx.text}' >> .env"],
        "body": json.dumps({fx.key: fx.value}),
    }
    payload = {
        "type": "function_call",
        "name": "shell",
        "call_id": "call_2",
        "arguments": json.dumps(arguments),
    }
    return _line({"type": "response_item", "payload": payload})


def _json_key_value(fx: Fixture) -> str:
    output = json.dumps({fx.key: fx.value, "region": "eu-west-1"}, indent=2)
    return _line(
        {
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "call_3", "output": output},
        }
    )


def _tool_result_block(fx: Fixture) -> str:
    content = [{"type": "tool_result", "tool_use_id": "toolu_01", "content": fx.text}]
    return _line({"type": "user", "message": {"role": "user", "content": content}})


PLACEMENTS: dict[str, Callable[[Fixture], str]] = {
    "user message": _user_message,
    "tool output": _tool_output,
    "tool-call arguments": _tool_call_arguments,
    "json key/value": _json_key_value,
    "tool result block": _tool_result_block,
}


def _decoded_strings(value: object) -> Iterator[str]:
    """Every string in a parsed line, descending into strings that hold JSON themselves."""
    if isinstance(value, str):
        yield value
        if value[:1] in ("{", "["):
            try:
                inner = json.loads(value)
            except ValueError:
                return
            yield from _decoded_strings(inner)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _decoded_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _decoded_strings(item)


def _redact_lines(lines: list[str], rules: RuleSet) -> list[str]:
    lf = pl.LazyFrame({"line": lines}, schema={"line": pl.String})
    return redact_secrets(lf, columns=["line"], rules=rules).collect()["line"].to_list()


def _survivors(fx: Fixture, texts: list[str]) -> list[str]:
    return [needle for needle in fx.needles for text in texts if needle in text]


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


# -- recall on the fixture corpus --------------------------------------------------------------


def test_fixture_corpus_has_at_least_forty_distinct_secrets() -> None:
    secrets = {fx.secret for fx in FIXTURE_SECRETS}
    assert len(secrets) == len(FIXTURE_SECRETS) >= 40


def test_every_fixture_secret_is_redacted_in_every_placement_and_lines_stay_valid_json(
    rules: RuleSet, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (fx, place, build(fx)) for fx in FIXTURE_SECRETS for place, build in PLACEMENTS.items()
    ]
    redacted = _redact_lines([line for _, _, line in cases], rules)

    found: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    failures: list[str] = []
    for (fx, place, _), line in zip(cases, redacted, strict=True):
        total[fx.format] += 1
        try:
            decoded = list(_decoded_strings(json.loads(line)))
        except ValueError as err:
            failures.append(f"{fx.name} / {place}: invalid JSON after redaction ({err})")
            continue
        left = _survivors(fx, [line, *decoded])
        if left:
            failures.append(f"{fx.name} / {place}: {left[0][:12]}... survived")
            continue
        found[fx.format] += 1
    for fx in FIXTURE_SECRETS:  # plain text, through the single-string helper
        total[fx.format] += 1
        if _survivors(fx, [redact_text(fx.text, rules=rules)]):
            failures.append(f"{fx.name} / plain text: survived")
        else:
            found[fx.format] += 1

    table = "\n".join(
        [
            f"{'format':<24} found/total  recall",
            *(
                f"{name:<24} {found[name]:>5}/{total[name]:<5}  {found[name] / total[name]:6.1%}"
                for name in sorted(total)
            ),
        ]
    )
    with capsys.disabled():
        print(
            f"\n\nsecret redaction recall on the fixture corpus ({len(FIXTURE_SECRETS)} secrets, "
            f"{len(PLACEMENTS) + 1} placements each)\n{table}\n"
        )
    assert not failures, "\n".join([table, "", *failures])


def test_each_fixture_secret_is_detected_by_its_intended_rule(rules: RuleSet) -> None:
    external = rules.external.rules if rules.external else ()
    by_id = {rule.id: rule for rule in (*rules.rules, *rules.context, *external)}
    # the encoded and "after" rules look at what the other steps left: they are seen at work
    last = {rule.id for rule in (*rules.encoded, *rules.after_rules)}
    missed = [
        f"{fx.name}: {fx.rule}"
        for fx in FIXTURE_SECRETS
        if fx.rule not in last
        and not pl.Series([fx.text]).str.contains(by_id[fx.rule].pattern).item()
    ]
    missed += [
        f"{fx.name}: {fx.rule}"
        for fx in FIXTURE_SECRETS
        if fx.rule in last
        and fx.rule not in redact.redact_counted_series(pl.Series([fx.text]), rules=rules)[1]
    ]
    assert not missed


def test_secret_count_is_positive_before_and_zero_after_redaction_on_fixture_corpus(
    rules: RuleSet,
) -> None:
    # the count covers the regex passes; the entropy-gated rule has no regex post-condition
    regex_rules = {rule.id for rule in rules.rules}
    lines = [
        build(fx)
        for fx in FIXTURE_SECRETS
        if fx.rule in regex_rules
        for build in PLACEMENTS.values()
    ]
    counts = (
        pl.LazyFrame({"line": lines})
        .select(
            before=secret_count_expr(pl.col("line"), rules=rules),
            after=secret_count_expr(redact_expr(pl.col("line"), rules=rules), rules=rules),
        )
        .collect()
    )
    assert counts["before"].min() > 0
    assert counts["after"].max() == 0


def test_redaction_is_idempotent(rules: RuleSet) -> None:
    lines = [build(fx) for fx in FIXTURE_SECRETS for build in PLACEMENTS.values()]
    once = _redact_lines(lines, rules)
    assert _redact_lines(once, rules) == once


# -- concrete shapes ---------------------------------------------------------------------------


def test_json_escaped_password_value_is_redacted_and_line_stays_valid_json(rules: RuleSet) -> None:
    password = "hunter2-" + _random("pw", 10, random.Random("json-escaped"))
    output = json.dumps({"user": "app", "password": password})  # a tool printed a JSON config
    line = _line({"type": "function_call_output", "output": output})
    assert '\\"password\\": \\"hunter2-' in line

    redacted = _redact_lines([line], rules)[0]

    assert password not in redacted
    assert json.loads(json.loads(redacted)["output"]) == {"user": "app", "password": REDACTED}


def test_doubly_escaped_api_key_in_function_call_arguments_is_redacted(rules: RuleSet) -> None:
    api_key = _random("hex", 32, random.Random("doubly-escaped"))
    arguments = json.dumps({"path": "config.json", "content": json.dumps({"api_key": api_key})})
    line = _line({"type": "function_call", "name": "write_file", "arguments": arguments})
    assert '\\\\\\"api_key\\\\\\": \\\\\\"' in line

    redacted = _redact_lines([line], rules)[0]

    content = json.loads(json.loads(json.loads(redacted)["arguments"])["content"])
    assert content == {"api_key": REDACTED}
    assert api_key not in redacted


def test_pem_block_in_json_is_replaced_whole_from_begin_to_end(rules: RuleSet) -> None:
    pem = _pem("OPENSSH PRIVATE KEY", 6, random.Random("pem-whole"))
    line = _line({"output": f"$ cat id_ed25519\n{pem}\n$ echo done"})

    output = json.loads(_redact_lines([line], rules)[0])["output"]

    assert output == f"$ cat id_ed25519\n{REDACTED}\n$ echo done"


@pytest.mark.parametrize(
    "gutter",
    ["{n:>6}\u2192", "{n:>6}\t"],
    ids=["file-viewer-arrow", "cat-n"],
)
def test_pem_block_shown_with_line_numbers_is_replaced_whole(rules: RuleSet, gutter: str) -> None:
    pem = _pem("EC PRIVATE KEY", 4, random.Random("pem-gutter"))
    numbered = "\n".join(gutter.format(n=n) + row for n, row in enumerate(pem.splitlines(), 1))
    for ensure_ascii in (False, True):
        line = json.dumps({"output": numbered}, ensure_ascii=ensure_ascii)

        output = json.loads(_redact_lines([line], rules)[0])["output"]

        assert output == gutter.format(n=1) + REDACTED


def test_truncated_pem_block_is_redacted_through_its_base64_body(rules: RuleSet) -> None:
    pem = _pem("RSA PRIVATE KEY", 5, random.Random("pem-cut"), truncated=True)
    line = _line({"output": f"{pem}\n[... 20 more lines]"})

    output = json.loads(_redact_lines([line], rules)[0])["output"]

    assert output == f"{REDACTED}\n[... 20 more lines]"


def test_connection_url_password_keeps_scheme_user_and_host(rules: RuleSet) -> None:
    url = "postgresql://app_user:" + _random("alnum", 20, random.Random("url")) + "@db:5432/app"
    assert redact_text(url, rules=rules) == f"postgresql://app_user:{REDACTED}@db:5432/app"


def test_env_assignment_keeps_the_name_and_the_equals_sign(rules: RuleSet) -> None:
    rng = random.Random("env")
    token, password = _random("alnum", 40, rng) + "9", "S3cr3t-" + _random("pw", 8, rng)
    text = f'export GITHUB_TOKEN="{token}"\nDB_PASSWORD={password}\nDB_PORT=5432'
    expected = f'export GITHUB_TOKEN="{REDACTED}"\nDB_PASSWORD={REDACTED}\nDB_PORT=5432'
    assert redact_text(text, rules=rules) == expected


def test_prefix_of_a_token_that_can_follow_an_escape_is_kept(rules: RuleSet) -> None:
    token = "npm_" + _random("alnum", 36, random.Random("npm-prefix"))
    assert redact_text(f"token is {token}", rules=rules) == f"token is npm_{REDACTED}"


@pytest.mark.parametrize(
    ("before", "must_redact"),
    [
        ("\\n", True),
        ("\\t", True),
        ("\\r\\n", True),
        ("\\u001b[31m", True),
        ('\\"', True),
        ("\\\\", False),
        ("\\u00e9", False),
        ("\\\\\\n", True),
    ],
    ids=[
        "newline",
        "tab",
        "crlf",
        "ansi-colour",
        "escaped-quote",
        "backslash",
        "unicode-escape",
        "backslash-newline",
    ],
)
def test_bare_tokens_next_to_json_escapes_keep_the_line_valid(
    rules: RuleSet, before: str, must_redact: bool
) -> None:
    lines = [f'{{"text": "x{before}{fx.secret}{before}y"}}' for fx in BARE_TOKENS]
    redacted = _redact_lines(lines, rules)

    problems = []
    for fx, line in zip(BARE_TOKENS, redacted, strict=True):
        try:
            text = json.loads(line)["text"]
        except ValueError as err:
            problems.append(f"{fx.name}: invalid JSON ({err})")
            continue
        if must_redact and _survivors(fx, [line, text]):
            problems.append(f"{fx.name}: survived")
    assert not problems


# -- letters-only values and newer token families --------------------------------------------

# Shapes in the form of tests/fixtures/secrets/secret_formats.toml entries, rendered the same way.
# The letters-only values are the ones Codex's generic rule redacts: they are not secrets of
# any service, so they are written out.
NEWER_FORMATS: list[dict[str, str]] = [
    {"name": "words-password-assignment", "format": "Letters-only value", "rule": "generic-credential-words",
     "secret": "correcthorsebatterystaple", "text": 'password = "{secret}"', "key": "password"},
    {"name": "words-password-yaml", "format": "Letters-only value", "rule": "generic-credential-words",
     "secret": "hunterhunterhunter", "text": "database:\n  user: app\n  password: {secret}\n", "key": "password"},
    {"name": "words-token-yaml", "format": "Letters-only value", "rule": "generic-credential-words",
     "secret": "abcdefghijklmnopqrstuv", "text": "token: {secret}", "key": "token"},
    {"name": "words-secret-assignment", "format": "Letters-only value", "rule": "generic-credential-words",
     "secret": "TheQuickBrownFoxJumps", "text": 'secret = "{secret}"', "key": "secret"},
    {"name": "words-password-json", "format": "Letters-only value", "rule": "generic-credential-words",
     "secret": "correcthorsebatterystaple", "text": '{{"password": "{secret}"}}', "key": "password"},
    {"name": "words-env-password", "format": "Letters-only value", "rule": "prefixed-credential-words",
     "secret": "correcthorsebatterystaple", "text": "DB_HOST=localhost\nDB_PASSWORD={secret}\nDB_PORT=5432", "key": "DB_PASSWORD"},
    {"name": "age-identity", "format": "age", "rule": "age-secret-key",
     "secret": "AGE-SECRET-KEY-1{bech32:58}", "text": "# created: 2026-01-02T03:04:05Z\n{secret}"},
    {"name": "vault-login-table", "format": "HashiCorp Vault", "rule": "vault-token",
     "secret": "hvs.{urlsafe:91}",
     "text": "Key                  Value\n---                  -----\ntoken                {secret}\ntoken_duration       768h\ntoken_renewable      true"},
    {"name": "vault-batch", "format": "HashiCorp Vault", "rule": "vault-token",
     "secret": "hvb.{urlsafe:138}", "text": "export VAULT_TOKEN={secret}"},
    {"name": "grafana-cloud", "format": "Grafana", "rule": "grafana-token",
     "secret": "glc_{b64:80}=", "text": '  "token": "{secret}"'},
    {"name": "grafana-service-account", "format": "Grafana", "rule": "grafana-token",
     "secret": "glsa_{alnum:32}_{hex:8}", "text": "curl -H 'Authorization: Bearer {secret}' https://grafana.example.com/api/search"},
    {"name": "onepassword-service-account", "format": "1Password", "rule": "onepassword-service-account-token",
     "secret": "ops_eyJ{b64:600}", "text": "export OP_SERVICE_ACCOUNT_TOKEN={secret}"},
    {"name": "okta-ssws", "format": "Okta", "rule": "authorization-header",
     "secret": "00{urlsafe:40}", "text": 'curl -H "Authorization: SSWS {secret}" https://acme.okta.com/api/v1/users/me',
     "key": "Authorization", "value": "SSWS {secret}"},
    {"name": "tailscale-env", "format": "Tailscale", "rule": "tailscale-key",
     "secret": "tskey-auth-{alnum:12}-{alnum:32}", "text": "TS_AUTHKEY={secret}"},
    {"name": "tailscale-api", "format": "Tailscale", "rule": "tailscale-key",
     "secret": "tskey-api-{alnum:12}-{alnum:32}", "text": "curl -u {secret}: https://api.tailscale.com/api/v2/tailnet/-/devices"},
    {"name": "dockerhub-login", "format": "Docker Hub", "rule": "dockerhub-token",
     "secret": "dckr_pat_{urlsafe:27}", "text": "docker login -u ci -p {secret}"},
    {"name": "vercel", "format": "Vercel", "rule": "vercel-token",
     "secret": "vcp_{alnum:40}", "text": "vercel deploy --prod --token {secret}"},
    {"name": "cloudflare-user", "format": "Cloudflare", "rule": "cloudflare-api-token",
     "secret": "cfut_{alnum:40}{hex:8}", "text": "CLOUDFLARE_API_TOKEN={secret}"},
    {"name": "cloudflare-global", "format": "Cloudflare", "rule": "cloudflare-api-token",
     "secret": "cfk_{alnum:40}{hex:8}", "text": "curl -H 'X-Auth-Key: {secret}' https://api.cloudflare.com/client/v4/zones"},
    {"name": "mysql-glued", "format": "MySQL -p", "rule": "mysql-password-flag",
     "secret": "S3cret{alnum:10}", "text": "mysql -h db -u root -p{secret} app_db", "key": "command",
     "value": "mysqldump --single-transaction -uroot -p{secret} app > dump.sql"},
    {"name": "mysql-separate", "format": "MySQL -p", "rule": "mysql-password-argument",
     "secret": "{letters:8}{digits:4}{letters:4}", "text": "docker exec -it db mariadb -u root -p {secret} -e 'show databases'",
     "key": "command", "value": "mysql -u root -p {secret} app"},
]  # fmt: skip
NEWER_SECRETS = [_fixture(entry) for entry in NEWER_FORMATS]


def test_letters_only_values_and_newer_token_families_are_redacted_in_every_placement(
    rules: RuleSet,
) -> None:
    cases = [(fx, place, build(fx)) for fx in NEWER_SECRETS for place, build in PLACEMENTS.items()]
    redacted = _redact_lines([line for _, _, line in cases], rules)

    failures = []
    for (fx, place, _), line in zip(cases, redacted, strict=True):
        try:
            decoded = list(_decoded_strings(json.loads(line)))
        except ValueError as err:
            failures.append(f"{fx.name} / {place}: invalid JSON after redaction ({err})")
            continue
        if _survivors(fx, [line, *decoded]):
            failures.append(f"{fx.name} / {place}: survived")
    failures += [
        f"{fx.name} / plain text: survived"
        for fx in NEWER_SECRETS
        if _survivors(fx, [redact_text(fx.text, rules=rules)])
    ]
    assert not failures
    assert _redact_lines(redacted, rules) == redacted


def test_each_newer_secret_is_detected_by_its_intended_rule(rules: RuleSet) -> None:
    by_id = {rule.id: rule for rule in (*rules.rules, *rules.context)}
    missed = [
        f"{fx.name}: {fx.rule}"
        for fx in NEWER_SECRETS
        if not pl.Series([fx.text]).str.contains(by_id[fx.rule].pattern).item()
    ]
    assert not missed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('password = "correcthorsebatterystaple"', f'password = "{REDACTED}"'),
        ("password: hunterhunterhunter", f"password: {REDACTED}"),
        ("token: abcdefghijklmnopqrstuv", f"token: {REDACTED}"),
        ('secret = "TheQuickBrownFoxJumps"', f'secret = "{REDACTED}"'),
        ('{"password": "correcthorsebatterystaple"}', f'{{"password": "{REDACTED}"}}'),
        ('\\"password\\": \\"correcthorsebatterystaple\\"', f'\\"password\\": \\"{REDACTED}\\"'),
        ("DB_PASSWORD=correcthorsebatterystaple", f"DB_PASSWORD={REDACTED}"),
        ("set the password: hunterhunterhunter.", f"set the password: {REDACTED}."),
        ("Bearer abcdefghijklmnopqrstuvwx", f"Bearer {REDACTED}"),
    ],
    ids=[
        "assignment",
        "yaml-password",
        "yaml-token",
        "capitalised",
        "json",
        "json-escaped",
        "env-line",
        "end-of-sentence",
        "bearer",
    ],
)
def test_letters_only_value_of_a_secret_key_is_redacted(
    rules: RuleSet, text: str, expected: str
) -> None:
    assert redact_text(text, rules=rules) == expected


def test_mysql_password_flags_are_redacted_glued_or_after_a_blank(rules: RuleSet) -> None:
    assert (
        redact_text("mysql -u root -pS3cretPassw0rd", rules=rules) == f"mysql -u root -p{REDACTED}"
    )
    assert redact_text("mysql -u root -p S3cretPassw0rd", rules=rules) == (
        f"mysql -u root -p {REDACTED}"
    )
    assert redact_text("mysqldump -uroot -p'hunter' app > a.sql", rules=rules) == (
        f"mysqldump -uroot -p'{REDACTED}' app > a.sql"
    )


@pytest.mark.parametrize(
    "text",
    [
        # code: a call, an attribute, a type, an identifier, a variable or a placeholder
        "token = get_token()",
        "secret = hashlib.sha256(seed)",
        "const apiKey = options?.apiKey || getApiKey(model.provider);",
        "max_tokens: 4096",
        "password: <redacted>",
        "token = self.token_value",
        "password=${DB_PASS}",
        "connect(host=host, password=password)",
        "api_key: Optional[str] = None",
        "token: Promise<string>",
        "DB_PASSWORD=postgres",
        "CPOLAR_PASSWORD=your_password",
        "Bearer authentication is described in RFC 6750",
        # -p that is not a MySQL password
        "mkdir -p dir",
        "docker run -p 8080:80 app",
        "ssh -p 2222 deploy@host",
        "mysql -u root -p mydb < dump.sql",
        "mysql -u root -p",
        "mysql -u root -p$MYSQL_PWD app",
        'mysql -u root -p"$MYSQL_PWD" app',
        "mysql -u root; mkdir -p build2024",
        "apt install mysql-client && mkdir -p build2024",
        "we use mysql, so mkdir -p build2024 first",
        # too short, or not a token (secretlint's must-not-match examples)
        "hvs.abc",
        "hvb.tooshortxxx",
        "hvr.placeholder",
        "# token: hvs.example",
        "A short string like tskey-foo is not a key.",
        "cfat_tooshort",
        "dckr_pat_tooshort",
        "DOCKER_TOKEN=not_a_real_token",
        "dckr_pat_",
        "vcp_abc",
        "ops_token is secret.",
        "https://api.cloudflare.com/client/v4/zones",
    ],
)
def test_code_placeholders_and_lookalikes_near_secret_keys_stay(rules: RuleSet, text: str) -> None:
    assert redact_text(text, rules=rules) == text
    line = _line({"type": "function_call_output", "output": text})
    assert _redact_lines([line], rules) == [line]


NEWER_BARE_TOKENS = [fx for fx in NEWER_SECRETS if fx.rule.endswith(("-key", "-token"))]


@pytest.mark.parametrize(
    ("before", "must_redact"),
    [("\\n", True), ("\\t", True), ("\\u001b[31m", True), ('\\"', True), ("\\\\", False)],
    ids=["newline", "tab", "ansi-colour", "escaped-quote", "backslash"],
)
def test_newer_bare_tokens_next_to_json_escapes_keep_the_line_valid(
    rules: RuleSet, before: str, must_redact: bool
) -> None:
    assert len(NEWER_BARE_TOKENS) >= 12
    lines = [f'{{"text": "x{before}{fx.secret}{before}y"}}' for fx in NEWER_BARE_TOKENS]
    problems = []
    for fx, line in zip(NEWER_BARE_TOKENS, _redact_lines(lines, rules), strict=True):
        try:
            text = json.loads(line)["text"]
        except ValueError as err:
            problems.append(f"{fx.name}: invalid JSON ({err})")
            continue
        if must_redact and _survivors(fx, [line, text]):
            problems.append(f"{fx.name}: survived")
    assert not problems


def test_newer_tokens_glued_to_a_letter_or_too_long_stay(rules: RuleSet) -> None:
    # the token rules alone (not Betterleaks' rules, some of which take no boundary): a random
    # value after a key word (``tskey-auth-…``) is the
    # entropy-gated context rule's to redact, whatever glues to its front
    rules = dataclasses.replace(rules, context=(), external=None)
    tokens = [fx.secret for fx in NEWER_SECRETS if fx.text != fx.secret and fx.secret[:2] != "00"]
    glued = [f"x{token}" for token in tokens if not token[0].isdigit() and not token[0].isupper()]
    rng = random.Random("cloudflare-too-long")
    too_long = ["cfat_" + _random("alnum", 40, rng) + _random("hex", 8, rng) + "Z"]
    texts = [*glued, *too_long]
    assert len(glued) >= 10
    assert [redact_text(text, rules=rules) for text in texts] == texts


# -- ordinary text -----------------------------------------------------------------------------

ORDINARY = tomllib.loads((FIXTURES / "ordinary_text.toml").read_text(encoding="utf-8"))["strings"]


def test_ordinary_text_is_left_byte_identical(rules: RuleSet) -> None:
    changed = [(text, redact_text(text, rules=rules)) for text in ORDINARY]
    assert [pair for pair in changed if pair[0] != pair[1]] == []


def test_ordinary_text_inside_json_lines_is_left_byte_identical(rules: RuleSet) -> None:
    lines = [_line({"type": "function_call_output", "output": text}) for text in ORDINARY]
    lines += [
        _line({"type": "function_call", "arguments": json.dumps({"cmd": text})})
        for text in ORDINARY
    ]
    assert _redact_lines(lines, rules) == lines


def test_base64_reasoning_blobs_are_left_alone(rules: RuleSet) -> None:
    rng = random.Random("encrypted-content")
    lines = [
        _line(
            {
                "type": "reasoning",
                "encrypted_content": "gAAAAAB" + _random("urlsafe", 3000, rng) + "==",
            }
        )
        for _ in range(200)
    ]
    assert _redact_lines(lines, rules) == lines


# -- API ---------------------------------------------------------------------------------------


def test_rule_hit_counts_counts_each_replaced_span_once_for_its_rule(rules: RuleSet) -> None:
    rng = random.Random("hit-counts")
    ghp = ["ghp_" + _random("alnum", 36, rng) for _ in range(3)]
    akia = "AKIA" + _random("b32", 16, rng)
    password = "Tr0ub4dor&3-" + _random("alnum", 6, rng)
    lf = pl.LazyFrame(
        {
            "text": [
                f"two tokens {ghp[0]} and {ghp[1]}",
                f"access key {akia}, another {ghp[2]}",
                "nothing to see here",
                None,
                f"password: {password}",
                f"DB_PASSWORD={password}",
            ],
            "other": ["x"] * 6,
        }
    )

    counts = rule_hit_counts(lf, column="text", rules=rules).collect()

    expected = pl.DataFrame(
        {
            "rule_id": [
                "aws-access-key-id",
                "env-secret-assignment",
                "generic-credential",
                "github-token",
            ],
            # DB_PASSWORD=… matches the generic rule too, but the .env rule replaced it
            "hits": [1, 1, 1, 3],
        },
        schema={"rule_id": pl.String, "hits": pl.Int64},
    )
    assert_frame_equal(counts.sort("rule_id"), expected)


def test_rule_hit_counts_is_empty_when_nothing_matches(rules: RuleSet) -> None:
    lf = pl.LazyFrame({"text": ["hello", "max_tokens: 4096"]})
    counts = rule_hit_counts(lf, column="text", rules=rules).collect()
    assert counts.shape == (0, 2)
    assert counts.schema == pl.Schema({"rule_id": pl.String, "hits": pl.Int64})


def test_redact_secrets_rewrites_only_the_named_columns_and_keeps_nulls(rules: RuleSet) -> None:
    token = "ghp_" + _random("alnum", 36, random.Random("columns"))
    lf = pl.LazyFrame({"a": [f"use {token}", None], "b": [f"use {token}", "plain"]})

    out = redact_secrets(lf, columns=["a"], rules=rules).collect()

    expected = pl.DataFrame({"a": [f"use {REDACTED}", None], "b": [f"use {token}", "plain"]})
    assert_frame_equal(out, expected)


def test_redact_text_matches_the_frame_expression(rules: RuleSet) -> None:
    texts = [fx.text for fx in FIXTURE_SECRETS[:10]] + ORDINARY[:10]
    from_frame = pl.select(redact_expr(pl.lit(pl.Series(texts)), rules=rules)).to_series().to_list()
    assert [redact_text(text, rules=rules) for text in texts] == from_frame


def test_default_rules_are_loaded_once_and_match_the_packaged_file(rules: RuleSet) -> None:
    assert load_rules() is rules
    assert load_rules(Path(redact.__file__).with_name("secret_rules.toml")).rules == rules.rules


def test_every_rule_and_every_pass_compiles_in_polars(rules: RuleSet) -> None:
    probe = pl.Series(["x"], dtype=pl.String)
    for pattern in [rule.pattern for rule in rules.rules] + [p.pattern for p in rules.passes]:
        probe.str.contains(pattern)
        probe.str.replace_all(pattern, REDACTED)
    assert [p.name for p in rules.passes] == ["block", "token", "keyed"]
    assert len({rule.id for rule in rules.rules}) == len(rules.rules)


_VALID_RULE = """
[[rules]]
id = "fine"
pass = "token"
regex = 'ghp_[A-Za-z0-9]{36}'
"""


def _rule(rule_id: str, pass_name: str, regex: str, key: str = "regex") -> str:
    return f'[[rules]]\nid = "{rule_id}"\npass = "{pass_name}"\n{key} = \'{regex}\'\n'


@pytest.mark.parametrize(
    ("toml_text", "message"),
    [
        pytest.param(
            _rule("broken-group", "token", "(unclosed"),
            r"'broken-group'.*does not compile",
            id="bad-regex",
        ),
        pytest.param(
            _rule("keyless", "keyed", r"password=\S+"),
            r"'keyless'.*group 1",
            id="keyed-without-key-group",
        ),
        pytest.param(
            _rule("three-groups", "keyed", "(a)(b)(c)"),
            r"'three-groups'.*at most two",
            id="three-groups",
        ),
        pytest.param(_rule("named", "keyed", "(?P<key>a)b"), r"'named'.*unnamed", id="named-group"),
        pytest.param(
            _rule("no-fragment", "token", "{{nope}}x"),
            r"'no-fragment'.*unknown fragment",
            id="unknown-fragment",
        ),
        pytest.param(
            _rule("empty-match", "token", "a*"), r"'empty-match'.*empty string", id="matches-empty"
        ),
        pytest.param(
            _rule("eats-marker", "token", "REDACTED_[A-Z]+"),
            r"'eats-marker'.*already-redacted",
            id="matches-marker",
        ),
        pytest.param(_rule("later", "finally", "x"), r"'later'.*pass must be", id="unknown-pass"),
        pytest.param(
            _rule("typo", "token", "x", key="regexp"), r"'typo'.*unknown keys", id="unknown-key"
        ),
        pytest.param(_rule("Bad Id", "token", "x"), r"kebab-case", id="bad-id"),
        pytest.param(_VALID_RULE + _VALID_RULE, r"'fine'.*duplicate", id="duplicate-id"),
        pytest.param("[[rules]\nid=", r"not valid TOML", id="bad-toml"),
        pytest.param("[fragments]\nx = 1\n" + _VALID_RULE, r"fragment 'x'", id="bad-fragment"),
        pytest.param("", r"non-empty \[\[rules\]\]", id="no-rules"),
    ],
)
def test_load_rules_rejects_a_malformed_rules_file_naming_the_rule(
    tmp_path: Path, toml_text: str, message: str
) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(toml_text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_rules(path)


# -- the public rollout corpus -----------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not found at {CORPUS}")
def test_every_corpus_rollout_line_stays_valid_json_with_no_secret_left(rules: RuleSet) -> None:
    paths = sorted((CORPUS / "rollouts").rglob("*.jsonl"))
    assert paths
    lines = [line for path in paths for line in path.read_text(encoding="utf-8").splitlines()]
    frame = (
        pl.LazyFrame({"raw": lines}, schema={"raw": pl.String})
        .with_columns(redacted=redact_expr(pl.col("raw"), rules=rules))
        .with_columns(left=secret_count_expr(pl.col("redacted"), rules=rules))
        .collect()
    )
    changed = frame.filter(pl.col("raw") != pl.col("redacted"))

    broken = []
    for raw, redacted in changed.select("raw", "redacted").iter_rows():
        try:
            json.loads(raw)
        except ValueError:
            continue  # was not JSON to begin with
        try:
            json.loads(redacted)
        except json.JSONDecodeError as err:
            broken.append(f"{err}: {redacted[max(0, err.pos - 60) : err.pos + 20]!r}")
    assert not broken
    assert frame["left"].sum() == 0
    assert changed.height > 0

    hits = rule_hit_counts(frame.lazy(), column="raw", rules=rules).collect()
    found = set(hits["rule_id"])
    # Leaks the corpus manifest records (public already): a PEM key in an env file, and
    # OpenRouter, OpenAI and Google keys in tool outputs.
    assert {"private-key-block", "openrouter-api-key", "openai-api-key", "google-api-key"} <= found
