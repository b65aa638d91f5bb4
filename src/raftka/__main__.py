"""Entry point of the ``raftka`` command."""


def main() -> None:
    print("raftka")
