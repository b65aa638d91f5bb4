"""raftka.raft.quorum."""
