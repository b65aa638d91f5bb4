"""raftka.metadata."""
