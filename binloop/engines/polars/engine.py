"""The polars engine: FRICTION-DETECT over a whole replay at once, vectorised.

Same input, same output as the reference engine (`binloop.engines.reference`) and as
`binloop.core.detection`, the executable spec: the same BINEvents (content and order), dead
letters (reasons, positions, order), late records and counters. It is for fast replays (`binloop
detect --engine polars`, :func:`run_polars`) and sweeps: load a file once with
:func:`load_records`, then :func:`detect_frame` it under many parameter sets.

Parts: `binloop.engines.polars.load` and `binloop.engines.polars.proof` (reading: a fast path
that proves lines valid, the reference parser for the rest), `binloop.engines.polars.detect`
(detection: regular keys as column expressions, `binloop.engines.polars.windows`, the detector's
clock, `binloop.engines.polars.clock`, and `binloop.core.detection.Detector` itself for
irregular keys).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from binloop.core.config import Config
from binloop.core.detection import DetectionParams
from binloop.core.events import BINEvent
from binloop.core.schema import ToolInvocation
from binloop.core.summary import Progress, RunSummary
from binloop.engines.polars.detect import Detection, detect_rows
from binloop.engines.polars.frame import record_of, records_frame
from binloop.engines.polars.load import LoadedRecords, load_file, load_records
from binloop.replay.inputs import READER_REJECT, STDIN, input_size, list_input_files, reader_chunks
from binloop.replay.outputs import Outputs

__all__ = ["Detection", "LoadedRecords", "detect_frame", "detect_rows", "load_records",
           "records_frame", "run_polars"]


def detect_frame(records: pl.DataFrame | LoadedRecords,
                 params: DetectionParams) -> list[BINEvent]:
    """The BINEvents of a frame of valid records in arrival order (see `load_records`)."""
    return detect_rows(records, params).events


# --- a replay, as `binloop detect --engine polars` ----------------------------------


def run_polars(config: Config) -> RunSummary:
    """Replay `config.input`: the reference engine's outputs and counters, faster."""
    if not config.input:
        raise ValueError("the polars engine needs an input path (or - for stdin)")
    started = time.perf_counter()
    params, limits = config.detection(), config.record_limits()
    options = config.read_options()
    progress = Progress(input_size(config.input, options.follow_symlinks), config.progress)
    files: list[LoadedRecords] = []
    done_bytes = done_lines = 0
    for name in list_input_files(config.input, options.follow_symlinks):
        def report(file_bytes: int, file_lines: int, base: tuple[int, int] =
                   (done_bytes, done_lines)) -> None:
            progress.update(base[0] + file_bytes, base[1] + file_lines)
        part = load_file(name, limits, report, config.input_format, options)
        files.append(part)
        done_bytes += _size(name)
        done_lines += part.frame.height + len(part.dead) - part.damaged + part.blank
    frame = pl.concat([f.frame for f in files]) if files else records_frame([])
    detection = detect_rows(frame, params)
    outputs = Outputs(config)
    try:
        outputs.events(detection.events)
        _write_rejects(outputs, files, frame, detection.late_rows, config)
    finally:
        outputs.close()
    read = sum(f.frame.height + len(f.dead) if f.lines is None else f.lines for f in files)
    summary = RunSummary(records_read=read,
                         valid=frame.height, invalid=sum(len(f.dead) for f in files),
                         damaged_files=sum(f.damaged for f in files),
                         ts_converted=sum(f.ts_converted for f in files))
    summary.add_detector(detection.stats)
    summary.elapsed_s = time.perf_counter() - started
    return summary


def _size(name: str) -> int:
    return 0 if name == STDIN else Path(name).stat().st_size


def _write_rejects(outputs: Outputs, files: list[LoadedRecords], frame: pl.DataFrame,
                   late_rows: list[int], config: Config) -> None:
    """Dead letters and late records in the order the reference engine writes them: chunk
    by chunk (`batch_size` lines of one file), a chunk's dead letters before its lates."""
    file_of = np.cumsum([f.frame.height for f in files])
    late = [(int(np.searchsorted(file_of, row, side="right")), row) for row in late_rows]
    late_records = {row: _late_record(frame, row) for _, row in late}
    if config.late_out:
        outputs.dead(letter for f in files for letter in f.dead)
        outputs.late(late_records[row] for _, row in late)
        return
    order: list[tuple[int, int, int, int, Any]] = []
    chunk_of: list[Callable[[int], int]] = []
    for index, part in enumerate(files):
        rejected = [int(d.position) for d in part.dead if d.reason.startswith(READER_REJECT)]
        chunk_of.append(reader_chunks(rejected, config.batch_size))
        for letter in part.dead:
            # A damaged file's letter ("byte N", "row N") comes after all of its lines.
            line = int(letter.position) if letter.position.isdigit() else 1 << 62
            order.append((index, chunk_of[index](line), 0, line, letter))
    lines = frame["line"]
    for index, row in late:
        line = int(lines[row])
        order.append((index, chunk_of[index](line), 1, line, late_records[row]))
    order.sort(key=lambda entry: entry[:4])
    for entry in order:
        if entry[2] == 0:
            outputs.dead([entry[4]])
        else:
            outputs.late([entry[4]])


def _late_record(frame: pl.DataFrame, row: int) -> ToolInvocation:
    picked = frame.select("record", "failure_mode").row(row)
    return record_of(picked[0], picked[1])
