"""Typed, versioned cluster-metadata records and their JSON codec.

Theory of operation
-------------------
The metadata log is a sequence of small records; replaying them in log order, from an
empty image or from a snapshot, rebuilds the cluster's state (see ``delta.py``). Each
record is a frozen dataclass whose class carries its ``type`` name and ``version``
(Kafka's record names, fields trimmed to what raftka needs). On the wire and on disk a
record is one JSON object::

    {"type": "PartitionRecord", "version": 0, "data": {"partition_id": 0, ...}}

Every record checks its own fields when it is built (``__post_init__``), so a record the
controller creates and a record decoded from bytes pass the same gate: types (an int is
never a bool), integer widths (int8/int32/int64 as Kafka's schema), UUID syntax, and the
invariants that need no other state (``isr`` within ``replicas``, no duplicate replicas).
Lists are normalised to tuples so records compare and hash by value. Anything wrong
raises :class:`MetadataRecordError` (Kafka's ``INVALID_REQUEST``), never a bare
``KeyError`` or ``TypeError``. Checks that need the current image (does this topic
exist?) belong to the delta.

Decoding is strict: unknown record types, versions above the one we write, unknown
fields and missing required fields are all errors. A field that has a default may be
omitted, which is how a later version can add fields that older writers never wrote.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import hashlib
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal, NamedTuple, TypeAlias

import orjson

from raftka.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from raftka.common.errors import InvalidRequestError
from raftka.common.scram import ITERATIONS_MAX, ITERATIONS_MIN, SALT_BYTES_MIN, SCRAM_MECHANISMS

__all__ = [
    "FENCE",
    "IN_CONTROLLED_SHUTDOWN",
    "NO_CHANGE",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "RECORD_TYPES",
    "UNFENCE",
    "AccessControlEntryRecord",
    "BrokerRegistrationChangeRecord",
    "ConfigRecord",
    "ConfigResourceType",
    "Endpoint",
    "MetadataRecord",
    "MetadataRecordError",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveAccessControlEntryRecord",
    "RemoveTopicRecord",
    "RemoveUserScramCredentialRecord",
    "TopicRecord",
    "UnregisterBrokerRecord",
    "UserScramCredentialRecord",
    "assignment_problem",
    "decode_record",
    "decode_records",
    "encode_record",
    "encode_records",
    "record_from_dict",
]

# Partition leader sentinels, as Kafka's LeaderConstants.
NO_LEADER: Final = -1
NO_LEADER_CHANGE: Final = -2

# BrokerRegistrationChangeRecord.fenced (Kafka's BrokerRegistrationFencingChange).
FENCE: Final = 1
NO_CHANGE: Final = 0
UNFENCE: Final = -1
# BrokerRegistrationChangeRecord.in_controlled_shutdown
# (Kafka's BrokerRegistrationInControlledShutdownChange). There is no "clear" value, as
# in Kafka: a broker leaves controlled shutdown by registering again or unregistering.
IN_CONTROLLED_SHUTDOWN: Final = 1

ConfigResourceType: TypeAlias = Literal["topic", "broker"]

_INT8 = (-(2**7), 2**7 - 1)
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_PORT = (0, 65535)
# A bound on a decoded record, so one corrupt length cannot make us build a huge object.
RECORD_BYTES_MAX: Final = 16 * 1024 * 1024
# A bound on a decoded record list (a snapshot: the whole image). Far above one record's:
# 100,000 partitions of RF 3 encode to ~29 MB, which RECORD_BYTES_MAX refused, so a
# controller could write a snapshot it then could not load.
RECORD_LIST_BYTES_MAX: Final = 1024 * 1024 * 1024


class MetadataRecordError(InvalidRequestError):
    """A metadata record is malformed: bad JSON, unknown type or version, a field missing,
    unknown or of the wrong type, or an invariant that needs no other state broken."""


class Endpoint(NamedTuple):
    """A listener a broker registered: its name (``PLAINTEXT``), host and port."""

    name: str
    host: str
    port: int


# ---------------------------------------------------------------------------------------
# Field kinds: each checks (and normalises) one value, raising MetadataRecordError.

_Kind: TypeAlias = Callable[[object, str], object]


def _fail(where: str, expected: str, value: object) -> MetadataRecordError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return MetadataRecordError(f"{where}: expected {expected}, got {shown}")


def _int_kind(bounds: tuple[int, int], label: str, min_value: int | None = None) -> _Kind:
    low = bounds[0] if min_value is None else min_value

    def check(value: object, where: str) -> object:
        # bool is an int in Python; a JSON true must not pass as broker id 1.
        if type(value) is not int or not low <= value <= bounds[1]:
            raise _fail(where, f"{label} in [{low}, {bounds[1]}]", value)
        return value

    return check


def _bool(value: object, where: str) -> object:
    if type(value) is not bool:
        raise _fail(where, "a boolean", value)
    return value


def _str(value: object, where: str) -> object:
    if type(value) is not str:
        raise _fail(where, "a string", value)
    return value


def _nonempty_str(value: object, where: str) -> object:
    if type(value) is not str or not value:
        raise _fail(where, "a non-empty string", value)
    return value


def _optional(kind: _Kind) -> _Kind:
    def check(value: object, where: str) -> object:
        return None if value is None else kind(value, where)

    return check


def _uuid(value: object, where: str) -> object:
    if type(value) is not str:
        raise _fail(where, "a UUID string", value)
    try:
        canonical = str(uuid.UUID(value))
    except ValueError:
        raise _fail(where, "a UUID string", value) from None
    # One spelling per id, so ids compare as strings.
    if canonical != value:
        raise _fail(where, f"a canonical lowercase UUID ({canonical})", value)
    return value


def _int_list(element: _Kind, distinct: bool = True) -> _Kind:
    def check(value: object, where: str) -> object:
        if not isinstance(value, list | tuple):
            raise _fail(where, "a list of integers", value)
        items = tuple(element(item, f"{where}[{i}]") for i, item in enumerate(value))
        if distinct and len(set(items)) != len(items):
            raise _fail(where, "distinct values", value)
        return items

    return check


def _endpoints(value: object, where: str) -> object:
    if not isinstance(value, list | tuple):
        raise _fail(where, "a list of endpoints", value)
    out: list[Endpoint] = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if isinstance(item, Endpoint):
            fields: Mapping[str, object] = item._asdict()
        elif isinstance(item, dict) and set(item) == {"name", "host", "port"}:
            fields = item
        else:
            raise _fail(at, "an endpoint {name, host, port}", item)
        name = _nonempty_str(fields["name"], f"{at}.name")
        host = _nonempty_str(fields["host"], f"{at}.host")
        port = _PORT_KIND(fields["port"], f"{at}.port")
        assert isinstance(name, str) and isinstance(host, str) and isinstance(port, int)
        out.append(Endpoint(name, host, port))
    if len({e.name for e in out}) != len(out):
        raise _fail(where, "endpoints with distinct names", value)
    return tuple(out)


def _resource_type(value: object, where: str) -> object:
    if value not in ("topic", "broker") or type(value) is not str:
        raise _fail(where, '"topic" or "broker"', value)
    return value


def _one_of(*allowed: int) -> _Kind:
    def check(value: object, where: str) -> object:
        if type(value) is not int or value not in allowed:
            raise _fail(where, f"one of {allowed}", value)
        return value

    return check


def _bytes(value: object, where: str) -> object:
    """Bytes; in JSON a base64 string (as Kafka's JSON form of a bytes field)."""
    if isinstance(value, bytes):
        return value
    if type(value) is not str:
        raise _fail(where, "base64 bytes", value)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _fail(where, "base64 bytes", value) from None


def _scram_mechanism(value: object, where: str) -> object:
    if type(value) is not str or value not in SCRAM_MECHANISMS:
        raise _fail(where, f"one of {', '.join(SCRAM_MECHANISMS)}", value)
    return value


_PORT_KIND: Final = _int_kind(_PORT, "a port")
_INT32_KIND: Final = _int_kind(_INT32, "an int32")
_BROKER_ID: Final = _int_kind(_INT32, "a broker id (int32)", min_value=0)
_PARTITION_ID: Final = _int_kind(_INT32, "a partition id (int32)", min_value=0)
_EPOCH32: Final = _int_kind(_INT32, "an epoch (int32)", min_value=0)
_EPOCH64: Final = _int_kind(_INT64, "an epoch (int64)", min_value=0)
_REPLICAS: Final = _int_list(_BROKER_ID)
_LEADER: Final = _int_kind(_INT32, "a leader id (int32, -1 for none)", min_value=NO_LEADER)
_CHANGE_LEADER: Final = _int_kind(
    _INT32, "a leader id (int32, -1 for none, -2 for no change)", min_value=NO_LEADER_CHANGE
)


# ---------------------------------------------------------------------------------------
# Records


class _Record:
    """What every record shares: its field kinds, validation, and the dict form."""

    __slots__ = ()
    type: ClassVar[str]
    version: ClassVar[int] = 0
    # The highest version this code reads; it writes ``version``.
    _KINDS: ClassVar[Mapping[str, _Kind]]

    def __post_init__(self) -> None:
        for name, kind in self._KINDS.items():
            value = getattr(self, name)
            checked = kind(value, f"{self.type}.{name}")
            if checked is not value:
                object.__setattr__(self, name, checked)
        self._check()

    def _check(self) -> None:
        """Invariants across fields; each record overrides where it has some."""

    def _error(self, message: str) -> MetadataRecordError:
        return MetadataRecordError(f"{self.type}: {message}")

    def data(self) -> dict[str, Any]:
        """The record's fields as JSON-ready values (tuples become lists)."""
        out: dict[str, Any] = {}
        for name in self._KINDS:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = [v._asdict() if isinstance(v, Endpoint) else v for v in value]
            elif isinstance(value, bytes):
                value = base64.b64encode(value).decode("ascii")
            out[name] = value
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "version": self.version, "data": self.data()}


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(_Record):
    """A broker registered (or registered again, replacing its old registration).

    ``broker_epoch`` is the controller-assigned epoch of this registration (Kafka uses
    the record's offset); a new registration clears ``in_controlled_shutdown``.
    """

    type: ClassVar[str] = "RegisterBrokerRecord"
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "broker_id": _BROKER_ID,
        "incarnation_id": _uuid,
        "broker_epoch": _EPOCH64,
        "endpoints": _endpoints,
        "rack": _optional(_str),
        "fenced": _bool,
        "in_controlled_shutdown": _bool,
    }


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord(_Record):
    """A broker's registration was removed (Kafka's UnregisterBroker API)."""

    type: ClassVar[str] = "UnregisterBrokerRecord"
    broker_id: int
    broker_epoch: int

    _KINDS: ClassVar[Mapping[str, _Kind]] = {"broker_id": _BROKER_ID, "broker_epoch": _EPOCH64}


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord(_Record):
    """A registered broker was fenced, unfenced, or entered controlled shutdown.

    ``fenced``: FENCE (1), NO_CHANGE (0) or UNFENCE (-1); ``in_controlled_shutdown``:
    NO_CHANGE (0) or IN_CONTROLLED_SHUTDOWN (1). Both are Kafka's int8 encodings.
    """

    type: ClassVar[str] = "BrokerRegistrationChangeRecord"
    broker_id: int
    broker_epoch: int
    fenced: int = NO_CHANGE
    in_controlled_shutdown: int = NO_CHANGE

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "broker_id": _BROKER_ID,
        "broker_epoch": _EPOCH64,
        "fenced": _one_of(UNFENCE, NO_CHANGE, FENCE),
        "in_controlled_shutdown": _one_of(NO_CHANGE, IN_CONTROLLED_SHUTDOWN),
    }


