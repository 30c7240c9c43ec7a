"""The Bytewax recovery store of `binloop run`: created once, safely, by one process.

A store is a directory of SQLite partitions `part-<n>.sqlite3` (what
`python -m bytewax.recovery DIR N` makes). Their number is fixed when the store is
created; Bytewax spreads them over the workers of each run, whatever their number
(a partition is written by one worker; a worker may hold several or none).

In a cluster sharing one directory (a shared volume), process 0 creates a missing
store: the partitions are made in a temporary directory inside it, moved in, and the
marker `binloop-recovery.json` is written last; the other processes wait for the
marker. A store made by hand (no marker, no temporary directory) is used as it is.

The marker also notes the state shards the store is written with (`--shards`), so that
every process of every later run uses that count (`store_shards`). Stores without it
(made by hand, or by binloop before it noted it) were written with 64, the default of
then.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Final

import orjson

from binloop.core.config import DEFAULT_SHARDS

MARKER: Final = "binloop-recovery.json"
LEGACY_SHARDS: Final = 64
_INIT_PREFIX: Final = ".init-"
WAIT_S: Final = 300.0
log = logging.getLogger("binloop.recovery")


def partitions_in(path: Path) -> list[Path]:
    return sorted(path.glob("part-*.sqlite3"))


def store_ready(path: Path) -> bool:
    """Whether `path` holds a complete store."""
    if not partitions_in(path):
        return False
    return (path / MARKER).is_file() or not any(path.glob(_INIT_PREFIX + "*"))


def create_store(path: Path, partitions: int, shards: int = DEFAULT_SHARDS) -> None:
    """Create the partitions (unless a complete store is there), marker last."""
    from bytewax.recovery import init_db_dir

    path.mkdir(parents=True, exist_ok=True)
    if store_ready(path):
        return
    for stale in [*path.glob(_INIT_PREFIX + "*"), *partitions_in(path)]:
        # Left by an interrupted creation: no run has used a store without its marker.
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    count = max(1, partitions)
    staging = Path(tempfile.mkdtemp(prefix=_INIT_PREFIX, dir=path))
    init_db_dir(staging, count)
    for part in partitions_in(staging):
        part.rename(path / part.name)
    marker = path / (MARKER + ".tmp")
    marker.write_bytes(orjson.dumps({"partitions": count, "shards": shards,
                                     "created": time.time()}))
    marker.rename(path / MARKER)
    shutil.rmtree(staging)
    log.info("created the recovery store %s with %d partitions", path, count)


def wait_for_store(path: Path, wait_s: float = WAIT_S,
                   stop: threading.Event | None = None) -> None:
    """Wait until process 0 has created the store (or `stop` is set)."""
    deadline = time.monotonic() + wait_s
    next_note = time.monotonic() + 10
    while not (path.is_dir() and store_ready(path)):
        now = time.monotonic()
        if stop is not None and stop.is_set():
            raise RuntimeError("stopped while waiting for the recovery store")
        if now > deadline:
            raise RuntimeError(f"no recovery store at {path} after {wait_s:g}s: process 0 "
                               "creates it (is the volume shared by all processes?)")
        if now > next_note:
            log.info("waiting for process 0 to create the recovery store %s", path)
            next_note = now + 10
        time.sleep(0.2)


def store_shards(path: Path) -> int:
    """The shard count a complete store is written with."""
    marker = path / MARKER
    if not marker.is_file():
        return LEGACY_SHARDS
    return int(orjson.loads(marker.read_bytes()).get("shards", LEGACY_SHARDS))


def prepare_store(path: Path, partitions: int, process_id: int = 0,
                  stop: threading.Event | None = None, shards: int = DEFAULT_SHARDS) -> None:
    """Process 0 creates a missing store (with `shards`); any other process waits for it."""
    if process_id == 0:
        create_store(path, partitions, shards)
    else:
        wait_for_store(path, stop=stop)
    log.debug("recovery store %s: %d partitions", path, len(partitions_in(path)))
