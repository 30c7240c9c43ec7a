"""Designers: turn a BINEvent into a tool design and a design into source files.

The protocol (any object with these members; select one with `--designer NAME` or
`--designer package.module:factory`, where `factory(config)` returns the designer):

* ``name: str``
* ``design(event, manifest) -> Design``: the event's evidence is already redacted and
  cut to at most 3 records; `manifest` is the library's current manifest (to avoid
  duplicates and name clashes). Raise :class:`~pipeline_runner.design.NoDesign` to
  decline, :class:`~pipeline_runner.design.InvalidDesign` for unusable output.
* ``implement(design, target) -> dict[str, str]``: the tool's source files by relative
  path; for `python` exactly ``{"tool.py": ...}``, for `typescript` exactly
  ``{"index.ts": ...}``. The target adds metadata and acceptance tests itself.

Built in: `offline` (the default; deterministic, no network), `anthropic`, `openai`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from binloop.core.events import BINEvent
from binloop.library.manifest import Manifest
from pipeline_runner.design import Design

if TYPE_CHECKING:
    from binloop.core.config import Config

BUILTIN = {
    "offline": "pipeline_runner.designers.offline:OfflineDesigner",
    "anthropic": "pipeline_runner.designers.anthropic_designer:from_config",
    "openai": "pipeline_runner.designers.openai_designer:from_config",
}


@runtime_checkable
class Designer(Protocol):
    name: str

    def design(self, event: BINEvent, manifest: Manifest) -> Design: ...

    def implement(self, design: Design, target: str) -> dict[str, str]: ...


def load_designer(spec: str, config: Config | None = None) -> Designer:
    """A designer by built-in name or `module:factory` import path."""
    path = BUILTIN.get(spec, spec)
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"designer {spec!r}: give a built-in name ({', '.join(BUILTIN)}) "
                         "or module:factory")
    factory: Any = getattr(importlib.import_module(module_name), attr)
    designer = factory(config) if config is not None else factory()
    if not isinstance(designer, Designer):
        raise TypeError(f"designer {spec!r} does not implement design() and implement()")
    return designer
