"""raftka.broker."""
