"""The connector's pure cores: option parsing, offset JSON, planning, commit markers.

No Spark and no sockets: options go in as the string mappings Spark passes, and each
bad option must fail with a SparkOptionError whose message names that option.
"""

from __future__ import annotations

import pytest

from raftka.client.spark.commit_log import (
    CommitMarker,
    decode_marker,
    encode_marker,
    last_committed,
)
from raftka.client.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetsJsonError,
    from_offset_dict,
    parse_assign_json,
    parse_offsets_json,
    to_offset_dict,
)
from raftka.client.spark.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    SparkOptionError,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)
from raftka.client.spark.planning import (
    DataLossError,
    OffsetRange,
    TriggerLimit,
    next_end,
    plan_ranges,
    split_read_limit,
)
from raftka.client.structs import TopicPartition

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
BASE = {"bootstrap.servers": "127.0.0.1:9096"}


def test_tls_settings_reach_every_client_of_source_and_sink() -> None:
    """kafka.security.protocol and kafka.ssl.* (the names of --command-config) become
    the clients' TLS keywords, for the source's and the sink's clients alike; Java key
    stores and SASL are refused by name."""
    tls = {
        "kafka.security.protocol": "ssl",
        "kafka.ssl.cafile": "/tls/ca.pem",
        "kafka.ssl.certfile": "/tls/app.pem",
        "kafka.ssl.keyfile": "/tls/app-key.pem",
        "kafka.ssl.key.password": "pw",
        "kafka.ssl.endpoint.identification.algorithm": "",
    }
    expected = {
        "security_protocol": "SSL",
        "ssl_cafile": "/tls/ca.pem",
        "ssl_certfile": "/tls/app.pem",
        "ssl_keyfile": "/tls/app-key.pem",
        "ssl_password": "pw",
        "ssl_check_hostname": False,
    }
    source = parse_source_options({**BASE, "subscribe": "a", **tls}, streaming=True)
    assert source.security == expected and source.consumer == {}
    assert source.connection == {"bootstrap_servers": BASE["bootstrap.servers"], **expected}
    sink = parse_sink_options({**BASE, **tls})
    assert sink.security == expected and sink.producer == {}
    assert sink.connection == {"bootstrap_servers": BASE["bootstrap.servers"], **expected}
    for name, hint in (
        ("kafka.ssl.truststore.location", "use kafka.ssl.cafile"),
        ("kafka.ssl.keystore.password", "use kafka.ssl.key.password"),
        ("kafka.sasl.mechanism", "security.protocol is PLAINTEXT, nothing uses it"),
        ("kafka.sasl.kerberos.service.name", "logs in with kafka.sasl.mechanism and"),
        ("kafka.security.protocol", "expected PLAINTEXT, SSL or SASL_SSL"),
        ("kafka.ssl.endpoint.identification.algorithm", "https or empty"),
    ):
        with pytest.raises(SparkOptionError, match=rf"{name}.*{hint}"):
            parse_sink_options({**BASE, name: "x"})


_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="se\\"cret";'
)


def test_sasl_ssl_takes_kafkas_mechanism_and_jaas_line() -> None:
    sasl = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.cafile": "/tls/ca.pem",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": _JAAS,
    }
    sink = parse_sink_options({**BASE, **sasl})
    assert sink.security == {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": "/tls/ca.pem",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": 'se"cret',
    }
    for change, hint in (
        ({"kafka.sasl.mechanism": None}, "GSSAPI.*set it"),
        ({"kafka.sasl.jaas.config": None}, "SASL_SSL needs the login"),
        ({"kafka.sasl.mechanism": "PLAIN"}, "PLAIN logs in with .*PlainLoginModule"),
        ({"kafka.sasl.jaas.config": _JAAS.replace("required", "optional")}, "'required'"),
        ({"kafka.sasl.jaas.config": _JAAS.rstrip(";")}, "ends with ';'"),
    ):
        options = {k: v for k, v in {**BASE, **sasl, **change}.items() if v is not None}
        with pytest.raises(SparkOptionError, match=hint):
            parse_sink_options(options)


def test_source_defaults_and_case_insensitive_names() -> None:
    """Spark matches option names without case: SUBSCRIBE and maxoffsetspertrigger work;
    streaming starts at latest, batch at earliest and ends at latest."""
    stream = parse_source_options(
        {**BASE, "SUBSCRIBE": "a, b", "maxoffsetspertrigger": "100"}, streaming=True
    )
    assert stream.subscription.topics == ("a", "b")
    assert stream.starting.kind == "latest" and stream.max_offsets_per_trigger == 100
    assert stream.fail_on_data_loss and not stream.include_headers
    assert stream.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS
    batch = parse_source_options({**BASE, "subscribe": "a"}, streaming=False)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")


