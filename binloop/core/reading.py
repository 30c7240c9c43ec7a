"""How input files are read: the settings the replay reader takes (binloop.replay.readers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from binloop.core.schema import LINE_MAX_BYTES


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Settings `max_line_bytes` (a longer line is refused as it streams by) and
    `follow_symlinks` (read symbolic links found in an input directory)."""

    max_line_bytes: int = LINE_MAX_BYTES
    follow_symlinks: bool = False


DEFAULT_READ: Final = ReadOptions()
