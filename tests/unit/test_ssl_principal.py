"""ssl.principal.mapping.rules (Kafka's syntax) and a certificate subject's name."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from raftka.server_common.process_config import ConfigError
from raftka.server_common.ssl_principal import (
    DEFAULT_MAPPER,
    NoMatchingRuleError,
    SslPrincipalMapper,
    subject_name,
)

DN = "CN=alice,OU=ServiceUsers,O=acme,C=US"


def test_default_keeps_the_whole_name() -> None:
    assert DEFAULT_MAPPER.principal(DN) == f"User:{DN}"


def test_rules_in_order_first_that_applies_decides() -> None:
    """Kafka's documented example: the CN of service users, lower-cased; anyone else by
    the whole name."""
    mapper = SslPrincipalMapper.from_rules(
        r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),"
        r"ST=(.*?),C=(.*?)$/$1@$2/L, DEFAULT"
    )
    assert mapper.principal("CN=Alice,OU=ServiceUsers,O=acme,C=US") == "User:alice"
    assert (
        mapper.principal("CN=Bob,OU=Ops,O=acme,L=Oslo,ST=Oslo,C=NO") == "User:bob@ops"
    )  # the second rule, after the first does not match
    assert mapper.principal("CN=carol,O=other") == "User:CN=carol,O=other"


def test_upper_case_escaped_slash_and_literal_dollar() -> None:
    mapper = SslPrincipalMapper.from_rules(r"RULE:^CN=([^,]*)\/x.*$/\$$1\/y/U")
    assert mapper.principal("CN=ann/x,O=a") == "User:$ANN/Y"


def test_the_whole_name_must_match() -> None:
    """A regex that matches only part of the name does not apply (Java's matches())."""
    mapper = SslPrincipalMapper.from_rules("RULE:CN=([a-z]+)/$1/")
    with pytest.raises(
        NoMatchingRuleError, match=r"no ssl\.principal\.mapping\.rules rule applies"
    ):
        mapper.principal("CN=alice,O=acme")
    assert mapper.principal("CN=alice") == "User:alice"


def test_a_rule_that_maps_to_nothing_fails() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(.*)$/$1/")
    with pytest.raises(NoMatchingRuleError, match="empty name"):
        mapper.principal("CN=")


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "is neither DEFAULT nor RULE"),
        ("DEFAULT;RULE:a/b/", "expected ','"),
        ("RULE:abc", "RULE:pattern/replacement/"),
        ("RULE:(/x/", "is not a regular expression"),
        ("RULE:^CN=(.*)$/$2/", r"names group \$2, but the pattern has 1"),
        ("DEFAULT, MAP:x/y/", "'MAP:x/y/' is neither DEFAULT nor RULE"),
    ],
)
def test_bad_rules_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^ssl.principal.mapping.rules: .*{message}"):
        SslPrincipalMapper.from_rules(text)


@given(st.text(st.characters(blacklist_characters="\x00"), max_size=40))
def test_default_is_the_identity_and_catch_all_rules_never_fail(name: str) -> None:
    assert DEFAULT_MAPPER.principal(name or "x") == f"User:{name or 'x'}"
    upper = SslPrincipalMapper.from_rules("RULE:(?s)^(.+)$/$1/U")
    if name:
        assert upper.principal(name) == f"User:{name.upper()}"


def test_subject_name_is_most_specific_first() -> None:
    """A certificate whose subject is written C, O, OU, CN (most general first, as
    certificates order it) is named CN first, as Java's RFC 2253 form names it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    name = subject_name(certificate.public_bytes(serialization.Encoding.DER))
    assert name == "CN=alice,OU=ServiceUsers,O=acme,C=US"
