"""Kafka's errors, as users of the client import them (``raftka.client.errors``).

The classes live in :mod:`raftka.common.errors`, which servers share; this module
re-exports every public name of it so that code written against the client keeps
working.
"""

from raftka.common.errors import *  # noqa: F403
from raftka.common.errors import error_for_code, error_for_name  # noqa: F401
