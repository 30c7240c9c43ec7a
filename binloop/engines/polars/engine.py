"""The polars engine: FRICTION-DETECT over a replay, vectorised, a block at a time.

Same input, same output as the reference engine (`binloop.engines.reference`) and as
`binloop.core.detection`, the executable spec: the same BINEvents (content and order), dead
letters (reasons, positions, order), late records and counters. Memory is bounded: the
input is read and detected in blocks of lines (`binloop.engines.polars.read`), with the
detection state carried from one block to the next (`binloop.engines.polars.detect`), so
peak memory depends on the block size and the number of keys, not on the input's size.

For sweeps: load a file once with :func:`load_records`, then :func:`detect_frame` (one
parameter set) or `detect_thetas` (every θ of one window in one pass).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from typing import Final

import polars as pl

from binloop.core.config import Config
from binloop.core.detection import DetectionParams
from binloop.core.events import BINEvent
from binloop.core.reading import DEFAULT_READ, ReadOptions
from binloop.core.schema import DEFAULT_LIMITS, DeadLetter, RecordLimits, ToolInvocation
from binloop.core.summary import Progress, RunSummary
from binloop.engines.polars.detect import Detection, DetectState, detect_rows, detect_thetas
from binloop.engines.polars.read import (
    Block,
    LoadedRecords,
    OnProgress,
    concat_blocks,
    file_blocks,
    record_of,
    records_frame,
)
from binloop.replay.engine_outputs import Outputs
from binloop.replay.formats import AUTO
from binloop.replay.readers import (
    READER_REJECT,
    STDIN,
    input_size,
    list_input_files,
    reader_chunks,
)

# Detection takes up to this many valid records at once, of at most DETECT_BLOCKS blocks
# (a block's records keep its lines' buffer alive: memory grows with the blocks held).
DETECT_ROWS: Final = 1 << 18
DETECT_BLOCKS: Final = 4

__all__ = ["Detection", "LoadedRecords", "detect_frame", "detect_rows", "detect_thetas",
           "load_records", "records_frame", "run_polars"]


def load_records(path: str, limits: RecordLimits = DEFAULT_LIMITS,
                 on_progress: OnProgress | None = None,
                 input_format: str = AUTO,
                 options: ReadOptions = DEFAULT_READ) -> LoadedRecords:
    """Every record of `path` (a file, a directory of them, or - for stdin) in memory.

    `on_progress(bytes_read, lines_read)` is called after each block, with totals so far."""
    return concat_blocks(_blocks(path, limits, on_progress, input_format, options))


def detect_frame(records: pl.DataFrame | LoadedRecords,
                 params: DetectionParams) -> list[BINEvent]:
    """The BINEvents of a frame of valid records in arrival order (see `load_records`)."""
    return detect_rows(records, params).events


def _blocks(path: str, limits: RecordLimits, on_progress: OnProgress | None,
            input_format: str = AUTO,
            options: ReadOptions = DEFAULT_READ) -> Iterator[Block]:
    bytes_before = lines_before = 0
    for name in list_input_files(path, options.follow_symlinks):
        done = 0
        for block in file_blocks(name, limits, input_format=input_format, options=options):
            done += block.lines
            if on_progress is not None:
                on_progress(bytes_before + block.done_bytes, lines_before + done)
            yield block
        lines_before += done
        size = input_size(name, options.follow_symlinks)
        bytes_before += size or 0


# --- a replay, as `binloop detect --engine polars` ----------------------------------


def run_polars(config: Config) -> RunSummary:
    """Replay `config.input`: the reference engine's outputs and counters, faster."""
    if not config.input:
        raise ValueError("the polars engine needs an input path (or - for stdin)")
    started = time.perf_counter()
    _freeze_once()
    params, limits = config.detection(), config.record_limits()
    options = config.read_options()
    progress = Progress(input_size(config.input, options.follow_symlinks), config.progress)
    state = DetectState(params)
    summary = RunSummary()
    outputs = Outputs(config)
    rejects = _Rejects(outputs, config)
    # Detection takes several blocks at a time: its cost is mostly per call. From stdin,
    # block by block (its events as soon as its records are in).
    batch_rows = 1 if config.input == STDIN else DETECT_ROWS
    batch: list[Block] = []
    rows = 0
    try:
        for block in _blocks(config.input, limits, progress.update, config.input_format,
                             options):
            frame = block.loaded.frame
            summary.records_read += (frame.height + len(block.loaded.dead)
                                     if block.loaded.lines is None else block.loaded.lines)
            summary.valid += frame.height
            summary.invalid += len(block.loaded.dead)
            summary.damaged_files += block.loaded.damaged
            summary.ts_converted += block.loaded.ts_converted
            batch.append(block)
            rows += frame.height
            if rows >= batch_rows or len(batch) >= DETECT_BLOCKS:
                _detect_blocks(state, batch, outputs, rejects, summary)
                batch, rows = [], 0
        _detect_blocks(state, batch, outputs, rejects, summary)
        rejects.flush()
    finally:
        outputs.close()
    summary.elapsed_s = time.perf_counter() - started
    return summary


