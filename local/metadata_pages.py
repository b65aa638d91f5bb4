"""A controller's metadata log as its HTTP API pages it (``GET /v1/metadata``, JSON),
replayed into an image the way a broker replays it: for tools and tests that watch a
local cluster's committed metadata from outside."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raftka.metadata.delta import MetadataDelta, image_from_records
from raftka.metadata.image import MetadataImage
from raftka.metadata.metadata_records import record_from_dict

__all__ = ["replay_metadata_page"]


def replay_metadata_page(image: MetadataImage, page: Mapping[str, Any]) -> MetadataImage:
    """``image`` after one ``GET /v1/metadata`` answer: its snapshot (when the log's
    prefix was snapshotted) replaces the image, then each batch is replayed in order."""
    snap = page["snapshot"]
    if snap is not None:
        records = [record_from_dict(r) for r in snap["records"]]
        image = image_from_records(records, snap["end_offset"] - 1, snap["epoch"])
    for batch in page["batches"]:
        delta = MetadataDelta(image)
        delta.replay_all(record_from_dict(r) for r in batch["records"])
        delta.offset = batch["offset"]
        image = delta.apply()
    return image
