"""raftka.client.cli."""