def _detect_blocks(state: DetectState, blocks: list[Block], outputs: Outputs,
                   rejects: _Rejects, summary: RunSummary) -> None:
    """Detection over consecutive blocks at once; their late records and dead letters
    are written block by block, as when each block is detected alone."""
    if not blocks:
        return
    frames = [block.loaded.frame for block in blocks]
    detection = state.detect(frames[0] if len(frames) == 1 else pl.concat(frames))
    if detection.events:
        outputs.events(detection.events)
    start = 0
    for block, frame in zip(blocks, frames, strict=True):
        end = start + frame.height
        rejects.add(block, [row - start for row in detection.late_rows if start <= row < end])
        start = end
    summary.add_detector(detection.stats)


_FROZEN: list[bool] = []


def _freeze_once() -> None:
    """Leave what the imports made out of the collector's full passes: a replay makes
    few objects that live, and one full pass over a quarter-million module objects
    costs more than the detection of a block (measured with py-spy)."""
    if not _FROZEN:
        gc.freeze()
        _FROZEN.append(True)


class _Rejects:
    """Dead letters and late records in the order the reference engine writes them: chunk
    by chunk (`batch_size` lines of one file, a line the reader refused opening a new
    chunk: `binloop.replay.readers.reader_chunks`), a chunk's dead letters before its
    lates. A block's last chunk may go on in the next block: its rejects wait for it."""

    def __init__(self, outputs: Outputs, config: Config) -> None:
        self._outputs = outputs
        self._batch = config.batch_size
        self._separate = bool(config.late_out)
        self._source: str | None = None
        self._lines = 0  # lines of the current file in the blocks so far
        self._refused: list[int] = []  # lines of the current file the reader refused
        self._pending: list[tuple[int, int, DeadLetter | ToolInvocation]] = []

    def add(self, block: Block, late_rows: list[int]) -> None:
        frame = block.loaded.frame
        late = [_late_record(frame, row) for row in late_rows]
        if block.source != self._source:
            self.flush()
            self._source, self._lines, self._refused = block.source, 0, []
        self._lines += block.lines
        self._refused.extend(int(letter.position) for letter in block.loaded.dead
                             if letter.reason.startswith(READER_REJECT))
        if self._separate or (not late and not self._pending):
            if block.loaded.dead:
                self._outputs.dead(block.loaded.dead)
            if late:
                self._outputs.late(late)
            return
        for letter in block.loaded.dead:
            # A damaged file's letter ("byte N", "row N") comes after all of its lines.
            line = int(letter.position) if letter.position.isdigit() else 1 << 62
            self._pending.append((0, line, letter))
        lines = frame["line"]
        for row, rec in zip(late_rows, late, strict=True):
            self._pending.append((1, int(lines[row]), rec))
        self._write(self._lines if self._lines else None)

    def flush(self) -> None:
        self._write(None)

    def _write(self, open_line: int | None) -> None:
        """Write what is pending but the chunk of `open_line` (None: everything)."""
        chunk_of: Callable[[int], int] = reader_chunks(self._refused, self._batch)
        keep = None if open_line is None else chunk_of(open_line)
        order = sorted(((chunk_of(line), kind, line, item)
                        for kind, line, item in self._pending), key=lambda entry: entry[:3])
        self._pending = [(kind, line, item) for chunk, kind, line, item in order
                         if chunk == keep]
        for chunk, kind, _, item in order:
            if chunk == keep:
                continue
            if kind == 0:
                self._outputs.dead([item])  # type: ignore[list-item]
            else:
                self._outputs.late([item])  # type: ignore[list-item]


def _late_record(frame: pl.DataFrame, row: int) -> ToolInvocation:
    picked = frame.select("record", "failure_mode").row(row)
    return record_of(picked[0], picked[1])
