"""A user-space packet delayer over the kernel's nfnetlink queue (pure Python).

Theory of operation: this kernel has no netem, so delay works like this. The hub
namespace bridges all test hosts; with br_netfilter on, bridged IPv4 packets pass the
hub's iptables FORWARD chain, where an ``NFQUEUE --queue-num Q`` rule (installed by
:mod:`raftka.chaos.netns`) hands each matching packet to queue ``Q``. This process,
started inside the hub namespace, binds queue ``Q`` over a ``NETLINK_NETFILTER``
socket in *meta* copy mode (the kernel keeps the packet; we only see its id), stamps
each packet on arrival, and after ``delay_ms`` gives the kernel an ACCEPT verdict, which
re-injects the original packet where it left the FORWARD hook.

Packets leave in arrival order, so one ``NF_VERDICT_BATCH`` (accept every id up to N)
releases everything that is due at once.

Bounds: the kernel queue holds at most ``maxlen`` packets that wait for a verdict, and
that is also the bound on what this process holds. When the queue is full the kernel
*drops* further packets (a router with a full buffer), unless ``--fail-open`` is given,
in which case it lets them through *undelayed*. If this process cannot read fast enough
and its socket buffer overflows, the kernel drops those packets too (same rule), so no
packet is ever stranded in the queue. On SIGTERM every held packet is released at once
and the process exits 0; if it dies instead, the kernel drops the held packets and,
because the rule has no ``--queue-bypass``, every later matching packet too (a visible
partition, not silently undelayed traffic).

Protocol constants come from ``linux/netfilter/nfnetlink_queue.h``.
"""

from __future__ import annotations

import argparse
import collections
import errno
import os
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33  # linux/asm-generic/socket.h; not exported by Python's socket

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, portid (host byte order)
NLA_HDR = struct.Struct("=HH")  # len, type
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED and NLA_F_NET_BYTEORDER

NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3

NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_FAIL_OPEN = 0x1

NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1

NF_ACCEPT = 1

QUEUE_MAXLEN_DEFAULT = 4096
RECV_BUFFER_BYTES = 8 * 1024 * 1024
READY_TIMEOUT_S = 5.0


class NfqueueError(OSError):
    """The kernel refused a queue configuration message."""


def _attr(attr_type: int, payload: bytes) -> bytes:
    length = NLA_HDR.size + len(payload)
    pad = (-length) % 4
    return NLA_HDR.pack(length, attr_type) + payload + b"\0" * pad


def _message(msg_type: int, flags: int, seq: int, queue_num: int, attrs: bytes) -> bytes:
    # nfgenmsg: family (AF_UNSPEC), version 0, res_id = queue number in network order.
    nfgen = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", queue_num)
    body = nfgen + attrs
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), msg_type, flags, seq, 0) + body


def _iter_messages(data: bytes) -> list[tuple[int, int, bytes]]:
    """Split one netlink datagram into (type, seq, payload after the netlink header)."""
    out: list[tuple[int, int, bytes]] = []
    offset = 0
    while offset + NLMSG_HDR.size <= len(data):
        length, msg_type, _flags, seq, _portid = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size:
            break
        out.append((msg_type, seq, data[offset + NLMSG_HDR.size : offset + length]))
        offset += (length + 3) & ~3
    return out


def _packet_id(payload: bytes) -> int | None:
    """The packet id from an NFQNL_MSG_PACKET payload (nfgenmsg + attributes)."""
    offset = 4  # nfgenmsg
    while offset + NLA_HDR.size <= len(payload):
        length, attr_type = NLA_HDR.unpack_from(payload, offset)
        if length < NLA_HDR.size:
            return None
        if attr_type & NLA_TYPE_MASK == NFQA_PACKET_HDR:
            (packet_id,) = struct.unpack_from("!I", payload, offset + NLA_HDR.size)
            return int(packet_id)
        offset += (length + 3) & ~3
    return None


@dataclass
class DelayStats:
    received: int = 0
    released: int = 0
    held_max: int = 0
    overruns: int = 0  # ENOBUFS: the socket buffer overflowed and the kernel dropped


