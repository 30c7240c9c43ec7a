"""The polars engine: FRICTION-DETECT over a replay, vectorised, a block at a time.

Same input, same output as the reference engine (`binloop.reference`) and as
`binloop.detection`, the executable spec: the same BINEvents (content and order), dead
letters (reasons, positions, order), late records and counters. Memory is bounded: the
input is read and detected in blocks of lines (`binloop.engines.polars.read`), with the
detection state carried from one block to the next (`binloop.engines.polars.detect`), so
peak memory depends on the block size and the number of keys, not on the input's size.

For sweeps: load a file once with :func:`load_records`, then :func:`detect_frame` (one
parameter set) or `detect_thetas` (every θ of one window in one pass).
"""

from __future__ import annotations

import time
from typing import Any

import polars as pl

from binloop.config import Config
from binloop.detection import DetectionParams
from binloop.engines.polars.detect import Detection, DetectState, detect_rows, detect_thetas
from binloop.engines.polars.read import (
    BLOCK_LINES,
    Block,
    LoadedRecords,
    OnProgress,
    concat_blocks,
    file_blocks,
    record_of,
    records_frame,
)
from binloop.events import BINEvent
from binloop.inputs import input_size, list_input_files
from binloop.outputs import Outputs
from binloop.schema import DEFAULT_LIMITS, DeadLetter, RecordLimits, ToolInvocation
from binloop.summary import Progress, RunSummary

__all__ = ["Detection", "LoadedRecords", "detect_frame", "detect_rows", "detect_thetas",
           "load_records", "records_frame", "run_polars"]


def load_records(path: str, limits: RecordLimits = DEFAULT_LIMITS,
                 on_progress: OnProgress | None = None) -> LoadedRecords:
    """Every record of `path` (a file, a directory of them, or - for stdin) in memory.

    `on_progress(bytes_read, lines_read)` is called after each block, with totals so far."""
    return concat_blocks(_blocks(path, limits, BLOCK_LINES, on_progress))


def detect_frame(records: pl.DataFrame | LoadedRecords,
                 params: DetectionParams) -> list[BINEvent]:
    """The BINEvents of a frame of valid records in arrival order (see `load_records`)."""
    return detect_rows(records, params).events


def _blocks(path: str, limits: RecordLimits, block_lines: int,
            on_progress: OnProgress | None) -> Any:
    bytes_before = lines_before = 0
    for name in list_input_files(path):
        done = 0
        for block in file_blocks(name, limits, block_lines):
            done += block.lines
            if on_progress is not None:
                on_progress(bytes_before + block.done_bytes, lines_before + done)
            yield block
        lines_before += done
        size = input_size(name)
        bytes_before += size or 0


# --- a replay, as `binloop detect --engine polars` ----------------------------------


def run_polars(config: Config) -> RunSummary:
    """Replay `config.input`: the reference engine's outputs and counters, faster."""
    if not config.input:
        raise ValueError("the polars engine needs an input path (or - for stdin)")
    started = time.perf_counter()
    params, limits = config.detection(), config.record_limits()
    progress = Progress(input_size(config.input), config.progress)
    # Blocks hold whole reference chunks, so that rejects keep the reference's order.
    block_lines = config.batch_size * max(1, BLOCK_LINES // config.batch_size)
    state = DetectState(params)
    summary = RunSummary()
    outputs = Outputs(config)
    try:
        for block in _blocks(config.input, limits, block_lines, progress.update):
            frame = block.loaded.frame
            detection = state.detect(frame)
            outputs.events(detection.events)
            _write_rejects(outputs, block, detection.late_rows, config)
            summary.records_read += frame.height + len(block.loaded.dead)
            summary.valid += frame.height
            summary.invalid += len(block.loaded.dead)
            summary.add_detector(detection.stats)
    finally:
        outputs.close()
    summary.elapsed_s = time.perf_counter() - started
    return summary


def _write_rejects(outputs: Outputs, block: Block, late_rows: list[int],
                   config: Config) -> None:
    """Dead letters and late records in the order the reference engine writes them: chunk
    by chunk (`batch_size` lines of one file), a chunk's dead letters before its lates."""
    frame = block.loaded.frame
    late = [_late_record(frame, row) for row in late_rows]
    if config.late_out:
        outputs.dead(block.loaded.dead)
        outputs.late(late)
        return
    if not late:
        outputs.dead(block.loaded.dead)
        return
    order: list[tuple[int, int, int, DeadLetter | ToolInvocation]] = []
    for letter in block.loaded.dead:
        line = int(letter.position)
        order.append(((line - 1) // config.batch_size, 0, line, letter))
    lines = frame["line"]
    for row, rec in zip(late_rows, late, strict=True):
        line = int(lines[row])
        order.append(((line - 1) // config.batch_size, 1, line, rec))
    order.sort(key=lambda entry: entry[:3])
    for _, kind, _, item in order:
        if kind == 0:
            outputs.dead([item])  # type: ignore[list-item]
        else:
            outputs.late([item])  # type: ignore[list-item]


def _late_record(frame: pl.DataFrame, row: int) -> ToolInvocation:
    picked = frame.select("record", "failure_mode").row(row)
    return record_of(picked[0], picked[1])
