"""A Hanzo bot runtime for `binloop demo --agent hanzo` and the tests: the bot's own
plugin loader, hook runner and tool adapters, run from its source.

Where the bot comes from, in order:

* `BINLOOP_HANZO_BOT_DIR`: a checkout of hanzoai/bot whose dependencies are installed
  (`node_modules` beside `src/`): used as it is;
* the `fetch` mirror's git directory of hanzoai/bot (`BINLOOP_HANZO_BOT_GIT`, default
  /work/.mirror/hanzoai+bot/repo): its `src/`, `package.json` and the resource files the
  source reads are extracted at HEAD into the cache (`~/.cache/binloop/toolchain/
  hanzo-bot-<commit>/`), and the dependencies its package.json pins are installed there
  once with npm (`--ignore-scripts`), except those only GitHub serves (`EXCLUDED`: the
  machine reaches npm, not GitHub; the code paths binloop runs do not import them).

Nothing of the bot is part of binloop's repository; nothing is compiled or bundled: its
TypeScript runs through jiti, as the bot itself loads plugins.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from binloop.core.fsutil import exclusive_lock
from pipeline_runner.toolchain import (
    ToolchainUnavailable,
    ensure_npm_packages,
    node_binary,
    toolchain_dir,
)

DEFAULT_GIT_DIR: Final = Path("/work/.mirror/hanzoai+bot/repo")
SOURCE_PATHS: Final = ("src", "package.json",
                        "apps/shared/OpenClawKit/Sources/OpenClawKit/Resources")
EXCLUDED: Final = {"@hanzo/iam": "served from GitHub only",
                   "@whiskeysockets/baileys": "depends on a GitHub-only package (WhatsApp)"}


class BotUnavailable(RuntimeError):
    """No Hanzo bot source (or its dependencies could not be installed)."""


@dataclass(frozen=True)
class HanzoBot:
    root: Path          # holds src/, package.json and node_modules/
    node: Path
    commit: str

    @property
    def bundled_dir(self) -> Path:
        """An empty directory: OPENCLAW_BUNDLED_PLUGINS_DIR (bundled plugins off)."""
        path = self.root / ".binloop-no-bundled-plugins"
        path.mkdir(exist_ok=True)
        return path


def git_dir() -> Path | None:
    path = Path(os.environ.get("BINLOOP_HANZO_BOT_GIT", DEFAULT_GIT_DIR))
    return path if (path / "HEAD").is_file() else None


def ensure_bot(cache_dir: Path | None = None) -> HanzoBot:
    """The bot runtime (see the module docstring); raises BotUnavailable with the reason."""
    try:
        node = node_binary()
    except ToolchainUnavailable as exc:
        raise BotUnavailable(str(exc)) from None
    given = os.environ.get("BINLOOP_HANZO_BOT_DIR")
    if given:
        root = Path(given).resolve()
        if not (root / "src/plugins/loader.ts").is_file() or not (root / "node_modules").is_dir():
            raise BotUnavailable(f"BINLOOP_HANZO_BOT_DIR={given} is not a hanzoai/bot checkout "
                                 "with node_modules")
        return HanzoBot(root, node, "local")
    source = git_dir()
    if source is None:
        raise BotUnavailable("no Hanzo bot: set BINLOOP_HANZO_BOT_DIR to a hanzoai/bot checkout "
                             "with its dependencies, or BINLOOP_HANZO_BOT_GIT to a git "
                             "directory of it")
    cache = toolchain_dir(cache_dir).resolve()
    commit = _git(source, "rev-parse", "HEAD").decode().strip()
    root = cache / f"hanzo-bot-{commit[:12]}"
    marker = root / ".binloop-ready"
    if marker.is_file():
        return HanzoBot(root, node, commit)
    package = orjson.loads(_git(source, "show", "HEAD:package.json"))
    deps = {name: version for name, version in package.get("dependencies", {}).items()
            if name not in EXCLUDED}
    digest = hashlib.sha256(orjson.dumps(deps, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]
    try:
        modules = ensure_npm_packages(cache, f"hanzo-bot-deps-{digest}", deps, optional=True)
    except ToolchainUnavailable as exc:
        raise BotUnavailable(f"the bot's dependencies did not install: {exc}") from None
    cache.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache / ".install.lock"):
        if marker.is_file():
            return HanzoBot(root, node, commit)
        shutil.rmtree(root, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix=".bot-", dir=cache) as tmp:
            archive = _git(source, "archive", "HEAD", *SOURCE_PATHS)
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(tmp, filter=_safe_member)
            (Path(tmp) / "node_modules").symlink_to(modules / "node_modules")
            (Path(tmp) / ".binloop-ready").write_text(commit + "\n")
            Path(tmp).chmod(0o755)
            Path(tmp).rename(root)
    return HanzoBot(root, node, commit)


def _safe_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, skipping what it refuses (the bot's tree holds a test
    symlink to an absolute path) instead of failing."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def _git(git: Path, *args: str) -> bytes:
    try:
        return subprocess.run(["git", f"--git-dir={git}", *args], capture_output=True,
                              check=True, timeout=300).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise BotUnavailable(f"cannot read the bot from {git}: {exc}") from None
