"""Matplotlib on the Agg backend (no display), imported only where plots are written."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """`matplotlib.pyplot` with the Agg backend; a clear error where matplotlib is absent."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install 'binloop[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path.name
