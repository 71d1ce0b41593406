"""Streaming shards: a corpus as LitData chunks, read by every rank of every node, resumable mid-epoch.

A shard folder (a local path or an object-store URL, ``s3://bucket/corpus``) holds::

    attend.json                 the marker, written last: which app wrote it, the fingerprint of its
                                inputs, the text settings, the vocabulary counts of the training
                                text, and per split its items, chunks and bytes
    <split>/index.json          LitData's index of the split's chunks (``litdata.optimize``)
    <split>/chunk-<w>-<n>.bin   the chunks: each item is one example, its image or audio file's bytes
                                as they were on disk and its text

:mod:`~shared.io.shards.layout` reads and checks the marker and the chunks (a folder of the other app,
another vocabulary, a missing or cut chunk: one line naming it); :mod:`~shared.io.shards.writer` writes a
folder whole or not at all; :mod:`~shared.io.shards.stream` serves training batches from a
``litdata.StreamingDataset`` with a position that a checkpoint keeps, and evaluation items by index.
The apps decide what an item holds (:mod:`speech_attend.data.shards`, :mod:`show_attend.data.shards`).
No Lightning here; LitData is imported only when shards are written or read.
"""

from .layout import MARKER, ShardError, Shards, open_shards

__all__ = ["MARKER", "ShardError", "Shards", "open_shards"]
