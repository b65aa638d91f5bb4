"""Kafka's ``sasl.jaas.config`` line for a SCRAM or PLAIN login (common/jaas.py): the
user name and password come out unescaped; anything raftka would not use as written is
refused with a message naming the key."""

from __future__ import annotations

import pytest

from raftka.common.errors import InvalidConfigError
from raftka.common.jaas import parse_login

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_a_scram_or_plain_line_gives_user_and_password() -> None:
    line = f'{SCRAM} required username="alice"  password="a\\\\b\\"c";'
    assert parse_login(line, "SCRAM-SHA-256") == ("alice", 'a\\b"c')
    assert parse_login(f' {PLAIN} required\n password="p" username="u" ; ', "PLAIN") == ("u", "p")


@pytest.mark.parametrize(
    ("line", "mechanism", "message"),
    [
        ("", "PLAIN", "expected '<LoginModule> required"),
        (f'{PLAIN} required username="u" password="p";', "SCRAM-SHA-512", "ScramLoginModule"),
        (f'{SCRAM} optional username="u" password="p";', "SCRAM-SHA-256", "'required'"),
        (f'{SCRAM} required username="u" password="p"', "SCRAM-SHA-256", "ends with ';'"),
        (f"{SCRAM} required username=u password=p;", "SCRAM-SHA-256", "cannot read 'username=u"),
        (f'{SCRAM} required username="u";', "SCRAM-SHA-256", "username and password"),
        (
            f'{SCRAM} required username="u" password="p" tokenauth="true";',
            "SCRAM-SHA-256",
            "'tokenauth' is not used",
        ),
        (f'{SCRAM} required username="u" password="p";', "GSSAPI", "no login module for GSSAPI"),
    ],
)
def test_lines_raftka_cannot_use_are_refused(line: str, mechanism: str, message: str) -> None:
    with pytest.raises(InvalidConfigError) as caught:
        parse_login(line, mechanism, key="kafka.sasl.jaas.config")
    assert caught.value.message.startswith("kafka.sasl.jaas.config: ")
    assert message in caught.value.message, caught.value.message
