"""Real brokers validate what producers send, and take topic config changes live.

How: one cluster (3 controllers, 3 brokers as OS processes) for the module. Bad batches
go to the leader over raw HTTP (the typed produce frame the client uses), so nothing in
the client can filter them: each is answered with Kafka's error, nothing is stored, and
the same connection then produces fine. Each topic config is changed with
``raftka topics alter --add-config`` (the command a user types) and checked by behaviour, with no
restart: a record over the new max.message.bytes is refused, a small segment.bytes
rolls segments, a short retention.ms deletes them, and compression.type re-encodes
batches as the broker stores them. Last, hypothesis throws mutated batches at the
leader: it keeps answering and never stores a batch a consumer cannot decode.
"""

from __future__ import annotations

import asyncio
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.client import Producer, TopicPartition
from raftka.client.errors import MessageTooLargeError
from raftka.common.messages import broker as api
from raftka.common.messages import decode, encode
from raftka.common.record import Compression, Record, build_batch, decode_batches
from raftka.common.record.header import CRC_OFFSET, HEADER_SIZE, compute_crc, iter_batches
from raftka.local import wait_for
from raftka.testing import RaftkaCluster

pytestmark = pytest.mark.slow

API_TIMEOUT_MS = 20_000
DEADLINE_S = 30.0


class Env(RaftkaCluster):
    def leader(self, topic: str) -> int:
        """The leader of partition 0 once every broker agrees on it."""

        def agreed() -> int | None:
            leaders = set()
            for b in self.brokers.ids:
                md = self.brokers.metadata(b) or {"topics": []}
                t = {t["name"]: t for t in md["topics"]}.get(topic)
                if t is None:
                    return None
                leaders.add(t["partitions"][0]["leader"])
            (leader,) = leaders if len(leaders) == 1 else (None,)
            return leader if leader is not None and leader >= 0 else None

        return wait_for(agreed, timeout_s=DEADLINE_S, message=lambda: f"{topic} has no leader")

    def offsets(self, topic: str) -> tuple[int, int]:
        tp = TopicPartition(topic, 0)
        start = self.admin.list_offsets({tp: "earliest"}, timeout_ms=API_TIMEOUT_MS)[tp].offset
        end = self.admin.list_offsets({tp: "latest"}, timeout_ms=API_TIMEOUT_MS)[tp].offset
        return start, end

    def alter(self, topic: str, *settings: str) -> None:
        args = [arg for s in settings for arg in ("--add-config", s)]
        done = subprocess.run(
            [sys.executable, "-m", "raftka", "topics", "alter", "--topic", topic, *args,
             "--bootstrap-server", self.bootstrap_servers],
            capture_output=True, timeout=DEADLINE_S, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()

    def wait_config(self, topic: str, key: str, value: str) -> None:
        """Wait until every broker's image holds the altered value."""

        def applied() -> bool:
            described = self.admin.describe_configs([topic], timeout_ms=API_TIMEOUT_MS)[topic]
            return key in described and described[key].value == value

        wait_for(applied, timeout_s=DEADLINE_S, message=lambda: f"{topic} {key} not {value}")

    def segment_files(self, topic: str) -> list[Path]:
        leader = self.brokers[self.leader(topic)]
        return sorted((leader.data_dir / "logs" / f"{topic}-0").glob("*.log"))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    # Retention checks every second so a retention change shows quickly.
    props = {"log.retention.check.interval.ms": "500"}
    with Env.start(tmp_path_factory.mktemp("topic-configs"), broker_properties=props) as env:
        yield env


def _recrc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def _garbage_gzip() -> bytes:
    """A gzip batch whose payload is not deflate data, with a right CRC."""
    template = build_batch(
        [Record(b"v", b"k", int(time.time() * 1000))], compression=Compression.GZIP
    )
    buf = bytearray(template[:HEADER_SIZE] + b"\x1f\x8b" + b"not-deflate" * 8)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    return _recrc(buf)


async def _produce_raw(
    session: aiohttp.ClientSession, address: str, topic: str, data: bytes
) -> api.ProducePartitionResponse:
    request = api.ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        partitions=(api.ProducePartition(topic=topic, partition=0, records_bytes=len(data)),),
    )
    async with session.post(
        f"http://{address}/v1/produce",
        data=api.encode_frame(request, [data]),
        headers={"Content-Type": "application/vnd.raftka.frame"},
    ) as response:
        body = await response.read()
        assert response.status == 200, body[:300]
    (answer,) = decode(body, api.ProduceResponse).responses
    return answer


