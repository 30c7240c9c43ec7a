"""A dataflow shard's recovery snapshot as versioned plain data.

A snapshot is a dict of primitives (str, int, float, bool, None, bytes, lists, dicts and
the records themselves, which are JSON-like dicts), with `format` naming its version. It
holds no class of binloop's, so renaming or moving a module never breaks a recovery
store: pickle stores a class by its import path, and an earlier format (binloop's
`ShardState` pickled whole, "format 1") could not be read once `flows.operators` or
`binloop.core.detection` moved. A format-1 store is still read while those classes can be
imported; otherwise, and for any other unknown content, loading refuses with one line.

Format 4:

    {"format": "binloop.shard/4", "params": {DetectionParams fields}, "shards": N,
     "detector": {"max_ts", "keys": [[tool, mode, armed, epoch, recent ids,
                  window or None, newest ts of the key], ...]},
     "next_seq": {partition: seq}, "partition_ts": {partition: ts},
     "pending": [CHUNK, ...], "released": [partition, ...], "held": {partition: [CHUNK, ...]}}

    CHUNK = [partition, seq, start_seq, max_ts, [[tool, mode, item, record tool,
             record mode, ts, session_id], ...], waits_for or None, releases]

`released`/`held` and a chunk's `waits_for`/`releases` are the backlog order of a NATS
stream adopted with telemetry stored before it was partitioned (`flows.nats_source`).
Format 3 (before every key kept its own clock: no newest ts per key, a global
`next_sweep`) and format 2 (also without the backlog order: nothing held, nothing
released) are converted on load.

Windows: ["global", newest, slice] | ["session", newest, sweep_at, [[session_id, slice],
...]] | ["sliding", newest, arrivals, last_ts, [[ts, arrival, record], ...]], a slice
being [count, first_ts, newest, [records]].
"""

from __future__ import annotations

import math
import pickle
from collections import deque
from dataclasses import fields
from typing import Any, Final

from binloop.core.detection import (
    DetectionParams,
    Detector,
    GlobalWindow,
    KeyState,
    SessionWindows,
    SlidingWindow,
    Window,
    _Slice,
)
from binloop.core.window import WindowSpec

FORMAT: Final = "binloop.shard/4"
# The format before the per-key clocks, and the one before the backlog order (converted).
FORMAT_3: Final = "binloop.shard/3"
FORMAT_2: Final = "binloop.shard/2"


class SnapshotError(ValueError):
    """A recovery snapshot this version cannot read; the message is one line."""


def params_to_plain(params: DetectionParams) -> dict[str, Any]:
    plain: dict[str, Any] = {}
    for f in fields(params):
        if not f.init:  # derived from the others (`config_digest`)
            continue
        value = getattr(params, f.name)
        if isinstance(value, WindowSpec):
            value = str(value)
        elif isinstance(value, frozenset):
            value = sorted(value)
        plain[f.name] = value
    return plain


def params_from_plain(plain: dict[str, Any]) -> DetectionParams:
    init = {f.name for f in fields(DetectionParams) if f.init}
    values = {name: value for name, value in plain.items() if name in init or name not in
              {f.name for f in fields(DetectionParams)}}
    values["window"] = WindowSpec.parse(values["window"])
    for f in fields(DetectionParams):
        if isinstance(getattr(DetectionParams(), f.name), frozenset) and f.name in values:
            values[f.name] = frozenset(values[f.name])
    return DetectionParams(**values)


def dump_shard(state: Any) -> dict[str, Any]:
    """A `flows.operators.ShardState` as plain data of the current format."""
    detector: Detector = state.detector
    return {
        "format": FORMAT,
        "params": params_to_plain(detector.params),
        "shards": state.shards,
        "detector": {
            "max_ts": detector.max_ts,
            "keys": [[tool, mode, key.armed, key.epoch, list(key.recent_order),
                      _window_to_plain(key.window), getattr(key, "newest", -math.inf)]
                     for (tool, mode), key in detector.keys.items()],
        },
        "next_seq": dict(state.next_seq),
        "partition_ts": dict(state.partition_ts),
        "pending": [_chunk_to_plain(chunk) for chunks in state.pending.values()
                    for chunk in chunks.values()],
        "released": sorted(getattr(state, "released", ())),
        "held": {partition: [_chunk_to_plain(chunk) for chunk in chunks]
                 for partition, chunks in getattr(state, "held", {}).items()},
    }


def _chunk_to_plain(chunk: Any) -> list[Any]:
    return [chunk.partition, chunk.seq, chunk.start_seq, chunk.max_ts,
            [[key[0], key[1], *cand] for key, cand in chunk.records],
            getattr(chunk, "waits_for", None), bool(getattr(chunk, "releases", False))]


def _chunk_from_plain(plain: list[Any], chunk_type: Any) -> Any:
    partition, seq, start_seq, max_ts, records, *order = plain
    waits_for, releases = order if order else (None, False)
    return chunk_type(partition, seq,
                      [((k_tool, k_mode), (item, tool, mode, ts, session))
                       for k_tool, k_mode, item, tool, mode, ts, session in records],
                      start_seq, max_ts, waits_for, bool(releases))


