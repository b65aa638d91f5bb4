"""raftka: a KRaft-style replicated commit log in Python.

The distribution's code lives in the repository's top-level folders ``raft/``,
``metadata/``, ``broker/`` and ``client/``; installed, they import as
``raftka.raft``, ``raftka.metadata``, ``raftka.broker`` and ``raftka.client``.
"""

__version__ = "0.1.0"
