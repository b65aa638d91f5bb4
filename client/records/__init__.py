"""raftka.client.records."""
