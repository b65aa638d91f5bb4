"""The kafka-python / aiokafka names are public surface (the top-level ``raftka``
exports and ``raftka.client.compat`` are pinned in test_public_api.py): ``raftka.admin``,
``raftka.errors`` and ``raftka.structs`` resolve, and ``import raftka`` (which the
command line and the pytest plugin do in every process) loads no client code and no
aiohttp: the exports are lazy. Checked in a fresh interpreter where it matters."""

from __future__ import annotations

import subprocess
import sys

import raftka
import raftka.client
import raftka.client.compat


def _run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_top_level_names_are_raftka_clients_own_objects() -> None:
    """raftka's own top-level names are the very objects raftka.client (and its compat
    package) export; they are resolved lazily yet listed by dir()."""
    for name in ("Producer", "Consumer", "Admin", "AsyncProducer", "AsyncConsumer"):
        assert getattr(raftka, name) is getattr(raftka.client, name)
    assert raftka.AsyncAdmin is raftka.client.AsyncAdmin
    assert raftka.TopicPartition is raftka.client.TopicPartition
    assert raftka.KafkaProducer is raftka.client.compat.KafkaProducer
    assert "KafkaProducer" in dir(raftka)


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="KafkaClient"):
        raftka.KafkaClient  # noqa: B018  (kafka-python's low-level client: not provided)


def test_import_raftka_loads_no_client_and_no_aiohttp() -> None:
    """A fresh interpreter: after ``import raftka``, and after importing
    raftka.structs, no raftka.client module and no aiohttp is loaded."""
    _run(
        "import sys, raftka, raftka.structs, raftka.admin\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('aiohttp', 'raftka.client')))\n"
        "assert not bad, bad\n"
    )


def test_from_raftka_import_the_kafka_python_names_works() -> None:
    """The import lines of a kafka-python / aiokafka program, changed to raftka, work in
    a fresh interpreter, and the structs are raftka's own classes."""
    _run(
        "from raftka import KafkaProducer, KafkaConsumer, KafkaAdminClient\n"
        "from raftka import AIOKafkaProducer, AIOKafkaConsumer, TopicPartition\n"
        "from raftka.admin import KafkaAdminClient as A, NewTopic, NewPartitions\n"
        "from raftka.errors import KafkaTimeoutError, NoBrokersAvailable, TopicAlreadyExistsError\n"
        "from raftka.structs import TopicPartition as TP, OffsetAndMetadata, OffsetAndTimestamp\n"
        "import raftka.client, raftka.common.errors as e\n"
        "assert A is KafkaAdminClient and TP is TopicPartition is raftka.client.TopicPartition\n"
        "assert TopicAlreadyExistsError is e.TopicAlreadyExistsError\n"
        "assert OffsetAndMetadata is raftka.client.OffsetAndMetadata\n"
        "assert OffsetAndTimestamp is raftka.client.OffsetAndTimestamp\n"
        "assert NewPartitions is raftka.client.NewPartitions\n"
        "assert OffsetAndMetadata(5, '', None) == OffsetAndMetadata(5)\n"
    )
