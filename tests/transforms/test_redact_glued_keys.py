"""A key word joined to the name before it (``blocknative_key=``, ``dailyKEY``,
``buttercmsPRIVATEkey-``, ``shortcutaccess``) vouches for a UUID or a hex digest as a key word
of its own does; a header of its own (``Idempotency-Key:``) and a word that ends in a key word
(``monkey``) do not."""

from __future__ import annotations

import pytest

from memkiln.io.rules import load_rules
from memkiln.transforms.redact import REDACTED, RuleSet, redact_text

UUID = "9f5c17d2-957e-4dda-ae24-811274ed88e5"
HEX40 = "ab8f9c72ca483c3b6c3d4e6e8f9284ab56cd78f0"
HEX64 = "37d02377a3e9d849e18704c3ec883f9c5787d857" + "e18704c3ec883f9c5787d857"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (f"blocknative_key={UUID}", UUID),
        (f"BLOCKNATIVE_KEY: {UUID}", UUID),
        (f"dailyKEY {HEX64}", HEX64),
        (f"buttercmsPRIVATEkey-{HEX40}", HEX40),
        (f"shortcutaccess {UUID}", UUID),
        (f'{{"stripeSecret": "{HEX40}"}}', HEX40),
    ],
)
def test_a_key_word_joined_to_a_name_vouches_for_a_uuid_or_a_digest(
    text: str, value: str, rules: RuleSet
) -> None:
    redacted = redact_text(text, rules=rules)
    assert value not in redacted and REDACTED in redacted


@pytest.mark.parametrize(
    "text",
    [
        f"Idempotency-Key: {UUID}",
        f"key {HEX40}",
        f"monkey business {HEX40[:20]}",
        f"bypass {UUID}",
        f"the ssh key fingerprint {HEX64}",
    ],
)
def test_a_key_word_of_its_own_or_inside_a_word_does_not(text: str, rules: RuleSet) -> None:
    assert redact_text(text, rules=rules) == text