def load_shard(snapshot: Any, params: DetectionParams, state_type: Any,
               chunk_type: Any) -> Any:
    """The shard state a snapshot holds, as `state_type(detector, shards, ...)`."""
    if isinstance(snapshot, bytes):  # format 1: the state pickled whole
        snapshot = _from_format_1(snapshot, params, chunk_type)
        if not isinstance(snapshot, dict):
            return snapshot
    if isinstance(snapshot, dict) and snapshot.get("format") == FORMAT_2:
        snapshot = {**snapshot, "format": FORMAT_3, "released": [], "held": {}}
    if isinstance(snapshot, dict) and snapshot.get("format") == FORMAT_3:
        snapshot = {**snapshot, "format": FORMAT}  # keys without a newest ts: none seen
    if not isinstance(snapshot, dict) or snapshot.get("format") != FORMAT:
        found = snapshot.get("format") if isinstance(snapshot, dict) else type(snapshot).__name__
        raise SnapshotError(f"recovery store: shard snapshot format {found!r} is not "
                            f"{FORMAT!r}; start a new recovery store")
    try:
        return _state_from_plain(snapshot, state_type, chunk_type)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise SnapshotError(f"recovery store: damaged shard snapshot ({exc!r:.120}); start "
                            "a new recovery store") from None


def _state_from_plain(plain: dict[str, Any], state_type: Any, chunk_type: Any) -> Any:
    params = params_from_plain(plain["params"])
    found = plain["detector"]
    detector = Detector(params, external_clock=True, max_ts=found["max_ts"])
    for tool, mode, armed, epoch, recent, window, *newest in found["keys"]:
        key = KeyState(_window_from_plain(window, params), armed, epoch)
        key.newest = newest[0] if newest else -math.inf
        key.recent_order = deque(recent)
        key.recent_ids = set(recent)
        detector.keys[(tool, mode)] = key
    pending: dict[str, dict[int, Any]] = {}
    for entry in plain["pending"]:
        chunk = _chunk_from_plain(entry, chunk_type)
        pending.setdefault(chunk.partition, {})[chunk.seq] = chunk
    held = {partition: [_chunk_from_plain(entry, chunk_type) for entry in chunks]
            for partition, chunks in plain["held"].items()}
    return state_type(detector, plain["shards"], dict(plain["next_seq"]),
                      dict(plain["partition_ts"]), pending, set(plain["released"]), held)


def _slice_to_plain(part: _Slice) -> list[Any]:
    return [part.count, part.first_ts, part.newest, list(part.records)]


def _slice_from_plain(plain: list[Any], evidence_max: int) -> _Slice:
    part = _Slice(evidence_max)
    part.count, part.first_ts, part.newest = plain[0], plain[1], plain[2]
    part.records.extend(plain[3])
    return part


def _window_to_plain(window: Window | None) -> list[Any] | None:
    # The private fields are the window's whole state; a window's last slice (`_last`)
    # is read only right after an `add`, so it is not part of it.
    if window is None:
        return None
    if isinstance(window, GlobalWindow):
        return ["global", window.newest, _slice_to_plain(window.slice)]
    if isinstance(window, SessionWindows):
        return ["session", window.newest, window._sweep_at,
                [[session, _slice_to_plain(part)] for session, part in window.slices.items()]]
    return ["sliding", window.newest, window._arrivals, window._last_ts,
            [list(entry) for entry in window.entries]]


def _window_from_plain(plain: list[Any] | None, params: DetectionParams) -> Window | None:
    if plain is None:
        return None
    kind, evidence_max = plain[0], params.evidence_max
    if kind == "global":
        glob = GlobalWindow(evidence_max)
        glob.newest, glob.slice = plain[1], _slice_from_plain(plain[2], evidence_max)
        return glob
    if kind == "session":
        sessions = SessionWindows(params.session_gap_ms, evidence_max)
        sessions.newest, sessions._sweep_at = plain[1], plain[2]
        sessions.slices = {session: _slice_from_plain(part, evidence_max)
                           for session, part in plain[3]}
        return sessions
    if kind == "sliding":
        sliding = SlidingWindow(params.window.size_ms, evidence_max)
        sliding.newest, sliding._arrivals, sliding._last_ts = plain[1], plain[2], plain[3]
        sliding.entries = [(ts, arrival, rec) for ts, arrival, rec in plain[4]]
        return sliding
    raise ValueError(f"unknown window kind {kind!r}")


def _from_format_1(blob: bytes, params: DetectionParams, chunk_type: Any) -> Any:
    """A format-1 snapshot (a pickled `ShardState`), converted to format 2 plain data."""
    try:
        legacy = pickle.loads(blob)
    except Exception as exc:  # the pickled classes moved or the bytes are damaged
        raise SnapshotError(
            f"recovery store: a shard snapshot in the old pickled format (1) cannot be read "
            f"by this version ({type(exc).__name__}: {str(exc)[:80]}); start a new "
            "recovery store") from None
    detector = getattr(legacy, "detector", None)
    if not isinstance(detector, Detector):
        raise SnapshotError("recovery store: the shard snapshot is neither format 1 nor "
                            f"{FORMAT!r}; start a new recovery store")
    # Format 1 kept full records in the reorder buffer; later formats keep candidates.
    def converted(chunk: Any) -> Any:
        return chunk_type(chunk.partition, chunk.seq, [
            (params.key_of(rec), (rec, rec["tool"], rec["failure_mode"], rec["ts"],
                                  rec["session_id"]))
            for rec in chunk.records], chunk.start_seq, chunk.max_ts,
            getattr(chunk, "waits_for", None), getattr(chunk, "releases", False))

    for chunks in legacy.pending.values():
        for seq, chunk in list(chunks.items()):
            chunks[seq] = converted(chunk)
    # A format-1 store written before the backlog order existed lacks its two fields.
    legacy.__dict__.setdefault("released", set())
    legacy.__dict__["held"] = {partition: [converted(chunk) for chunk in chunks]
                               for partition, chunks in legacy.__dict__.get("held", {}).items()}
    return dump_shard(legacy)
