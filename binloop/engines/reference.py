"""The plain-Python reference engine: read, validate, detect, write. No Bytewax.

This is the executable specification of a replay: records are taken in file order,
rejects go to the dead-letter output, and `binloop.core.detection.Detector` decides.
"""

from __future__ import annotations

import time

from binloop.core.config import Config
from binloop.core.detection import Detector
from binloop.core.events import BINEvent
from binloop.core.schema import ToolInvocation
from binloop.core.summary import Progress, RunSummary
from binloop.replay.engine_outputs import Outputs
from binloop.replay.ingest import parse_chunk
from binloop.replay.readers import InputReader, input_size


def run_reference(config: Config) -> RunSummary:
    """Replay `config.input` through the detector; returns the run's counters."""
    if not config.input:
        raise ValueError("the reference engine needs an input path (or - for stdin)")
    started = time.perf_counter()
    params, limits = config.detection(), config.record_limits()
    detector = Detector(params)
    summary = RunSummary()
    outputs = Outputs(config)
    options = config.read_options()
    progress = Progress(input_size(config.input, options.follow_symlinks), config.progress)
    reader = InputReader(config.input, config.batch_size, input_format=config.input_format,
                         options=options)
    try:
        for chunk in reader:
            parsed = parse_chunk(chunk, limits)
            summary.records_read += len(chunk.items) - parsed.blank + len(chunk.rejects)
            summary.damaged_files += chunk.damaged_files
            summary.ts_converted += parsed.ts_converted
            summary.valid += len(parsed.records)
            summary.invalid += len(parsed.dead)
            outputs.dead(parsed.dead)
            fired, late = detect_records(detector, parsed.records)
            outputs.events(fired)
            outputs.late([parsed.records[index] for index in late])
            progress.update(reader.bytes_done, summary.records_read)
    finally:
        reader.close()
        outputs.close()
    summary.add_detector(detector.stats)
    summary.elapsed_s = time.perf_counter() - started
    return summary


def detect_records(detector: Detector, records: list[ToolInvocation]
                   ) -> tuple[list[BINEvent], list[int]]:
    """Records in arrival order through the detector: the events fired, and the
    indexes of the records that came late. Records that do not count are skipped."""
    fired: list[BINEvent] = []
    late: list[int] = []
    for index, rec in enumerate(records):
        if detector.params.counts(rec):
            seen = detector.observe(rec)
            if seen.event is not None:
                fired.append(seen.event)
            elif seen.status == "late":
                late.append(index)
    return fired, late