async def _fetch_raw(address: str, topic: str) -> bytes:
    request = api.FetchRequest(
        max_wait_ms=0,
        partitions=(api.FetchPartition(topic=topic, partition=0, fetch_offset=0),),
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://{address}/v1/fetch",
            data=encode(request),
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        raw = await response.read()
    _, payloads = api.decode_frame(raw, api.FetchResponse)
    return bytes(payloads[0])


def test_the_leader_refuses_batches_a_consumer_could_not_read(env: Env) -> None:
    """A client's control batch, a gzip batch of garbage behind a right CRC and a record
    two hours in the future are each refused with Kafka's error; nothing is stored; the
    connection then produces a good batch, which is all a consumer reads."""
    topic = "validated"
    env.create_topic(topic)
    address = env.brokers[env.leader(topic)].address
    now = int(time.time() * 1000)
    bad = {
        "INVALID_RECORD": build_batch([Record(b"x", b"k", now)], is_control=True),
        "CORRUPT_MESSAGE": _garbage_gzip(),
        "INVALID_TIMESTAMP": build_batch([Record(b"x", b"k", now + 2 * 3_600_000)]),
    }

    async def run() -> list[api.ProducePartitionResponse]:
        async with aiohttp.ClientSession() as session:
            answers = [await _produce_raw(session, address, topic, data) for data in bad.values()]
            good = build_batch([Record(b"good", b"k", now)])
            answers.append(await _produce_raw(session, address, topic, good))
            return answers

    answers = asyncio.run(run())
    for name, answer in zip(bad, answers, strict=False):
        assert answer.error is not None and answer.error.error == name, answer
    assert answers[-1].error is None and answers[-1].base_offset == 0, answers[-1]
    assert env.offsets(topic) == (0, 1)
    stored = list(decode_batches(asyncio.run(_fetch_raw(address, topic))))
    assert [r.value for b in stored for r in b.records] == [b"good"]


def test_max_message_bytes_changes_without_a_restart(env: Env) -> None:
    topic = "live-max-bytes"
    env.create_topic(topic)
    with Producer(bootstrap_servers=env.bootstrap_servers, acks="all", linger_ms=0) as producer:
        producer.send(topic, b"x" * 2000).result(timeout=DEADLINE_S)
        env.alter(topic, "max.message.bytes=1000")
        env.wait_config(topic, "max.message.bytes", "1000")

        def refused() -> bool:
            try:
                producer.send(topic, b"y" * 2000).result(timeout=DEADLINE_S)
            except MessageTooLargeError:
                return True
            return False

        wait_for(refused, timeout_s=DEADLINE_S, message=lambda: "2000-byte record still taken")
        producer.send(topic, b"z" * 100).result(timeout=DEADLINE_S)


def test_segment_bytes_and_retention_change_without_a_restart(env: Env) -> None:
    """A small segment.bytes makes the leader roll; then a short retention.ms deletes
    the closed segments (the log start moves up), all on the running brokers."""
    topic = "live-segments"
    env.create_topic(topic)
    with Producer(bootstrap_servers=env.bootstrap_servers, acks="all", linger_ms=0) as producer:
        producer.send(topic, b"a" * 100).result(timeout=DEADLINE_S)
        assert len(env.segment_files(topic)) == 1
        env.alter(topic, "segment.bytes=1024")
        env.wait_config(topic, "segment.bytes", "1024")
        for i in range(40):
            producer.send(topic, b"%03d" % i + b"b" * 97).result(timeout=DEADLINE_S)
    assert len(env.segment_files(topic)) >= 3, env.segment_files(topic)
    start, end = env.offsets(topic)
    assert (start, end) == (0, 41)
    env.alter(topic, "retention.ms=1")
    wait_for(
        lambda: env.offsets(topic)[0] > 0,
        timeout_s=DEADLINE_S,
        message=lambda: f"log start still {env.offsets(topic)} after retention.ms=1",
    )
    assert env.offsets(topic)[1] == 41


def test_compression_type_recompresses_what_the_broker_stores(env: Env) -> None:
    topic = "live-compression"
    env.create_topic(topic)
    env.alter(topic, "compression.type=gzip")
    env.wait_config(topic, "compression.type", "gzip")
    address = env.brokers[env.leader(topic)].address
    with Producer(bootstrap_servers=env.bootstrap_servers, acks="all", linger_ms=0) as producer:

        def stored_as_gzip() -> bool:
            producer.send(topic, b"plain", key=b"k").result(timeout=DEADLINE_S)
            raw = asyncio.run(_fetch_raw(address, topic))
            codecs = [h.compression for _, h in iter_batches(raw)]
            return codecs[-1] is Compression.GZIP

        wait_for(stored_as_gzip, timeout_s=DEADLINE_S, message=lambda: "batch not recompressed")
    raw = asyncio.run(_fetch_raw(address, topic))
    values = [r.value for b in decode_batches(raw) for r in b.records]
    assert values and set(values) == {b"plain"}


@st.composite
def _mutated_batch(draw: st.DrawFn) -> bytes:
    """A valid batch of any codec with bytes flipped in its records section and its CRC
    re-computed: corruption only decoding can find."""
    codec = draw(st.sampled_from(list(Compression)))
    now = int(time.time() * 1000)
    values = draw(st.lists(st.binary(max_size=30), min_size=1, max_size=5))
    buf = bytearray(build_batch([Record(v, b"k", now) for v in values], compression=codec))
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(HEADER_SIZE, len(buf) - 1))
        buf[pos] ^= draw(st.integers(1, 255))
    return _recrc(buf)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches=st.lists(_mutated_batch(), min_size=1, max_size=2))
def test_mutated_batches_never_store_what_a_consumer_cannot_decode(
    env: Env, batches: list[bytes]
) -> None:
    """Whatever mutated batches a client sends, the leader keeps answering, and every
    batch it stored decodes with the consumer's codec."""
    topic = "mutations"
    if topic not in env.admin.list_topics(timeout_ms=API_TIMEOUT_MS):
        env.create_topic(topic)
    address = env.brokers[env.leader(topic)].address

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            for data in batches:
                await _produce_raw(session, address, topic, data)

    asyncio.run(run())
    stored = asyncio.run(_fetch_raw(address, topic))
    list(decode_batches(stored))  # raises CorruptMessageError on anything undecodable
