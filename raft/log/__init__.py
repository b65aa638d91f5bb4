"""raftka.raft.log."""