@dataclass(frozen=True, slots=True)
class TopicRecord(_Record):
    """A topic was created: its name and its id (a UUID that is never reused)."""

    type: ClassVar[str] = "TopicRecord"
    name: str
    topic_id: str

    _KINDS: ClassVar[Mapping[str, _Kind]] = {"name": _nonempty_str, "topic_id": _uuid}


def assignment_problem(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    removing_replicas: tuple[int, ...],
    adding_replicas: tuple[int, ...],
    leader: int,
) -> str | None:
    """What is wrong with a partition's replica assignment, or None when it is sound.
    Shared by PartitionRecord and the delta (which checks a partition after a change)."""
    members = set(replicas)
    if not members:
        return "replicas must not be empty"
    if not set(isr) <= members:
        return f"isr {list(isr)} is not within replicas {list(replicas)}"
    if not set(removing_replicas) <= members or not set(adding_replicas) <= members:
        return "removing_replicas and adding_replicas must be within replicas"
    if set(removing_replicas) & set(adding_replicas):
        return "a replica cannot be both adding and removing"
    if leader != NO_LEADER and leader not in members:
        return f"leader {leader} is not one of replicas {list(replicas)}"
    return None


@dataclass(frozen=True, slots=True)
class PartitionRecord(_Record):
    """A partition's full registration: on creation, and in snapshots."""

    type: ClassVar[str] = "PartitionRecord"
    partition_id: int
    topic_id: str
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "partition_id": _PARTITION_ID,
        "topic_id": _uuid,
        "replicas": _REPLICAS,
        "isr": _REPLICAS,
        "removing_replicas": _REPLICAS,
        "adding_replicas": _REPLICAS,
        "leader": _LEADER,
        "leader_epoch": _EPOCH32,
        "partition_epoch": _EPOCH32,
        "eligible_leader_replicas": _optional(_REPLICAS),
        "last_known_elr": _optional(_REPLICAS),
    }

    def _check(self) -> None:
        problem = assignment_problem(
            self.replicas, self.isr, self.removing_replicas, self.adding_replicas, self.leader
        )
        if problem is not None:
            raise self._error(problem)


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord(_Record):
    """A change to one partition; ``None`` (or NO_LEADER_CHANGE for ``leader``) keeps
    the current value. Replaying one always bumps ``partition_epoch``, and bumps
    ``leader_epoch`` whenever ``leader`` is not NO_LEADER_CHANGE (Kafka's rule: naming
    the same leader again is how the controller forces a new leader epoch)."""

    type: ClassVar[str] = "PartitionChangeRecord"
    partition_id: int
    topic_id: str
    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "partition_id": _PARTITION_ID,
        "topic_id": _uuid,
        "isr": _optional(_REPLICAS),
        "leader": _CHANGE_LEADER,
        "replicas": _optional(_REPLICAS),
        "removing_replicas": _optional(_REPLICAS),
        "adding_replicas": _optional(_REPLICAS),
        "eligible_leader_replicas": _optional(_REPLICAS),
        "last_known_elr": _optional(_REPLICAS),
    }


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord(_Record):
    """A topic was deleted, with its partitions and its configs."""

    type: ClassVar[str] = "RemoveTopicRecord"
    topic_id: str

    _KINDS: ClassVar[Mapping[str, _Kind]] = {"topic_id": _uuid}


