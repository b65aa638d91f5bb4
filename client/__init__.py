"""raftka.client."""
