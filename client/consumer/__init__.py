"""raftka's consumer. So far: the partition assignors (:mod:`.assignors`)."""
