"""Kafka's ACLs enforced on the Kafka listener (``authorizer.class.name``, issue #17
item 3), with confluent-kafka (librdkafka) against real brokers.

One cluster for the module: a SASL_PLAINTEXT listener, Kafka's StandardAuthorizer,
``super.users=User:admin``, SCRAM users ``admin`` and ``alice``. In order: alice with no
ACLs cannot produce (TOPIC_AUTHORIZATION_FAILED), does not see the topic in a listing of
every topic and is refused it by name, and cannot use a group
(GROUP_AUTHORIZATION_FAILED), nor grant itself ACLs (CLUSTER_AUTHORIZATION_FAILED);
admin grants WRITE and READ on the topic and READ on the
group (over the Kafka protocol's CreateAcls, which only a super user may do here); alice
then produces, consumes in the group and commits. A DENY of WRITE beats the ALLOW. A
transactional producer without WRITE on its transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and with it commits a transaction. ACL changes
reach brokers through the metadata log: each step waits until every broker's own
``GET /v1/acls`` shows them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from raftka.client import Admin
from raftka.client.admin import UserScramCredentialUpsertion
from raftka.local import LocalCluster, wait_for
from raftka.local.brokers import LocalBrokers
from raftka.local.processes import http_json
from raftka.local.secure import wait_until_brokers_know_user

pytestmark = pytest.mark.slow

DEADLINE_S = 30.0
MECHANISM = "SCRAM-SHA-512"
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
TOPIC = "orders"
TXN_TOPIC = "payments"
GROUP = "billing"
TXN_ID = "alice-tx"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("kafka-authz")
    with LocalCluster(tmp) as cluster:
        cluster.start()
        cluster.wait_leader()
        props = {
            "sasl.enabled.mechanisms": MECHANISM,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        with LocalBrokers(
            cluster,
            extra_properties=props,
            kafka_listener=True,
            kafka_security_protocol="SASL_PLAINTEXT",
        ) as brokers:
            brokers.start()
            http = [b.address for b in brokers.brokers.values()]
            # raftka's HTTP API is not authorized (the documented limit): the users are
            # stored through it, as `raftka users` does.
            with Admin(
                bootstrap_servers=brokers.bootstrap_servers, default_api_timeout_ms=30_000
            ) as admin:
                admin.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion(u, MECHANISM, p) for u, p in PASSWORDS.items()]
                )
            for user in PASSWORDS:
                wait_until_brokers_know_user(http, user, MECHANISM, timeout_s=DEADLINE_S)
            env = {"bootstrap": brokers.kafka_bootstrap_servers, "http": http}
            admin_client = AdminClient(_client_config(env, "admin"))
            futures = admin_client.create_topics([NewTopic(TOPIC, 1, 3), NewTopic(TXN_TOPIC, 1, 3)])
            for future in futures.values():
                future.result(timeout=DEADLINE_S)
            yield {**env, "admin": admin_client}


def _client_config(env: dict[str, Any], user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": env["bootstrap"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
    }


def _grant(env: dict[str, Any], *bindings: AclBinding) -> None:
    """Create ``bindings`` as admin over the Kafka protocol's CreateAcls, then wait
    until every broker's image has them (its GET /v1/acls lists them)."""
    for future in env["admin"].create_acls(list(bindings)).values():
        future.result(timeout=DEADLINE_S)
    wanted = {
        (b.restype.name, b.name, b.principal, b.operation.name, b.permission_type.name)
        for b in bindings
    }

    def everywhere() -> bool:
        for address in env["http"]:
            status, body = http_json(address, "/v1/acls")
            shown = {
                (
                    a["resource_type"],
                    a["resource_name"],
                    a["principal"],
                    a["operation"],
                    a["permission_type"],
                )
                for a in body.get("acls", [])
            }
            if status != 200 or not wanted <= shown:
                return False
        return True

    wait_for(everywhere, timeout_s=DEADLINE_S, message=f"brokers never showed {wanted}")


def _acl(
    restype: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(
        restype, name, ResourcePatternType.LITERAL, "User:alice", "*", operation, permission
    )


def _produce(env: dict[str, Any], topic: str) -> KafkaError | None:
    """One record produced as alice: the delivery error, or None once acknowledged."""
    producer = Producer({**_client_config(env, "alice"), "message.timeout.ms": 10_000})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"hello", on_delivery=lambda e, m: outcome.append(e))
    producer.flush(DEADLINE_S)
    assert outcome, "no delivery report"
    return outcome[0]


