"""SCRAM credentials in the metadata log: the records, their replay into the image, the
snapshot round trip, and the SASL lookup over the image."""

from __future__ import annotations

import base64
import dataclasses

import pytest
import scramp
from scram_helpers import scram_authenticates

from raftka.common.errors import KafkaError
from raftka.common.scram import salted_password
from raftka.metadata import metadata_records as mr
from raftka.metadata.controller_api import ControllerResult
from raftka.metadata.delta import MetadataDelta, MetadataReplayError, image_from_records
from raftka.metadata.image import MetadataImage, ScramUser
from raftka.metadata.scram_control import (
    AlterUserScramCredentialsResponse,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from raftka.server_common.sasl import (
    credential_from_salted_password,
    new_scram_credential,
)


def credential_record(
    user: str, password: str, mechanism: str = "SCRAM-SHA-256", iterations: int = 4096
) -> mr.UserScramCredentialRecord:
    c = new_scram_credential(mechanism, password, iterations=iterations)
    return mr.UserScramCredentialRecord(
        name=user,
        mechanism=mechanism,
        salt=c.salt,
        stored_key=c.stored_key,
        server_key=c.server_key,
        iterations=c.iterations,
    )


def replayed(
    *records: mr.MetadataRecord, image: MetadataImage = MetadataImage.EMPTY
) -> MetadataImage:
    delta = MetadataDelta(image)
    delta.replay_all(records)
    return delta.apply()


def authenticates(image: MetadataImage, mechanism: str, user: str, password: str) -> bool:
    return scram_authenticates(image.scram_credential, mechanism, user, password)


def test_salted_password_path_equals_scramp() -> None:
    """The controller's derivation from a salted password gives the keys scramp makes
    from the password itself (so the two halves of the protocol agree)."""
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        salt = b"0123456789abcdef"
        _, stored, server, _ = scramp.ScramMechanism(mechanism).make_auth_info(
            "pässword", iteration_count=4096, salt=salt
        )
        salted = salted_password(mechanism, "pässword", salt, 4096)
        c = credential_from_salted_password(mechanism, salt, salted, 4096)
        assert (c.stored_key, c.server_key) == (stored, server)


def test_replay_sets_and_lookup_authenticates() -> None:
    image = replayed(
        credential_record("alice", "secret-a"),
        credential_record("alice", "secret-a5", "SCRAM-SHA-512", 8192),
        credential_record("bob", "secret-b"),
    )
    assert authenticates(image, "SCRAM-SHA-256", "alice", "secret-a")
    assert authenticates(image, "SCRAM-SHA-512", "alice", "secret-a5")
    assert not authenticates(image, "SCRAM-SHA-256", "alice", "wrong")
    assert not authenticates(image, "SCRAM-SHA-512", "bob", "secret-b")  # no 512 credential
    assert image.scram_credential("carol", "SCRAM-SHA-256") is None
    assert image.scram.users() == [
        ScramUser("alice", "SCRAM-SHA-256", 4096),
        ScramUser("alice", "SCRAM-SHA-512", 8192),
        ScramUser("bob", "SCRAM-SHA-256", 4096),
    ]
    assert not image.is_empty()


def test_a_new_credential_replaces_the_old_one() -> None:
    image = replayed(credential_record("alice", "old"))
    image = replayed(credential_record("alice", "new", iterations=5000), image=image)
    assert not authenticates(image, "SCRAM-SHA-256", "alice", "old")
    assert authenticates(image, "SCRAM-SHA-256", "alice", "new")
    assert image.scram.users() == [ScramUser("alice", "SCRAM-SHA-256", 5000)]


def test_removal_removes_one_mechanism_only() -> None:
    image = replayed(
        credential_record("alice", "a"), credential_record("alice", "a", "SCRAM-SHA-512")
    )
    image = replayed(
        mr.RemoveUserScramCredentialRecord(name="alice", mechanism="SCRAM-SHA-256"), image=image
    )
    assert image.scram_credential("alice", "SCRAM-SHA-256") is None
    assert image.scram_credential("alice", "SCRAM-SHA-512") is not None
    assert not authenticates(image, "SCRAM-SHA-256", "alice", "a")
    image = replayed(
        mr.RemoveUserScramCredentialRecord(name="alice", mechanism="SCRAM-SHA-512"), image=image
    )
    assert image.scram.users() == []
    assert image.is_empty()


def test_removing_a_missing_credential_does_not_replay() -> None:
    """A log that removes what is not there disagrees with the image: replay refuses it
    and the delta is as before (the set in the same delta still applies)."""
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay(credential_record("alice", "a"))
    with pytest.raises(MetadataReplayError, match="no SCRAM-SHA-512 credential"):
        delta.replay(mr.RemoveUserScramCredentialRecord(name="alice", mechanism="SCRAM-SHA-512"))
    assert delta.apply().scram.users() == [ScramUser("alice", "SCRAM-SHA-256", 4096)]


def test_set_and_remove_in_one_delta() -> None:
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay(credential_record("alice", "a"))
    delta.replay(mr.RemoveUserScramCredentialRecord(name="alice", mechanism="SCRAM-SHA-256"))
    assert delta.apply().is_empty()


def test_snapshot_round_trip_keeps_credentials() -> None:
    image = replayed(
        credential_record("alice", "a"),
        credential_record("bob", "b", "SCRAM-SHA-512", 16384),
        mr.TopicRecord(name="t", topic_id="7d1f6c4e-2a4b-4c8e-9f10-0123456789ab"),
    )
    records = mr.decode_records(mr.encode_records(image.to_records()))
    assert sum(isinstance(r, mr.UserScramCredentialRecord) for r in records) == 2
    again = image_from_records(records, image.offset, image.epoch)
    assert again == image
    assert authenticates(again, "SCRAM-SHA-512", "bob", "b")


def test_untouched_scram_image_is_shared() -> None:
    image = replayed(credential_record("alice", "a"))
    after = replayed(
        mr.TopicRecord(name="t", topic_id="7d1f6c4e-2a4b-4c8e-9f10-0123456789ab"), image=image
    )
    assert after.scram is image.scram


def test_keys_travel_as_base64_and_never_as_password() -> None:
    record = credential_record("alice", "hunter2")
    encoded = mr.encode_record(record)
    assert b"hunter2" not in encoded
    assert mr.decode_record(encoded) == record


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"mechanism": "SCRAM-SHA-1"}, "SCRAM-SHA-256, SCRAM-SHA-512"),
        ({"iterations": 4095}, "iteration count"),
        ({"iterations": 16385}, "iteration count"),
        ({"name": ""}, "non-empty string"),
        ({"salt": ""}, "salt must be at least 12 bytes"),
        ({"salt": "AAAAAAAAAAAAAA=="}, "salt must be at least 12 bytes"),
        ({"stored_key": "AAAA"}, "keys must be 32 bytes"),
        ({"server_key": "not base64!"}, "base64"),
    ],
)
def test_malformed_credential_records_are_refused(change: dict[str, object], expected: str) -> None:
    data = credential_record("alice", "a").to_dict()
    data["data"].update(change)
    with pytest.raises(mr.MetadataRecordError, match=expected) as info:
        mr.record_from_dict(data)
    assert isinstance(info.value, KafkaError) and info.value.name == "INVALID_REQUEST"