class NfqueueDelayer:
    """Holds every packet of one nfnetlink queue for ``delay_s``, then accepts it."""

    def __init__(
        self, queue_num: int, delay_s: float, *, maxlen: int = QUEUE_MAXLEN_DEFAULT
    ) -> None:
        assert 0 <= queue_num <= 65535, queue_num
        assert delay_s >= 0, delay_s
        assert maxlen > 0, maxlen
        self.queue_num = queue_num
        self.delay_s = delay_s
        self.maxlen = maxlen
        self.stats = DelayStats()
        self._seq = 0
        # (due monotonic time, packet id), in arrival order: bounded by the kernel's maxlen.
        self._held: collections.deque[tuple[float, int]] = collections.deque()
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self._sock.bind((0, 0))
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECV_BUFFER_BYTES)
        except OSError:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER_BYTES)

    @property
    def portid(self) -> int:
        port: tuple[int, int] = self._sock.getsockname()
        return port[0]

    def close(self) -> None:
        self._sock.close()

    def _request(self, attrs: bytes) -> None:
        """Send one config message and wait for its acknowledgement."""
        self._seq += 1
        seq = self._seq
        msg_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG
        self._sock.send(_message(msg_type, NLM_F_REQUEST | NLM_F_ACK, seq, self.queue_num, attrs))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            self._sock.settimeout(max(0.0, deadline - time.monotonic()))
            data = self._sock.recv(65536)
            for msg_type_in, seq_in, payload in _iter_messages(data):
                if msg_type_in == NLMSG_ERROR and seq_in == seq:
                    (code,) = struct.unpack_from("=i", payload, 0)
                    self._sock.settimeout(None)
                    if code != 0:
                        raise NfqueueError(-code, f"nfqueue config: {os.strerror(-code)}")
                    return

    def bind(self, *, fail_open: bool = False) -> None:
        """Bind the queue in meta copy mode with a bounded length."""
        cmd = struct.pack("!BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET)
        self._request(_attr(NFQA_CFG_CMD, cmd))
        self._request(_attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)))
        self._request(_attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", self.maxlen)))
        flags = NFQA_CFG_F_FAIL_OPEN if fail_open else 0
        self._request(
            _attr(NFQA_CFG_FLAGS, struct.pack("!I", flags))
            + _attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN))
        )
        self._sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 0)
        self._sock.setblocking(False)

    def is_bound(self) -> bool:
        """True once /proc/net/netfilter/nfnetlink_queue lists our queue and port."""
        try:
            with open("/proc/net/netfilter/nfnetlink_queue", encoding="ascii") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return False
        for line in lines:
            fields = line.split()
            if len(fields) >= 2 and int(fields[0]) == self.queue_num:
                return int(fields[1]) == self.portid
        return False

    def _verdict_upto(self, packet_id: int) -> None:
        """Accept every queued packet whose id is <= packet_id."""
        self._seq += 1
        msg_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT_BATCH
        attrs = _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id))
        self._sock.setblocking(True)
        self._sock.send(_message(msg_type, NLM_F_REQUEST, self._seq, self.queue_num, attrs))
        self._sock.setblocking(False)

    def _receive(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self.stats.overruns += 1
                    continue
                raise
            now = time.monotonic()
            for msg_type, _seq, payload in _iter_messages(data):
                if msg_type != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    continue
                packet_id = _packet_id(payload)
                if packet_id is None:
                    continue
                self._held.append((now + self.delay_s, packet_id))
                self.stats.received += 1
            self.stats.held_max = max(self.stats.held_max, len(self._held))
            # The kernel never has more than maxlen packets awaiting a verdict.
            assert len(self._held) <= self.maxlen, (len(self._held), self.maxlen)

    def _release_due(self, now: float) -> None:
        last_id: int | None = None
        while self._held and self._held[0][0] <= now:
            _due, last_id = self._held.popleft()
            self.stats.released += 1
        if last_id is not None:
            self._verdict_upto(last_id)

    def release_all(self) -> None:
        if self._held:
            last_id = self._held[-1][1]
            self.stats.released += len(self._held)
            self._held.clear()
            self._verdict_upto(last_id)

    def run(self, stop: list[bool], wakeup_fd: int | None = None) -> None:
        """Serve until ``stop[0]`` turns true (set by a signal handler); ``wakeup_fd``
        (a pipe given to ``signal.set_wakeup_fd``) ends the wait at once."""
        selector = selectors.DefaultSelector()
        selector.register(self._sock, selectors.EVENT_READ, "netlink")
        if wakeup_fd is not None:
            selector.register(wakeup_fd, selectors.EVENT_READ, "wakeup")
        try:
            while not stop[0]:
                now = time.monotonic()
                self._release_due(now)
                timeout = 0.5 if not self._held else max(0.0, self._held[0][0] - now)
                for key, _ in selector.select(timeout):
                    if key.data == "netlink":
                        self._receive()
        finally:
            selector.close()
        self.release_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m raftka.chaos.delay", description=__doc__)
    parser.add_argument("--queue", type=int, required=True, help="nfnetlink queue number")
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--maxlen", type=int, default=QUEUE_MAXLEN_DEFAULT)
    parser.add_argument(
        "--fail-open", action="store_true", help="when the queue is full, pass undelayed"
    )
    args = parser.parse_args(argv)
    stop = [False]

    def on_signal(_signum: int, _frame: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    wakeup_r, wakeup_w = os.pipe()
    os.set_blocking(wakeup_w, False)
    signal.set_wakeup_fd(wakeup_w)
    delayer = NfqueueDelayer(args.queue, args.delay_ms / 1000.0, maxlen=args.maxlen)
    try:
        delayer.bind(fail_open=args.fail_open)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not delayer.is_bound():
            if time.monotonic() > deadline:
                print(f"queue {args.queue} not bound after {READY_TIMEOUT_S}s", file=sys.stderr)
                return 1
            time.sleep(0.01)  # polling a kernel table with a deadline
        print(f"ready {args.queue} {delayer.portid}", flush=True)
        delayer.run(stop, wakeup_r)
    finally:
        delayer.close()
    s = delayer.stats
    print(
        f"delay queue {args.queue}: received={s.received} released={s.released} "
        f"held_max={s.held_max} overruns={s.overruns}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
