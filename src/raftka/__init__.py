"""raftka: a KRaft-style replicated commit log in Python.

The distribution's code lives in the repository's top-level folders (``common/``,
``storage/``, ``raft/``, ``server_common/``, ``metadata/``, ``broker/``, ``client/``,
``local/``, ``chaos/``); installed, each imports as ``raftka.<folder>``. This package
root holds only the ``raftka`` command and the pytest plugin (see the README's layout).
"""

__version__ = "0.1.0"
