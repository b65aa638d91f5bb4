"""SCRAM users end to end on a real cluster (3 controllers and 3 brokers as processes):
``raftka users add|list|delete``, the controller's AlterUserScramCredentials, the
credential on every broker, Kafka's errors for bad input, and the Kafka listener's
AlterUserScramCredentials / DescribeUserScramCredentials driven by kafka-python's and
confluent-kafka's admin clients.

What "every broker sees it" means here: each broker answers
``GET /v1/scram-credentials`` from its own metadata image (as Kafka's brokers answer
DescribeUserScramCredentials from their metadata cache), so the user, mechanism and
iteration count it shows are what that broker replayed. The SASL exchange here runs in
this process: a :class:`SaslServerSession` over an image replayed from each
controller's committed metadata log (the records every broker replays) authenticates a
scramp client with the right password and refuses a wrong one. The brokers' own SASL is
tested with real clients in test_kafka_listener_sasl.py (the Kafka listener) and
test_local_up_secure.py (the HTTPS API).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from cli_helpers import CliCluster, ok
from scram_helpers import scram_authenticates

from raftka.common.scram import salted_password
from raftka.local import wait_for
from raftka.local.processes import http_json
from raftka.metadata import metadata_records as mr
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import MetadataImage

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0


class Env(CliCluster):
    def broker_credentials(self, broker_id: int) -> dict[str, dict[str, int]]:
        """{user: {mechanism: iterations}} from one broker's own image."""
        status, body = http_json(self.brokers[broker_id].address, "/v1/scram-credentials")
        assert status == 200, body
        return {
            r["user"]: {c["mechanism"]: c["iterations"] for c in r["credentials"]}
            for r in body["results"]
        }

    def committed_image(self, address: str) -> MetadataImage:
        """The image one controller's committed metadata log replays to."""
        delta = MetadataDelta(MetadataImage.EMPTY)
        offset = 0
        while True:
            status, body = http_json(address, f"/v1/metadata?offset={offset}&records_max=1000")
            assert status == 200, body
            if body["snapshot"] is not None:
                delta = MetadataDelta(MetadataImage.EMPTY)
                delta.replay_all(mr.record_from_dict(r) for r in body["snapshot"]["records"])
            for batch in body["batches"]:
                delta.replay_all(mr.record_from_dict(r) for r in batch["records"])
            offset = body["next_offset"]
            if offset >= body["high_watermark"]:
                return delta.apply()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with Env.start(tmp_path_factory.mktemp("scram"), kafka_listener=True) as env:
        yield env


def _add(env: Env, user: str, mechanism: str, password: str) -> None:
    ok(env.run("users", "add", "--user", user, "--mechanism", mechanism, "--password", password))


def _everywhere(env: Env, user: str, expected: dict[str, int] | None) -> None:
    """Wait until every broker's image shows ``user`` with exactly ``expected``."""

    def shown() -> bool:
        return all(env.broker_credentials(b).get(user) == expected for b in sorted(env.brokers.ids))

    wait_for(
        shown,
        timeout_s=DEADLINE_S,
        message=lambda: (
            f"brokers show {user}: "
            + str({b: env.broker_credentials(b).get(user) for b in sorted(env.brokers.ids)})
        ),
    )


