"""Running one stage: a deadline, and a verdict (ok, failed, timeout, crashed).

In-process stages (pause, design, implement) run in a worker thread joined with the
stage timeout; a stage that overruns is reported as `timeout` and its thread is left
to finish on its own (designers bound their own network calls too). Sandboxed stages
carry their own wall-clock limit; their timeouts are reported the same way.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from binloop.core.names import UnsafeName
from pipeline_runner.audit import StageOutcome, StageRecord
from pipeline_runner.design import InvalidDesign, NoDesign
from pipeline_runner.sandbox import SandboxUnavailable
from pipeline_runner.toolchain import ToolchainUnavailable

T = TypeVar("T")
STAGES = ("pause", "design", "build", "check", "test", "gate", "reload", "resume")
EXPECTED_FAILURES = (NoDesign, InvalidDesign, UnsafeName, ToolchainUnavailable,
                     SandboxUnavailable)


class StageError(Exception):
    """A stage's own verdict that it failed (e.g. a sandboxed check), with details."""

    def __init__(self, reason: str, detail: dict[str, Any] | None = None,
                 timed_out: bool = False) -> None:
        super().__init__(reason)
        self.detail = detail or {}
        self.timed_out = timed_out


class StageFailed(Exception):
    """A stage's verdict was not ok; carries its record."""

    def __init__(self, record: StageRecord) -> None:
        super().__init__(record.reason)
        self.record = record


@dataclass
class _Box(Generic[T]):
    value: T | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def call_with_deadline(fn: Callable[[], T], timeout_s: float) -> T:
    """`fn()` in a daemon thread; raises TimeoutError if it has not returned in time."""
    box: _Box[T] = _Box()

    def work() -> None:
        try:
            box.value = fn()
        except BaseException as exc:  # handed to the caller
            box.error = exc
        finally:
            box.done.set()

    threading.Thread(target=work, daemon=True, name="binloop-stage").start()
    if not box.done.wait(timeout_s):
        raise TimeoutError(f"did not finish within {timeout_s:g}s")
    if box.error is not None:
        raise box.error
    return box.value  # type: ignore[return-value]


def run_stage(name: str, fn: Callable[[], T], timeout_s: float | None,
              records: list[StageRecord],
              detail_of: Callable[[T], dict[str, Any]] | None = None) -> T:
    """Run a stage, append its record, and raise :class:`StageFailed` unless it was ok."""
    started = time.perf_counter()
    outcome: StageOutcome = "ok"
    reason = ""
    detail: dict[str, Any] = {}
    result: T | None = None
    try:
        result = fn() if timeout_s is None else call_with_deadline(fn, timeout_s)
        if detail_of is not None:
            detail = detail_of(result)
    except StageError as exc:
        outcome = "timeout" if exc.timed_out else "failed"
        reason, detail = f"{name}: {exc}", exc.detail
    except TimeoutError as exc:
        outcome, reason = "timeout", f"{name} timed out: {exc}"
    except EXPECTED_FAILURES as exc:
        outcome, reason = "failed", f"{name}: {exc}"
    except Exception as exc:  # a crash of the stage (designer or target bug)
        outcome, reason = "crashed", f"{name} crashed: {exc!r}"
        detail = {"traceback": traceback.format_exc(limit=8)[-3000:]}
    record = StageRecord(name, outcome, round((time.perf_counter() - started) * 1000, 2),
                         reason, detail)
    records.append(record)
    if outcome != "ok":
        raise StageFailed(record)
    return result  # type: ignore[return-value]