def test_kafka_prefixed_settings_pass_to_the_client() -> None:
    """kafka.bootstrap.servers is accepted; kafka.<setting> becomes the client's keyword
    argument with its type; an unknown or connector-managed one is refused by name."""
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribe": "a",
            "kafka.max.partition.fetch.bytes": "4096",
            "kafka.check.crcs": "false",
        },
        streaming=True,
    )
    assert opts.bootstrap_servers == "h:1"
    assert opts.consumer == {"max_partition_fetch_bytes": 4096, "check_crcs": False}
    sink = parse_sink_options({**BASE, "kafka.acks": "1", "kafka.linger.ms": "20"})
    assert sink.producer == {"acks": 1, "linger_ms": 20} and sink.replay_protection
    for name in ("kafka.group.id", "kafka.no.such.setting"):
        with pytest.raises(SparkOptionError, match=name):
            parse_source_options({**BASE, "subscribe": "a", name: "x"}, streaming=True)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "a", "subscribePattern": "a.*"}, "subscribePattern"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "assign"),
        ({}, "subscribe"),
        ({"subscribePattern": "(unclosed"}, "subscribePattern"),
        ({"assign": '{"a": [0, "x"]}'}, "assign"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": }'}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'}, "startingOffsets"),
        ({"subscribe": "a", "endingOffsets": '{"a": {"x": 1}}'}, "endingOffsets"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "minOffsetsPerTrigger": "many"}, "minOffsetsPerTrigger"),
        ({"subscribe": "a", "maxTriggerDelay": "soon"}, "maxTriggerDelay"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "a", "startingTimestamp": "-5"}, "startingTimestamp"),
        ({"subscribe": "a", "isolation.level": "serializable"}, "isolation.level"),
        (
            {
                "subscribe": "a",
                "isolation.level": "read_committed",
                "kafka.isolation.level": "read_uncommitted",
            },
            "disagree",
        ),
        ({"subscribe": "a", "kafka.transactional.id": "t"}, "kafka.transactional.id"),
        ({"assign": '{"a": [0]}', "startingOffsets": '{"a": {"1": 0}}'}, "startingOffsets"),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions"),
        ({"subscribe": "a", "maxRecordsPerPartition": "lots"}, "maxRecordsPerPartition"),
        # Unknown options, and Spark's Kafka options the connector does not offer, are
        # refused by name as given, never silently ignored.
        ({"subscribe": "a", "maxOffsetPerTrigger": "5"}, "maxOffsetPerTrigger is not one"),
        ({"subscribe": "a", "groupIdPrefix": "g"}, "groupIdPrefix is not supported"),
        ({"subscribe": "a", "endingTimestamp": "5"}, "endingTimestamp is not supported"),
        ({"subscribe": "a", "fetchOffset.numRetries": "3"}, "fetchOffset.numRetries"),
    ],
)
def test_bad_batch_options_name_the_option(options: dict[str, str], named: str) -> None:
    """Each malformed or contradictory option fails, naming itself."""
    with pytest.raises(SparkOptionError, match=named):
        parse_source_options({**BASE, **options}, streaming=False)


