"""Designers that misbehave on purpose (importable as `tests.designers:<factory>`)."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

from binloop.core.events import BINEvent
from binloop.library.manifest import Manifest
from pipeline_runner.design import Design, NoDesign
from pipeline_runner.designers.offline import OfflineDesigner


class NoDesignDesigner:
    name = "no-design"

    def design(self, event: BINEvent, manifest: Manifest) -> Design:
        raise NoDesign("this designer never designs")

    def implement(self, design: Design, target: str) -> dict[str, str]:
        raise AssertionError("implement must not be called without a design")


class CrashingDesigner(NoDesignDesigner):
    name = "crashing"

    def design(self, event: BINEvent, manifest: Manifest) -> Design:
        raise RuntimeError("designer bug")


class SlowDesigner(NoDesignDesigner):
    name = "slow"

    def __init__(self, seconds: float = 5.0) -> None:
        self.seconds = seconds

    def design(self, event: BINEvent, manifest: Manifest) -> Design:
        time.sleep(self.seconds)
        raise NoDesign("too late anyway")


class RenamingDesigner(OfflineDesigner):
    """The offline design with another (possibly unsafe) name."""

    def __init__(self, new_name: str) -> None:
        super().__init__()
        self.new_name = new_name

    def design(self, event: BINEvent, manifest: Manifest) -> Design:
        return dataclasses.replace(super().design(event, manifest), name=self.new_name)


class ScriptedSourceDesigner(OfflineDesigner):
    """The offline design, implemented by a given source (a bug, a hostile tool...)."""

    name = "scripted"

    def __init__(self, sources: dict[str, str]) -> None:
        super().__init__()
        self.sources = sources

    def implement(self, design: Design, target: str) -> dict[str, str]:
        entry = "tool.py" if target == "python" else "index.ts"
        return {entry: self.sources[target].replace("__NAME__", design.name)}


def no_design(config: Any = None) -> NoDesignDesigner:
    return NoDesignDesigner()


def crashing(config: Any = None) -> CrashingDesigner:
    return CrashingDesigner()


class BlockingOfflineDesigner(OfflineDesigner):
    """The offline designer, holding every design until `RELEASE` is set."""

    RELEASE = threading.Event()
    STARTED: list[str] = []

    def design(self, event: BINEvent, manifest: Manifest) -> Design:
        self.STARTED.append(event["event_id"])
        if not self.RELEASE.wait(120):
            raise NoDesign("never released")
        return super().design(event, manifest)


def blocking_offline(config: Any = None) -> BlockingOfflineDesigner:
    return BlockingOfflineDesigner(config)
