"""raftka's HTTP API over HTTPS (client certificates) against plain HTTP, same run.

    python bench/https_bench.py [--records N] [--repeats N]

Two clusters on loopback, each 3 controllers + 3 brokers as real processes: one plain
HTTP, one whose every node serves HTTPS and calls its peers over HTTPS
(server_common/node_http.py; a throwaway CA, one node certificate, an application
certificate for the client). Each repeat runs, on both clusters in turn (so machine
noise hits both alike), ``raftka perf produce`` (acks=all, RF 3, min.insync.replicas 2,
100-byte records: the client's requests and the followers' replication both cross TLS)
and ``raftka perf consume`` of the same records, each on a fresh topic. Prints one JSON
line per run and the medians, with the HTTPS / HTTP ratios.
"""

from __future__ import annotations

import argparse
import json
import platform
import ssl
import statistics
import tempfile
import time
from pathlib import Path

from broker_bench import consume, create_topic, produce

from raftka.client import Admin
from raftka.local.brokers import LocalBrokers
from raftka.local.certs import new_ca
from raftka.local.processes import LocalCluster

NODE = "bench-node"


def _https(root: Path) -> tuple[dict[str, str], ssl.SSLContext, Path, dict[str, str]]:
    """Node properties, a health-check context, a --command-config file, client options."""
    ca = new_ca(root / "ca")
    node = ca.issue(root / "ca", NODE)
    app = ca.issue(root / "ca", "bench-app")
    props = {
        "listener.name.https.ssl.certfile": str(node.certfile),
        "listener.name.https.ssl.keyfile": str(node.keyfile),
        "listener.name.https.ssl.cafile": str(ca.cafile),
        "super.users": f"User:CN={NODE}",
    }
    context = ssl.create_default_context(cafile=str(ca.cafile))
    context.load_cert_chain(str(node.certfile), str(node.keyfile))
    command_config = root / "client.properties"
    command_config.write_text(
        f"security.protocol=SSL\nssl.cafile={ca.cafile}\n"
        f"ssl.certfile={app.certfile}\nssl.keyfile={app.keyfile}\n"
    )
    admin = {
        "security_protocol": "SSL",
        "ssl_cafile": str(ca.cafile),
        "ssl_certfile": str(node.certfile),
        "ssl_keyfile": str(node.keyfile),
    }
    return props, context, command_config, admin


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="raftka-https-bench-"))
    props, context, command_config, admin_options = _https(root / "pki")
    runs: dict[str, list[dict[str, float]]] = {}
    with (
        LocalCluster(root / "plain") as plain,
        LocalCluster(root / "secure", extra_properties=props, https=context) as secure,
    ):
        plain.start()
        secure.start()
        with (
            LocalBrokers(plain, count=3) as plain_brokers,
            LocalBrokers(secure, count=3, extra_properties=props, https=context) as secure_brokers,
        ):
            plain_brokers.start()
            secure_brokers.start()
            setups = {
                "HTTP": (plain_brokers.bootstrap_servers, (), {}),
                "HTTPS": (
                    secure_brokers.bootstrap_servers,
                    ("--command-config", str(command_config)),
                    admin_options,
                ),
            }
            for repeat in range(args.repeats):
                for name, (bootstrap, extra, options) in setups.items():
                    with Admin(bootstrap_servers=bootstrap, **options) as admin:  # type: ignore[arg-type]
                        topic = create_topic(admin, f"bench-{repeat}", 3)
                    started = time.perf_counter()
                    p = produce(bootstrap, topic, args.records, "all", extra=extra)
                    c = consume(bootstrap, topic, args.records, extra=extra)
                    row = {"produce_rps": p["rps"], "p99_ms": p["p99"], "consume_rps": c["rps"]}
                    runs.setdefault(name, []).append(row)
                    print(
                        json.dumps(
                            {
                                "run": name,
                                "repeat": repeat,
                                **row,
                                "seconds": round(time.perf_counter() - started, 1),
                            }
                        ),
                        flush=True,
                    )
    medians = {
        name: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        for name, rows in runs.items()
    }
    ratio = {k: medians["HTTPS"][k] / medians["HTTP"][k] for k in ("produce_rps", "consume_rps")}
    print(
        json.dumps(
            {
                "medians": medians,
                "https_over_http": ratio,
                "records": args.records,
                "repeats": args.repeats,
                "machine": platform.platform(),
            }
        )
    )


if __name__ == "__main__":
    main()
