"""raftka's consumer: the fetcher and the partition assignors; the public classes are
exported from :mod:`raftka.client`."""