def test_add_list_delete_reaches_every_broker(env: Env) -> None:
    out = ok(
        env.run(
            "users", "add", "--user", "alice", "--mechanism", "SCRAM-SHA-256",
            "--iterations", "8192", stdin="alice-secret\n",
        )
    )  # fmt: skip
    assert out == "Completed updating config for user alice.\n"
    _add(env, "alice", "SCRAM-SHA-512", "alice-512")
    _everywhere(env, "alice", {"SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 4096})
    assert ok(env.run("users", "list")).splitlines() == [
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"
    ]
    for controller in env.controllers.controllers.values():
        image = env.committed_image(controller.address)
        assert scram_authenticates(image.scram_credential, "SCRAM-SHA-256", "alice", "alice-secret")
        assert scram_authenticates(image.scram_credential, "SCRAM-SHA-512", "alice", "alice-512")
        assert not scram_authenticates(
            image.scram_credential, "SCRAM-SHA-256", "alice", "alice-512"
        )
        assert not scram_authenticates(
            image.scram_credential, "SCRAM-SHA-256", "mallory", "alice-secret"
        )

    # Replacing a credential: the old password stops working.
    _add(env, "alice", "SCRAM-SHA-256", "rotated")
    _everywhere(env, "alice", {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096})
    image = env.committed_image(env.active_controller())
    assert scram_authenticates(image.scram_credential, "SCRAM-SHA-256", "alice", "rotated")
    assert not scram_authenticates(image.scram_credential, "SCRAM-SHA-256", "alice", "alice-secret")

    out = ok(env.run("users", "delete", "--user", "alice", "--mechanism", "SCRAM-SHA-256"))
    assert out == "Completed updating config for user alice.\n"
    _everywhere(env, "alice", {"SCRAM-SHA-512": 4096})
    ok(env.run("users", "delete", "--user", "alice", "--mechanism", "SCRAM-SHA-512"))
    _everywhere(env, "alice", None)
    image = env.committed_image(env.active_controller())
    assert not scram_authenticates(image.scram_credential, "SCRAM-SHA-512", "alice", "alice-512")
    assert image.scram.users() == []
    assert ok(env.run("users", "list")) == ""


def _upsertion(
    name: str, mechanism: str = "SCRAM-SHA-256", iterations: int = 4096
) -> dict[str, object]:
    salt = b"sixteen byte salt"
    salted = salted_password("SCRAM-SHA-256", "pw", salt, 4096)
    return {
        "name": name,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": base64.b64encode(salt).decode(),
        "salted_password": base64.b64encode(salted).decode(),
    }


def test_bad_inputs_get_kafka_errors_and_nothing_falls_over(env: Env) -> None:
    address = env.active_controller()
    status, body = http_json(
        address,
        "/v1/scram-credentials",
        method="POST",
        body={
            "deletions": [
                {"name": "ghost", "mechanism": "SCRAM-SHA-256"},
                {"name": "dup", "mechanism": "SCRAM-SHA-256"},
            ],
            "upsertions": [
                _upsertion("weird", mechanism="SCRAM-SHA-1"),
                _upsertion("few", iterations=100),
                _upsertion("many", iterations=16385),
                _upsertion(""),
                _upsertion("dup"),
                _upsertion("fine"),
            ],
        },
    )
    assert status == 200, body
    errors = {r["user"]: r["error"] and r["error"]["error"] for r in body["results"]}
    assert errors == {
        "ghost": "RESOURCE_NOT_FOUND",
        "dup": "DUPLICATE_RESOURCE",
        "weird": "UNSUPPORTED_SASL_MECHANISM",
        "few": "UNACCEPTABLE_CREDENTIAL",
        "many": "UNACCEPTABLE_CREDENTIAL",
        "": "UNACCEPTABLE_CREDENTIAL",
        "fine": None,
    }
    _everywhere(env, "fine", {"SCRAM-SHA-256": 4096})
    for user in ("ghost", "dup", "weird", "few", "many", ""):
        assert user not in env.broker_credentials(min(env.brokers.ids))

    # A malformed body is refused whole, naming the field.
    status, body = http_json(
        address,
        "/v1/scram-credentials",
        method="POST",
        body={"upsertions": [{**_upsertion("x"), "salt": "not base64!"}]},
    )
    assert (status, body["error"]) == (400, "INVALID_REQUEST"), body
    assert "salt" in body["message"]
    status, body = http_json(address, "/v1/scram-credentials?user=nobody")
    assert status == 200
    assert body["results"][0]["error"]["error"] == "RESOURCE_NOT_FOUND"

    # The real command: one line with Kafka's error name, exit status 1.
    env_vars = {**os.environ, "RAFTKA_BOOTSTRAP_SERVERS": env.bootstrap_servers}
    for args, expected in [
        (["delete", "--user", "nobody", "--mechanism", "SCRAM-SHA-256"], "RESOURCE_NOT_FOUND"),
        (["add", "--user", "u", "--mechanism", "SCRAM-SHA-1", "--password", "p"],
         "UNSUPPORTED_SASL_MECHANISM"),
        (["add", "--user", "u", "--mechanism", "SCRAM-SHA-256", "--iterations", "99",
          "--password", "p"], "UNACCEPTABLE_CREDENTIAL"),
        (["add", "--user", "", "--mechanism", "SCRAM-SHA-256", "--password", "p"],
         "UNACCEPTABLE_CREDENTIAL"),
        (["list", "--user", "nobody"], "RESOURCE_NOT_FOUND"),
    ]:  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "raftka", "users", *args],
            input=b"",
            capture_output=True,
            timeout=60,
            env=env_vars,
            check=False,
        )
        err = done.stderr.decode()
        assert done.returncode == 1, (args, done.stdout, err)
        assert err.startswith(f"Error: {expected}"), (args, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err

    for node in [*env.controllers.controllers.values(), *env.brokers.brokers.values()]:
        assert node.running, f"{node.role} {node.node_id} exited:\n{node.tail()}"
        assert node.health() is not None


def test_kafka_python_admin_over_the_kafka_listener(env: Env) -> None:
    """AlterUserScramCredentials (forwarded to the controller) and
    DescribeUserScramCredentials (answered from the broker's image) on the Kafka
    listener, from kafka-python's KafkaAdminClient."""
    from kafka.admin import (
        KafkaAdminClient,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = KafkaAdminClient(bootstrap_servers=env.brokers.kafka_bootstrap_servers)
    try:
        errors = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion("kp-user", "SCRAM-SHA-512", "kp-pw", iterations=8192),
                UserScramCredentialUpsertion("kp-few", "SCRAM-SHA-256", "x", iterations=100),
                UserScramCredentialDeletion("kp-ghost", "SCRAM-SHA-256"),
            ]
        )
        assert errors["kp-user"] is None
        assert "iterations must be in 4096..16384" in errors["kp-few"]
        assert "does not exist" in errors["kp-ghost"]
        _everywhere(env, "kp-user", {"SCRAM-SHA-512": 8192})
        described = admin.describe_user_scram_credentials(["kp-user", "kp-ghost"])
        assert described["kp-user"]["error"] is None
        assert [
            (c["mechanism"], c["iterations"]) for c in described["kp-user"]["credential_infos"]
        ] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
        assert described["kp-ghost"]["error"]
        image = env.committed_image(env.active_controller())
        assert scram_authenticates(image.scram_credential, "SCRAM-SHA-512", "kp-user", "kp-pw")
        assert not scram_authenticates(
            image.scram_credential, "SCRAM-SHA-512", "kp-user", "kp-wrong"
        )
        errors = admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("kp-user", "SCRAM-SHA-512")]
        )
        assert errors == {"kp-user": None}
        _everywhere(env, "kp-user", None)
    finally:
        admin.close()


def test_confluent_kafka_admin_over_the_kafka_listener(env: Env) -> None:
    """The same APIs from librdkafka (confluent-kafka's AdminClient), whose errors carry
    Kafka's codes."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": env.brokers.kafka_bootstrap_servers})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("ck-user", info, b"ck-pw")]
    )
    assert futures["ck-user"].result(timeout=30) is None
    _everywhere(env, "ck-user", {"SCRAM-SHA-256": 4096})
    described = admin.describe_user_scram_credentials(["ck-user"])["ck-user"].result(timeout=30)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)
    ]
    image = env.committed_image(env.active_controller())
    assert scram_authenticates(image.scram_credential, "SCRAM-SHA-256", "ck-user", "ck-pw")
    deletion = [UserScramCredentialDeletion("ck-user", ScramMechanism.SCRAM_SHA_256)]
    assert admin.alter_user_scram_credentials(deletion)["ck-user"].result(timeout=30) is None
    _everywhere(env, "ck-user", None)
    with pytest.raises(KafkaException) as info_:
        admin.alter_user_scram_credentials(deletion)["ck-user"].result(timeout=30)
    assert info_.value.args[0].name() == "RESOURCE_NOT_FOUND"