# ---------------------------------------------------------------------------------------
# The controller's commands (scram_control)


def upsertion(
    user: str, password: str, mechanism: str = "SCRAM-SHA-256", iterations: int = 4096
) -> ScramCredentialUpsertion:
    salt = b"a-salt-for-user:" + user.encode()
    salted = salted_password(mechanism, password, salt, iterations)
    return ScramCredentialUpsertion(user, mechanism, iterations, salt, salted)


def committed(image: MetadataImage, result: ControllerResult[object]) -> MetadataImage:
    return replayed(*result.records, image=image)


def errors_of(result: ControllerResult[AlterUserScramCredentialsResponse]) -> dict[str, str | None]:
    return {r.user: None if r.error is None else r.error.name for r in result.response.results}


def test_alter_upserts_and_the_credential_authenticates() -> None:
    result = alter_user_scram_credentials(
        MetadataImage.EMPTY,
        [],
        [upsertion("alice", "pw-a"), upsertion("bob", "pw-b", "SCRAM-SHA-512", 16384)],
    )
    assert errors_of(result) == {"alice": None, "bob": None}
    assert [type(r) for r in result.records] == [mr.UserScramCredentialRecord] * 2
    # The password and salted password never reach the log, only the derived keys.
    payload = mr.encode_records(result.records)
    assert b"pw-a" not in payload
    image = committed(MetadataImage.EMPTY, result)
    assert authenticates(image, "SCRAM-SHA-256", "alice", "pw-a")
    assert authenticates(image, "SCRAM-SHA-512", "bob", "pw-b")
    assert not authenticates(image, "SCRAM-SHA-512", "bob", "pw-a")


