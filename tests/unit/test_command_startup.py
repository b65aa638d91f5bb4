"""The ``raftka`` command keeps hypothesis (a dev dependency) out of its processes.

kio imports hypothesis whenever it is installed; in a broker that was 0.4 s of CPU at
every start (a third of it), paid by every test cluster of the suite.
"""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
{prelude}
import raftka.broker.server
import kio.static.primitive
print(type(sys.modules.get("hypothesis")).__name__)
"""

_THROUGH_MAIN = """
from raftka.__main__ import main
sys.argv = ["raftka", "--version"]
try:
    main()
except SystemExit:
    pass
"""


def _hypothesis_in_broker(prelude: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(prelude=prelude)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def test_a_broker_started_by_the_raftka_command_does_not_import_hypothesis() -> None:
    assert _hypothesis_in_broker(_THROUGH_MAIN) == "NoneType"


def test_without_the_command_kio_would_import_it() -> None:
    # The control: in this (dev) environment the broker's imports do pull it in.
    assert _hypothesis_in_broker("") == "module"
