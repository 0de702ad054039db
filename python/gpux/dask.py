# SPDX-License-Identifier: MIT
"""Dask: gpux arrays travel between Dask processes of one host as their shared memory.

Importing this module (gpux does so itself when ``distributed`` was imported first) tells
Dask's serialization to pickle gpux arrays (gpux._share) rather than copy their bytes, so a
worker's result stays in the same shared buffer when another worker or the client gets it.
Across hosts send plain arrays (``np.asarray(a)``): each host has its own gpuxd, and a task
makes its gpux arrays where it runs (``gpux.asarray(chunk)``).
"""
from __future__ import annotations

import pickle

from distributed.protocol import dask_deserialize, dask_serialize

from ._core import ndarray

__all__ = ["ndarray"]


@dask_serialize.register(ndarray)
def _serialize(a: ndarray) -> tuple[dict, list[bytes]]:
    return {}, [pickle.dumps(a, protocol=pickle.HIGHEST_PROTOCOL)]


@dask_deserialize.register(ndarray)
def _deserialize(header: dict, frames: list) -> ndarray:
    return pickle.loads(frames[0])
