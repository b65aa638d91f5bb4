"""The process config: .properties and TOML files with Kafka's key names.

Each test writes a small file (or a string) and checks the parsed NodeConfig, or that a
mistake (unknown key, bad voters string, a controller not among the voters, a listener
on another port) is refused with a message naming what is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raftka.server_common.node_config import (
    SNAPSHOT_BYTES_DEFAULT,
    load_node_config,
    node_config_from_properties,
)
from raftka.server_common.process_config import (
    ConfigError,
    flatten_toml,
    parse_properties,
    parse_voters,
)

VOTERS = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"


def test_properties_file(tmp_path: Path) -> None:
    """A KRaft-style server.properties parses: comments, both separators, a continued
    line, quorum timeouts and controller settings reach their typed configs."""
    path = tmp_path / "controller.properties"
    continued = VOTERS.replace(",", ",\\\n  ", 1)  # a line continuation after voter 1
    path.write_text(
        "# a comment\n"
        "! another\n"
        "node.id=2\n"
        "process.roles: controller\n"
        f"controller.quorum.voters={continued}\n"
        "metadata.log.dir = /data/meta\n"
        "controller.quorum.election.timeout.ms=500\n"
        "broker.session.timeout.ms=3000\n"
        "quorum.engine=pysyncobj\n"
        "quorum.pysyncobj.password=s3cret\n"
    )
    config = load_node_config(path)
    assert config.node_id == 2
    assert config.process_roles == ("controller",)
    assert dict(config.voters) == {
        1: ("127.0.0.1", 9093),
        2: ("127.0.0.1", 9094),
        3: ("127.0.0.1", 9095),
    }
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 9094)
    assert (config.advertised_host, config.advertised_port) == ("127.0.0.1", 9094)
    assert config.metadata_log_dir == Path("/data/meta")
    assert config.quorum.election_timeout_ms == 500
    assert config.quorum.fetch_timeout_ms == 2000  # Kafka's default kept
    assert config.controller.broker_session_timeout_ms == 3000
    assert config.quorum_engine == "pysyncobj"
    assert config.pysyncobj_password == "s3cret"
    assert config.snapshot_bytes_between == SNAPSHOT_BYTES_DEFAULT
    assert config.address_of(3) == "127.0.0.1:9095"
    assert config.address_of(9) is None


def test_toml_file_flattens_tables(tmp_path: Path) -> None:
    """Nested TOML tables become dotted keys; lists join with commas; ints and bools
    are accepted as values."""
    path = tmp_path / "controller.toml"
    path.write_text(
        'node.id = 1\nprocess.roles = ["controller"]\nlisteners = "CONTROLLER://0.0.0.0:9093"\n'
        "[controller.quorum]\n"
        f'voters = "{VOTERS}"\n'
        "fetch.timeout.ms = 1500\n"
        "[metadata.log]\n"
        'dir = "/var/raftka"\n'
        "max.record.bytes.between.snapshots = 4096\n"
        "[auto.leader.rebalance]\nenable = false\n"
    )
    config = load_node_config(path)
    assert config.node_id == 1
    assert (config.listen_host, config.listen_port) == ("0.0.0.0", 9093)
    assert config.quorum.fetch_timeout_ms == 1500
    assert config.metadata_log_dir == Path("/var/raftka")
    assert config.snapshot_bytes_between == 4096
    assert config.controller.auto_leader_rebalance_enable is False
    assert flatten_toml({"a": {"b": [1, 2], "c": True}}) == {"a.b": "1,2", "a.c": "true"}


def _props(**overrides: str) -> dict[str, str]:
    base = {"node.id": "1", "controller.quorum.voters": VOTERS, "metadata.log.dir": "/d"}
    base.update({k.replace("_", "."): v for k, v in overrides.items()})
    return base


def test_listener_addresses_default_by_role() -> None:
    """A controller listens and advertises at its voter address unless told otherwise; a
    broker-only process must set listeners, and advertises them unless
    advertised.listeners says otherwise."""
    controller = node_config_from_properties(_props(process_roles="controller"))
    assert (controller.listen_host, controller.listen_port) == ("127.0.0.1", 9093)
    assert (controller.advertised_host, controller.advertised_port) == ("127.0.0.1", 9093)
    broker = {"node.id": "7", "process.roles": "broker", "controller.quorum.voters": VOTERS}
    broker["log.dirs"] = "/d"
    with pytest.raises(
        ConfigError, match=re.escape("b.properties: listeners is required for a broker-only")
    ):
        node_config_from_properties(broker, source="b.properties")
    broker["listeners"] = "PLAINTEXT://0.0.0.0:9092"
    config = node_config_from_properties(broker)
    assert (config.listen_host, config.listen_port) == ("0.0.0.0", 9092)
    assert (config.advertised_host, config.advertised_port) == ("0.0.0.0", 9092)
    broker["advertised.listeners"] = "PLAINTEXT://b7.example:19092"
    config = node_config_from_properties(broker)
    assert (config.advertised_host, config.advertised_port) == ("b7.example", 19092)


def test_unknown_key_is_named() -> None:
    """A typo is an error naming the key, not a silently ignored setting; a layer that
    knows more keys passes them as extra_keys."""
    with pytest.raises(
        ConfigError, match=re.escape("unknown config key 'broker.sesion.timeout.ms'")
    ):
        node_config_from_properties(_props(broker_sesion_timeout_ms="10"))
    with pytest.raises(ConfigError, match=re.escape("controller.quorum.electon")):
        node_config_from_properties(_props(controller_quorum_electon_timeout_ms="10"))
    config = node_config_from_properties(_props(num_io_threads="8"), extra_keys={"num.io.threads"})
    assert config.properties["num.io.threads"] == "8"


@pytest.mark.parametrize(
    ("voters", "message"),
    [
        ("", "no voters"),
        ("1@127.0.0.1", "host:port"),
        ("a@127.0.0.1:9093", "id@host:port"),
        ("127.0.0.1:9093", "id@host:port"),
        ("1@127.0.0.1:9093,1@127.0.0.1:9094", "listed twice"),
        ("1@127.0.0.1:9093,2@127.0.0.1:9093", "share one host:port"),
        ("1@127.0.0.1:70000", "outside 1..65535"),
    ],
)
def test_bad_voters(voters: str, message: str) -> None:
    """Every malformed voters string is refused with a hint at the expected form."""
    with pytest.raises(ConfigError, match=message):
        parse_voters(voters)


def test_controller_checks() -> None:
    """A controller must be a voter, serve on its voter port, and name a log dir; types
    and ranges of known keys are checked."""
    with pytest.raises(ConfigError, match=re.escape("not in controller.quorum.voters")):
        node_config_from_properties(_props(node_id="7"))
    with pytest.raises(ConfigError, match="differs from this node's voter port"):
        node_config_from_properties(_props(listeners="CONTROLLER://127.0.0.1:9999"))
    with pytest.raises(ConfigError, match=r"metadata.log.dir \(or log.dirs\) is required"):
        node_config_from_properties({"node.id": "1", "controller.quorum.voters": VOTERS})
    with pytest.raises(ConfigError, match=re.escape("node.id must be an integer")):
        node_config_from_properties(_props(node_id="one"))
    with pytest.raises(
        ConfigError, match=re.escape("broker.session.timeout.ms must be an integer")
    ):
        node_config_from_properties(_props(broker_session_timeout_ms="soon"))
    with pytest.raises(ConfigError, match=re.escape("quorum.engine must be native or pysyncobj")):
        node_config_from_properties(_props(quorum_engine="zookeeper"))
    with pytest.raises(ConfigError, match=re.escape("process.roles")):
        node_config_from_properties(_props(process_roles="controller,zookeeper"))
    config = node_config_from_properties(
        {"node.id": "1", "controller.quorum.voters": VOTERS, "log.dirs": "/a,/b"}
    )
    assert config.metadata_log_dir == Path("/a")


def test_controller_listener_names_on_one_role_processes() -> None:
    """Kafka's rules: a controller's listener must be one controller.listener.names
    names (its default listener name is CONTROLLER, and a renamed one is checked in
    the user's spelling); a broker-only process may not serve one of those names."""
    names = "controller.listener.names"
    node_config_from_properties(_props(controller_listener_names="CONTROLLER"))
    node_config_from_properties({**_props(listeners="CTRL://127.0.0.1:9093"), names: "OTHER,ctrl"})
    with pytest.raises(ConfigError, match=r"does not name this controller's listener CTRL"):
        node_config_from_properties({**_props(listeners="CTRL://127.0.0.1:9093"), names: "X"})
    with pytest.raises(ConfigError, match=r"\(RAFT\) does not name .* listener QUORUM$"):
        node_config_from_properties(
            {
                **_props(listeners="QUORUM://127.0.0.1:9093"),
                "listener.security.protocol.map": "QUORUM:PLAINTEXT,RAFT:PLAINTEXT",
                names: "RAFT",
            }
        )
    broker = {
        "node.id": "7",
        "process.roles": "broker",
        "controller.quorum.voters": VOTERS,
        "log.dirs": "/d",
        "listeners": "HTTP://127.0.0.1:8080",
    }
    node_config_from_properties({**broker, names: "CONTROLLER"})
    with pytest.raises(ConfigError, match=r"names a listener of this broker \(HTTP\)"):
        node_config_from_properties({**broker, names: "CONTROLLER,HTTP"})


def test_properties_syntax_errors(tmp_path: Path) -> None:
    """A key set twice and an unreadable or invalid file are errors naming the file."""
    with pytest.raises(ConfigError, match="set twice"):
        parse_properties("a=1\na=2\n", source="x.properties")
    assert parse_properties("a b\nc:d\ne=\n") == {"a": "b", "c": "d", "e": ""}
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_node_config(tmp_path / "missing.properties")
    bad = tmp_path / "bad.toml"
    bad.write_text("node.id = = 1\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_node_config(bad)