@dataclass(frozen=True, slots=True)
class ConfigRecord(_Record):
    """One config key of a topic or broker was set, or deleted when ``value`` is None.

    ``resource_name`` is the topic name, or the broker id as a string ("" for the
    cluster-wide broker default, as Kafka).
    """

    type: ClassVar[str] = "ConfigRecord"
    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str | None

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "resource_type": _resource_type,
        "resource_name": _str,
        "name": _nonempty_str,
        "value": _optional(_str),
    }

    def _check(self) -> None:
        if self.resource_type == "topic" and not self.resource_name:
            raise self._error("a topic config needs a topic name")
        if self.resource_type == "broker" and self.resource_name:
            try:
                broker_id = int(self.resource_name)
            except ValueError:
                broker_id = -1
            if broker_id < 0 or str(broker_id) != self.resource_name:
                raise self._error(
                    f"broker resource name must be a broker id or '', got {self.resource_name!r}"
                )


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord(_Record):
    """The controller handed out a block of producer ids; ``next_producer_id`` is the
    first id of the next block. Snapshots write broker -1, epoch -1 (as Kafka)."""

    type: ClassVar[str] = "ProducerIdsRecord"
    broker_id: int
    broker_epoch: int
    next_producer_id: int

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "broker_id": _int_kind(_INT32, "a broker id (int32, -1 for none)", min_value=-1),
        "broker_epoch": _int_kind(_INT64, "an epoch (int64, -1 for none)", min_value=-1),
        "next_producer_id": _int_kind(_INT64, "a producer id (int64)", min_value=0),
    }


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord(_Record):
    """A user's SCRAM credential for one mechanism was set (Kafka's record of this
    name): what RFC 5802 keeps of a password, never the password. ``salt``,
    ``stored_key`` and ``server_key`` are base64 in JSON. Kafka stores the mechanism
    as an int8; raftka's JSON records name it (``SCRAM-SHA-256``)."""

    type: ClassVar[str] = "UserScramCredentialRecord"
    name: str
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "name": _nonempty_str,
        "mechanism": _scram_mechanism,
        "salt": _bytes,
        "stored_key": _bytes,
        "server_key": _bytes,
        "iterations": _int_kind((ITERATIONS_MIN, ITERATIONS_MAX), "an iteration count"),
    }

    def _check(self) -> None:
        # Every node builds a ScramCredential from this record on replay, so the record
        # holds whatever that needs: a salt and keys of the mechanism's hash length.
        size = hashlib.new(SCRAM_MECHANISMS[self.mechanism]).digest_size
        if len(self.salt) < SALT_BYTES_MIN:
            raise self._error(f"salt must be at least {SALT_BYTES_MIN} bytes")
        if len(self.stored_key) != size or len(self.server_key) != size:
            raise self._error(f"{self.mechanism} keys must be {size} bytes")


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord(_Record):
    """A user's SCRAM credential for one mechanism was deleted."""

    type: ClassVar[str] = "RemoveUserScramCredentialRecord"
    name: str
    mechanism: str

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "name": _nonempty_str,
        "mechanism": _scram_mechanism,
    }


