"""The real Hanzo bot for tests: its source from the `fetch` mirror of hanzoai/bot.

Nothing of the bot is committed to binloop: tests read its files from the mirror's git
directory (`BINLOOP_HANZO_BOT_GIT`, default /work/.mirror/hanzoai+bot/repo) and extract
what they run into a temporary directory at test time.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

DEFAULT_GIT_DIR = Path("/work/.mirror/hanzoai+bot/repo")


def git_dir() -> Path | None:
    path = Path(os.environ.get("BINLOOP_HANZO_BOT_GIT", DEFAULT_GIT_DIR))
    return path if (path / "HEAD").is_file() else None


def require_git_dir() -> Path:
    found = git_dir()
    if found is None:
        pytest.skip("no hanzoai/bot snapshot (fetch github:hanzoai/bot, or set "
                    "BINLOOP_HANZO_BOT_GIT to its git directory)")
    return found


def show(path: str) -> str:
    """One file of the bot at its snapshot's HEAD."""
    return subprocess.run(["git", f"--git-dir={require_git_dir()}", "show", f"HEAD:{path}"],
                          capture_output=True, text=True, check=True).stdout


def extract(target: Path, paths: list[str]) -> Path:
    """`paths` of the bot's HEAD written under `target` (returned)."""
    archive = subprocess.run(["git", f"--git-dir={require_git_dir()}", "archive", "HEAD",
                              *paths], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target