def test_alter_deletes_and_missing_is_resource_not_found() -> None:
    image = committed(
        MetadataImage.EMPTY,
        alter_user_scram_credentials(MetadataImage.EMPTY, [], [upsertion("alice", "a")]),
    )
    result = alter_user_scram_credentials(
        image,
        [
            ScramCredentialDeletion("alice", "SCRAM-SHA-256"),
            ScramCredentialDeletion("bob", "SCRAM-SHA-256"),
            ScramCredentialDeletion("carol", "SCRAM-SHA-1"),
        ],
        [],
    )
    assert errors_of(result) == {
        "alice": None,
        "bob": "RESOURCE_NOT_FOUND",
        "carol": "UNSUPPORTED_SASL_MECHANISM",
    }
    assert result.records == (mr.RemoveUserScramCredentialRecord("alice", "SCRAM-SHA-256"),)
    assert committed(image, result).scram.users() == []


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (upsertion("", "x"), "UNACCEPTABLE_CREDENTIAL"),
        (
            dataclasses.replace(upsertion("u", "x"), mechanism="SCRAM-SHA-1"),
            "UNSUPPORTED_SASL_MECHANISM",
        ),
        (dataclasses.replace(upsertion("u", "x"), mechanism="PLAIN"), "UNSUPPORTED_SASL_MECHANISM"),
        (dataclasses.replace(upsertion("u", "x"), iterations=4095), "UNACCEPTABLE_CREDENTIAL"),
        (dataclasses.replace(upsertion("u", "x"), iterations=16385), "UNACCEPTABLE_CREDENTIAL"),
        (dataclasses.replace(upsertion("u", "x"), salt=b""), "UNACCEPTABLE_CREDENTIAL"),
        (dataclasses.replace(upsertion("u", "x"), salt=b"11 bytes..."), "UNACCEPTABLE_CREDENTIAL"),
        (
            dataclasses.replace(upsertion("u", "x"), salted_password=b"short"),
            "UNACCEPTABLE_CREDENTIAL",
        ),
    ],
)
def test_bad_upsertion_fails_alone(entry: ScramCredentialUpsertion, expected: str) -> None:
    """One bad entry gets Kafka's error; the good one beside it still applies."""
    result = alter_user_scram_credentials(MetadataImage.EMPTY, [], [entry, upsertion("good", "g")])
    assert errors_of(result) == {entry.name: expected, "good": None}
    assert [r.name for r in result.records] == ["good"]


def test_same_user_twice_is_duplicate_resource() -> None:
    """Twice in upsertions (even with two mechanisms) or in a deletion and an upsertion:
    DUPLICATE_RESOURCE for that user and none of its entries apply."""
    result = alter_user_scram_credentials(
        MetadataImage.EMPTY,
        [ScramCredentialDeletion("bob", "SCRAM-SHA-256")],
        [
            upsertion("alice", "a"),
            upsertion("alice", "a", "SCRAM-SHA-512"),
            upsertion("bob", "b"),
            upsertion("carol", "c"),
        ],
    )
    assert errors_of(result) == {
        "bob": "DUPLICATE_RESOURCE",
        "alice": "DUPLICATE_RESOURCE",
        "carol": None,
    }
    assert [r.name for r in result.records] == ["carol"]


def test_describe_lists_users_without_keys() -> None:
    image = committed(
        MetadataImage.EMPTY,
        alter_user_scram_credentials(
            MetadataImage.EMPTY,
            [],
            [upsertion("bob", "b", "SCRAM-SHA-512", 8192), upsertion("alice", "a")],
        ),
    )
    everyone = describe_user_scram_credentials(image, None)
    assert [(r.user, r.error, r.credentials) for r in everyone] == [
        ("alice", None, (ScramUser("alice", "SCRAM-SHA-256", 4096),)),
        ("bob", None, (ScramUser("bob", "SCRAM-SHA-512", 8192),)),
    ]
    named = describe_user_scram_credentials(image, ["bob", "nobody", "alice", "alice"])
    assert [(r.user, None if r.error is None else r.error.name) for r in named] == [
        ("bob", None),
        ("nobody", "RESOURCE_NOT_FOUND"),
        ("alice", "DUPLICATE_RESOURCE"),
    ]


def test_metadata_dump_text_redacts_the_keys() -> None:
    """``raftka metadata dump`` prints a credential's user, mechanism and iterations but
    not its salt or keys (Kafka's RecordRedactor)."""
    from raftka.metadata.cli import _record_line

    record = credential_record("alice", "a")
    line = _record_line(record.to_dict())
    assert line.startswith('UserScramCredentialRecord v0 name="alice" mechanism="SCRAM-SHA-256"')
    assert "salt=(redacted) stored_key=(redacted) server_key=(redacted) iterations=4096" in line
    for key in (record.salt, record.stored_key, record.server_key):
        assert base64.b64encode(key).decode() not in line


def test_too_many_entries_are_refused_whole() -> None:
    deletions = [ScramCredentialDeletion(f"u{i}", "SCRAM-SHA-256") for i in range(12_001)]
    with pytest.raises(KafkaError, match="more than 12000") as info:
        alter_user_scram_credentials(MetadataImage.EMPTY, deletions, [])
    assert info.value.name == "INVALID_REQUEST"