def _enum_code(enum_type: type[enum.IntEnum]) -> _Kind:
    """One of an enum's codes (an int8 in Kafka's schema); the binding's own checks
    then refuse the codes a binding may not hold (ANY, UNKNOWN, MATCH)."""
    codes = tuple(m.value for m in enum_type)

    def check(value: object, where: str) -> object:
        if type(value) is not int or value not in codes:
            raise _fail(where, f"a {enum_type.__name__} code in {codes}", value)
        return value

    return check


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord(_Record):
    """An ACL binding was created (Kafka's record of this name), under ``id``. The
    resource type, pattern type, operation and permission type are Kafka's codes
    (:mod:`raftka.common.acl`), as Kafka's int8 fields."""

    type: ClassVar[str] = "AccessControlEntryRecord"
    id: str
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    _KINDS: ClassVar[Mapping[str, _Kind]] = {
        "id": _uuid,
        "resource_type": _enum_code(ResourceType),
        "resource_name": _nonempty_str,
        "pattern_type": _enum_code(PatternType),
        "principal": _nonempty_str,
        "host": _nonempty_str,
        "operation": _enum_code(AclOperation),
        "permission_type": _enum_code(AclPermissionType),
    }

    @classmethod
    def of(cls, acl_id: str, binding: AclBinding) -> AccessControlEntryRecord:
        p, e = binding.pattern, binding.entry
        return cls(
            id=acl_id,
            resource_type=int(p.resource_type),
            resource_name=p.name,
            pattern_type=int(p.pattern_type),
            principal=e.principal,
            host=e.host,
            operation=int(e.operation),
            permission_type=int(e.permission_type),
        )

    def _check(self) -> None:
        # Every node builds the binding on replay, so the record holds only what a
        # binding may hold (no ANY/UNKNOWN/MATCH, a Type:name principal).
        self.binding()

    def binding(self) -> AclBinding:
        try:
            return AclBinding(
                ResourcePattern(
                    ResourceType(self.resource_type),
                    self.resource_name,
                    PatternType(self.pattern_type),
                ),
                AccessControlEntry(
                    self.principal,
                    self.host,
                    AclOperation(self.operation),
                    AclPermissionType(self.permission_type),
                ),
            )
        except InvalidRequestError as e:
            raise self._error(e.message) from None


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord(_Record):
    """The ACL binding created under ``id`` was deleted."""

    type: ClassVar[str] = "RemoveAccessControlEntryRecord"
    id: str

    _KINDS: ClassVar[Mapping[str, _Kind]] = {"id": _uuid}


