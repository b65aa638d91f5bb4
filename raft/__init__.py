"""raftka.raft."""