def test_alice_without_acls_is_refused(env: dict[str, Any]) -> None:
    error = _produce(env, TOPIC)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    alice = AdminClient(_client_config(env, "alice"))
    # A listing of every topic leaves it out; asked by name, it is refused by that name.
    assert TOPIC not in alice.list_topics(timeout=DEADLINE_S).topics
    named = alice.list_topics(TOPIC, timeout=DEADLINE_S).topics[TOPIC]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert TXN_TOPIC not in alice.list_topics(timeout=DEADLINE_S).topics
    # Only a super user (or ALTER on the cluster) may grant.
    [future] = alice.create_acls([_acl(ResourceType.TOPIC, TOPIC, AclOperation.WRITE)]).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=DEADLINE_S)
    assert raised.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # The group: FindCoordinator needs DESCRIBE on it; the consumer reports the refusal.
    consumer = Consumer({**_client_config(env, "alice"), "group.id": GROUP})
    try:
        consumer.subscribe([TOPIC])

        def group_refused() -> bool:
            message = consumer.poll(0.5)
            error = None if message is None else message.error()
            return error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED

        wait_for(group_refused, timeout_s=DEADLINE_S, message="no GROUP_AUTHORIZATION_FAILED")
    finally:
        consumer.close()


def test_granted_alice_produces_consumes_and_commits(env: dict[str, Any]) -> None:
    _grant(
        env,
        _acl(ResourceType.TOPIC, TOPIC, AclOperation.WRITE),
        _acl(ResourceType.TOPIC, TOPIC, AclOperation.READ),
        _acl(ResourceType.GROUP, GROUP, AclOperation.READ),
    )
    # A producer's metadata may still be the refused one for a moment: retried.
    wait_for(
        lambda: _produce(env, TOPIC) is None,
        timeout_s=DEADLINE_S,
        message="alice's produce was never acknowledged",
    )
    consumer = Consumer(
        {
            **_client_config(env, "alice"),
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([TOPIC])

        def record() -> Any:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                return None
            return message

        message = wait_for(record, timeout_s=DEADLINE_S, message="alice consumed nothing")
        assert message.value() == b"hello"
        consumer.commit(message=message, asynchronous=False)
        [committed] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=DEADLINE_S)
        assert committed.error is None and committed.offset == message.offset() + 1
    finally:
        consumer.close()
    # KIP-430: what alice may do on the topic, as the admin client asks for it (READ and
    # WRITE granted, DESCRIBE implied), and on the group.
    alice = AdminClient(_client_config(env, "alice"))
    [topic] = alice.describe_topics(
        TopicCollection([TOPIC]), include_authorized_operations=True
    ).values()
    operations = {op.name for op in topic.result(DEADLINE_S).authorized_operations}
    assert operations == {"READ", "WRITE", "DESCRIBE"}, operations
    [group] = alice.describe_consumer_groups([GROUP], include_authorized_operations=True).values()
    operations = {op.name for op in group.result(DEADLINE_S).authorized_operations}
    assert operations == {"READ", "DESCRIBE"}, operations


def test_a_deny_beats_the_allow(env: dict[str, Any]) -> None:
    _grant(
        env,
        _acl(ResourceType.TOPIC, TOPIC, AclOperation.WRITE, AclPermissionType.DENY),
    )
    error = _produce(env, TOPIC)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error


def test_a_transaction_needs_write_on_its_transactional_id(env: dict[str, Any]) -> None:
    _grant(env, _acl(ResourceType.TOPIC, TXN_TOPIC, AclOperation.WRITE))
    config = {**_client_config(env, "alice"), "transactional.id": TXN_ID}
    refused = Producer(config)
    with pytest.raises(KafkaException) as raised:
        refused.init_transactions(DEADLINE_S)
    code = raised.value.args[0].code()
    assert code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, raised.value
    _grant(env, _acl(ResourceType.TRANSACTIONAL_ID, TXN_ID, AclOperation.WRITE))
    producer = Producer(config)
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(TXN_TOPIC, f"tx-{uuid.uuid4()}".encode(), key=os.urandom(4))
    producer.commit_transaction(DEADLINE_S)