def test_streaming_only_rules() -> None:
    """endingOffsets is refused in streaming; latest (-1) is a valid streaming start."""
    with pytest.raises(SparkOptionError, match="endingOffsets"):
        parse_source_options({**BASE, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    opts = parse_source_options(
        {**BASE, "subscribe": "a", "startingOffsets": '{"a": {"0": -1, "1": 7}}'}, streaming=True
    )
    assert opts.starting.for_partition(TopicPartition("a", 0)) == LATEST
    assert opts.starting.for_partition(TopicPartition("a", 1)) == 7
    assert opts.starting.for_partition(TopicPartition("a", 2)) == EARLIEST  # not named


def test_isolation_level_either_name() -> None:
    """read_committed through Spark's isolation.level or kafka.isolation.level; the
    default stays read_uncommitted."""
    for key in ("isolation.level", "kafka.isolation.level", "Kafka.Isolation.Level"):
        opts = parse_source_options(
            {**BASE, "subscribe": "a", key: " READ_COMMITTED "}, streaming=True
        )
        assert opts.isolation_level == "read_committed"
        assert opts.consumer == {}  # handled by the connector, not passed through
    assert parse_source_options({**BASE, "subscribe": "a"}, streaming=True).isolation_level == (
        "read_uncommitted"
    )


def test_sink_transactional_id_prefix_and_its_contradictions() -> None:
    """kafka.transactional.id turns on transactional mode (kept as a prefix, not passed
    to the producer); settings it cannot work with are refused by name."""
    opts = parse_sink_options({**BASE, "kafka.transactional.id": " etl "})
    assert opts.transactional_id_prefix == "etl"
    assert "transactional_id" not in opts.producer
    assert parse_sink_options(BASE).transactional_id_prefix is None
    timed = parse_sink_options(
        {**BASE, "kafka.transactional.id": "t", "kafka.transaction.timeout.ms": "300000"}
    )
    assert timed.producer == {"transaction_timeout_ms": 300_000}
    for extra, named in (
        ({"kafka.transactional.id": " "}, "kafka.transactional.id"),
        ({"kafka.transactional.id": "t", "replayProtection": "false"}, "replayProtection"),
        ({"kafka.transactional.id": "t", "kafka.enable.idempotence": "false"}, "idempotence"),
        ({"kafka.transactional.id": "t", "kafka.acks": "1"}, "acks"),
        ({"kafka.transaction.timeout.ms": "1000"}, "kafka.transaction.timeout.ms"),
    ):
        with pytest.raises(SparkOptionError, match=named):
            parse_sink_options({**BASE, **extra})


def test_missing_bootstrap_and_sink_topic_option() -> None:
    """No bootstrap servers: refused by name; the sink's topic option is kept."""
    with pytest.raises(SparkOptionError, match=r"bootstrap\.servers"):
        parse_source_options({"subscribe": "a"}, streaming=True)
    with pytest.raises(SparkOptionError, match="disagree"):
        parse_sink_options({"bootstrap.servers": "a:1", "kafka.bootstrap.servers": "b:1"})
    assert parse_sink_options({**BASE, "topic": " out "}).topic == "out"


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250", 250), ("250ms", 250), ("30s", 30_000), ("15m", 900_000), ("2 hours", 7_200_000)],
)
def test_durations(text: str, ms: int) -> None:
    """Spark's duration strings, a bare number being milliseconds."""
    assert parse_duration_ms(text, option="maxTriggerDelay") == ms


def test_offset_json_round_trip_in_stable_order() -> None:
    """Streaming offsets print topics by name and partitions by number (10 after 2),
    whatever order they were built in, and read back equal."""
    offsets = {
        TopicPartition("b", 10): 1,
        TopicPartition("b", 2): 5,
        TopicPartition("a", 0): 0,
    }
    as_dict = to_offset_dict(offsets)
    assert list(as_dict) == ["a", "b"] and list(as_dict["b"]) == ["2", "10"]
    assert from_offset_dict(as_dict) == offsets
    assert parse_offsets_json('{"a": {"0": 3, "1": -2}}') == {
        TopicPartition("a", 0): 3,
        TopicPartition("a", 1): EARLIEST,
    }
    assert parse_assign_json('{"b": [1, 0], "a": [2]}') == [
        TopicPartition("a", 2),
        TopicPartition("b", 0),
        TopicPartition("b", 1),
    ]
    for bad in ("[]", "{}", '{"a": [0]}', '{"a": {"01": 1}}', '{"a": {"0": 1.5}}', "nope"):
        with pytest.raises(OffsetsJsonError):
            parse_offsets_json(bad)


def test_split_read_limit_is_proportional_to_backlog() -> None:
    """100 records shared over backlogs 600 / 300 / 100 is 60 / 30 / 10; rounding leftovers
    go to the largest remainders; a limit above the backlog reads everything."""
    start = {T0: 0, T1: 10, T2: 5}
    latest = {T0: 600, T1: 310, T2: 105}
    assert split_read_limit(start, latest, 100) == {T0: 60, T1: 40, T2: 15}
    assert split_read_limit(start, {T0: 2, T1: 11, T2: 6}, 2) == {T0: 1, T1: 11, T2: 5}
    assert split_read_limit(start, latest, 10_000) == latest


def test_next_end_min_max_and_available_now() -> None:
    """minOffsetsPerTrigger waits (None) until enough records or maxTriggerDelay passed;
    the availableNow target caps the end and holds back partitions born after it; a new
    partition starts at its earliest offset."""
    start = {T0: 10, T1: 10}
    latest = {T0: 15, T1: 12, T2: 4}
    earliest = {T2: 1}
    wait = TriggerLimit(min_offsets=20, max_trigger_delay_ms=1000)
    assert (
        next_end(start, latest, earliest, limit=wait, target=None, last_trigger_ms=0, now_ms=999)
        is None
    )
    assert next_end(
        start, latest, earliest, limit=wait, target=None, last_trigger_ms=0, now_ms=1000
    ) == {
        T0: 15,
        T1: 12,
        T2: 4,
    }
    capped = next_end(
        start,
        latest,
        earliest,
        limit=TriggerLimit(),
        target={T0: 13, T1: 12},
        last_trigger_ms=0,
        now_ms=0,
    )
    assert capped == {T0: 13, T1: 12}
    limited = next_end(
        start,
        latest,
        earliest,
        limit=TriggerLimit(max_offsets=5),
        target=None,
        last_trigger_ms=0,
        now_ms=0,
    )
    assert (
        limited is not None and sum(limited[tp] - {**earliest, **start}[tp] for tp in limited) == 5
    )
    assert (
        next_end(
            start,
            {T0: 10, T1: 10},
            {},
            limit=TriggerLimit(),
            target=None,
            last_trigger_ms=0,
            now_ms=0,
        )
        is None
    )


def test_plan_ranges_and_data_loss() -> None:
    """Ranges cover [start, end) per partition (new ones from earliest); a vanished
    partition, a backwards end or deleted records raise DataLossError, or are skipped
    with a warning when failOnDataLoss=false."""
    ranges, problems = plan_ranges({T0: 3}, {T0: 7, T1: 2}, {T0: 0, T1: 1}, fail_on_data_loss=True)
    assert ranges == [OffsetRange("t", 0, 3, 7), OffsetRange("t", 1, 1, 2)] and problems == []
    lossy = [
        ({T0: 3, T1: 0}, {T0: 5}, {T0: 0}),  # T1 vanished
        ({T0: 8}, {T0: 5}, {T0: 0}),  # offsets went backwards
        ({T0: 2}, {T0: 9}, {T0: 4}),  # 2..3 deleted by retention
    ]
    for start, end, earliest in lossy:
        with pytest.raises(DataLossError, match="failOnDataLoss"):
            plan_ranges(start, end, earliest, fail_on_data_loss=True)
        _, problems = plan_ranges(start, end, earliest, fail_on_data_loss=False)
        assert len(problems) == 1
    ranges, _ = plan_ranges({T0: 2}, {T0: 9}, {T0: 4}, fail_on_data_loss=False)
    assert ranges == [OffsetRange("t", 0, 4, 9)]


def test_commit_markers_fold_to_the_last_batch_per_query() -> None:
    """Markers round-trip through their record bytes; the fold keeps each query's highest
    batch; a record that is not a marker is ignored."""
    markers = [
        CommitMarker(query_id=q, batch_id=b, records=1, committed_ms=5)
        for q, b in (("q1", 0), ("q2", 4), ("q1", 1))
    ]
    decoded = [decode_marker(encode_marker(m)[1]) for m in markers]
    assert decoded == markers
    assert encode_marker(markers[0])[0] == b"q1"
    assert last_committed([m for m in decoded if m is not None], {}) == {"q1": 1, "q2": 4}
    assert decode_marker(b"not json") is None and decode_marker(b'{"version": 99}') is None


def test_min_partitions_and_max_records_per_partition() -> None:
    """Spark's names, any case; unset: None (one input partition per Kafka partition)."""
    opts = parse_source_options(
        {**BASE, "subscribe": "a", "MINPARTITIONS": "4", "maxRecordsPerPartition": "1000"},
        streaming=True,
    )
    assert (opts.min_partitions, opts.max_records_per_partition) == (4, 1000)
    plain = parse_source_options({**BASE, "subscribe": "a"}, streaming=False)
    assert (plain.min_partitions, plain.max_records_per_partition) == (None, None)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topc": "t"}, "topc is not one the raftka sink takes"),
        ({"topic": "t", "path": "/tmp/x"}, "path is not supported"),
    ],
)
def test_sink_refuses_unknown_options_by_name(options: dict[str, str], named: str) -> None:
    """A typo or a path is refused, not ignored; Spark's own checkpointLocation (which
    it passes to a streaming sink) is taken."""
    with pytest.raises(SparkOptionError, match=named):
        parse_sink_options({**BASE, **options})
    parse_sink_options({**BASE, "topic": "t", "checkpointLocation": "/tmp/cp"})
