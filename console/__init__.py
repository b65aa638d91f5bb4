"""The web console (``raftka console``): a read-only view of a cluster in a browser.

A tool above the layers, like ``local/`` and ``chaos/``: it reads the cluster only
through raftka's public clients (``AsyncAdmin``, ``AsyncGroupAdmin``, ``AsyncConsumer``
and the controllers' ``/v1/quorum`` that ``raftka quorum status`` reads). :mod:`.shape`
turns their answers into the JSON the page renders (pure); :mod:`.app` serves it.
"""