@dataclass(frozen=True, slots=True)
class NoOpRecord(_Record):
    """Changes nothing; the controller writes one to advance the log (e.g. to commit
    in a new epoch)."""

    type: ClassVar[str] = "NoOpRecord"

    _KINDS: ClassVar[Mapping[str, _Kind]] = {}


MetadataRecord: TypeAlias = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | BrokerRegistrationChangeRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | ProducerIdsRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | NoOpRecord
)

RECORD_TYPES: Final[Mapping[str, type[MetadataRecord]]] = {
    cls.type: cls
    for cls in (
        RegisterBrokerRecord,
        UnregisterBrokerRecord,
        BrokerRegistrationChangeRecord,
        TopicRecord,
        PartitionRecord,
        PartitionChangeRecord,
        RemoveTopicRecord,
        ConfigRecord,
        ProducerIdsRecord,
        UserScramCredentialRecord,
        RemoveUserScramCredentialRecord,
        AccessControlEntryRecord,
        RemoveAccessControlEntryRecord,
        NoOpRecord,
    )
}


# ---------------------------------------------------------------------------------------
# Codec


def record_from_dict(obj: object) -> MetadataRecord:
    """Build a record from its dict form ``{"type", "version", "data"}``, checking it."""
    if not isinstance(obj, dict):
        raise _fail("metadata record", "a JSON object", obj)
    if set(obj) != {"type", "version", "data"}:
        raise MetadataRecordError(
            f"metadata record: expected keys type, version, data; got {sorted(map(str, obj))}"
        )
    type_name, version, data = obj["type"], obj["version"], obj["data"]
    if type(type_name) is not str:
        raise _fail("metadata record type", "a string", type_name)
    cls = RECORD_TYPES.get(type_name)
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {type_name!r}")
    if type(version) is not int or not 0 <= version <= cls.version:
        raise _fail(f"{type_name}.version", f"a version in [0, {cls.version}]", version)
    if not isinstance(data, dict):
        raise _fail(f"{type_name}.data", "a JSON object", data)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise MetadataRecordError(f"{type_name}: unknown field(s) {unknown}")
    missing = sorted(
        name
        for name, f in fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise MetadataRecordError(f"{type_name}: missing field(s) {missing}")
    # Every field is checked by the record's __post_init__.
    return cls(**data)


def encode_record(record: MetadataRecord) -> bytes:
    """One record as one JSON object (UTF-8 bytes)."""
    return orjson.dumps(record.to_dict())


def _loads(data: bytes, what: str, bytes_max: int = RECORD_BYTES_MAX) -> object:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise _fail(what, "bytes", data)
    if len(data) > bytes_max:
        raise MetadataRecordError(f"{what}: {len(data)} bytes exceeds {bytes_max}")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise MetadataRecordError(f"{what}: invalid JSON: {e}") from None


def decode_record(data: bytes) -> MetadataRecord:
    """The record ``encode_record`` wrote; MetadataRecordError if it is malformed."""
    return record_from_dict(_loads(data, "metadata record"))


def encode_records(records: Iterable[MetadataRecord]) -> bytes:
    """A list of records as one JSON array (for a snapshot's record list)."""
    return orjson.dumps([r.to_dict() for r in records])


def decode_records(data: bytes) -> list[MetadataRecord]:
    """The list ``encode_records`` wrote; MetadataRecordError if any part is malformed."""
    obj = _loads(data, "metadata record list", RECORD_LIST_BYTES_MAX)
    if not isinstance(obj, list):
        raise _fail("metadata record list", "a JSON array", obj)
    out: list[MetadataRecord] = []
    for i, item in enumerate(obj):
        try:
            out.append(record_from_dict(item))
        except MetadataRecordError as e:
            raise MetadataRecordError(f"record {i}: {e.message}") from None
    return out
