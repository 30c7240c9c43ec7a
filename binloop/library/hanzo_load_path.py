"""The Hanzo bot load path of a library: one binloop proxy plugin per active tool.

`<library>/hanzo-plugins/` is the directory a Hanzo bot (or OpenClaw) lists in
`plugins.load.paths`. It holds exactly one plugin directory per tool whose active
version is `stable` or `probationary` (quarantined and rolled-back versions are not
discoverable), named by the plugin id `binloop-<tool-with-dashes>`, which is also its
package name and its manifests' id (the loader checks all three):

    binloop-<tool>/openclaw.plugin.json  bot.plugin.json  package.json (openclaw.extensions)
                   index.ts (the proxy)  host_client.ts

The proxy plugin is binloop's own code: its execute forwards each call to the sandboxed
tool host (`python -m pipeline_runner.sandbox.host --library DIR`); the generated tool
itself is never on the load path, so the bot's loader never imports it. A tool whose
`tool.json` names a tool in `invokes` (a wrapper) gets that one tool of the bot, called
through the bot's `POST /tools/invoke` (docs/hanzo.md). The directory is
opt-in (`binloop tools hanzo-plugins --library DIR` creates it) and, once there, is
rewritten after every manifest change (gate, promotion, quarantine, rollback, revert),
built aside and swapped in. The bot reads it when it loads plugins (at start); the tool
host also re-checks the manifest on every call, so a withdrawn tool stops at once even
in a bot that has not restarted.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

import orjson

from binloop.library import manifest as mf

LOAD_PATH_DIR: Final = "hanzo-plugins"
MARKER: Final = ".binloop-load-path"
ACTIVE: Final = ("stable", "probationary")
TEMPLATES: Final = Path(__file__).resolve().parent / "hanzo_proxy"
CONFIG_SCHEMA: Final = {"type": "object", "additionalProperties": False, "properties": {}}


def plugin_id(tool: str) -> str:
    return "binloop-" + tool.replace("_", "-")


def load_path(library_root: Path) -> Path:
    return library_root / LOAD_PATH_DIR


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def _tool_meta(library_root: Path, entry: mf.ToolEntry) -> dict[str, Any]:
    try:
        meta = orjson.loads((library_root / entry["path"] / "tool.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def proxy_files(library_root: Path, entry: mf.ToolEntry, python: str) -> dict[str, bytes]:
    """The files of one tool's proxy plugin directory."""
    name = entry["name"]
    pid = plugin_id(name)
    meta = _tool_meta(library_root, entry)
    description = str(meta.get("description") or f"binloop tool {name}")[:1000]
    parameters = meta.get("input_schema") if isinstance(meta.get("input_schema"), dict) \
        else {"type": "object"}
    invokes = meta.get("invokes")
    if not isinstance(invokes, list):
        invokes = []
    fill = {"id": pid, "tool": name, "version": entry["version"],
            "label": name.replace("_", " "), "description": description,
            "parameters": parameters, "python": python, "library": str(library_root),
            "invokes": [str(tool) for tool in invokes]}
    template = (TEMPLATES / "index.ts").read_text(encoding="utf-8")
    lines = []
    for line in template.splitlines():
        if line.endswith("// binloop:fill"):
            head = line.split(" = ", 1)[0]
            # JSON is a TS expression; escaping U+2028/9 keeps it one valid line.
            value = orjson.dumps(fill).decode().replace("\u2028", "\\u2028") \
                .replace("\u2029", "\\u2029")
            line = f"{head} = {value};"
        lines.append(line)
    # `contracts.tools`: the openclaw package's loader requires it (the bot ignores it).
    manifest = _json({"id": pid, "name": name, "description": description,
                      "configSchema": CONFIG_SCHEMA, "contracts": {"tools": [name]}})
    return {
        "index.ts": ("\n".join(lines) + "\n").encode(),
        "host_client.ts": (TEMPLATES / "host_client.ts").read_bytes(),
        "openclaw.plugin.json": manifest,
        "bot.plugin.json": manifest,
        "package.json": _json({"name": pid, "version": f"{entry['version']}.0.0",
                               "private": True, "type": "module", "description": description,
                               "openclaw": {"extensions": ["./index.ts"]},
                               "binloop": {"tool": name, "version": entry["version"],
                                           "status": entry["status"]}}),
    }


def write_load_path(library_root: Path, manifest: mf.Manifest,
                    python: str | None = None) -> Path:
    """(Re)write the load path for `manifest`; returns it."""
    target = load_path(library_root)
    python = python or os.environ.get("BINLOOP_PYTHON") or sys.executable
    build = Path(tempfile.mkdtemp(prefix=".hanzo-plugins-", dir=library_root))
    try:
        for name in sorted(manifest["tools"]):
            entry = manifest["tools"][name]
            if entry["status"] not in ACTIVE:
                continue
            plugin_dir = build / plugin_id(name)
            plugin_dir.mkdir()
            for rel, data in proxy_files(library_root, entry, python).items():
                (plugin_dir / rel).write_bytes(data)
        (build / MARKER).write_text(python + "\n")
        build.chmod(0o755)
        old = None
        if target.exists():
            old = library_root / f".hanzo-plugins-old-{os.getpid()}"
            os.rename(target, old)
        os.rename(build, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return target


def sync_if_present(library_root: Path, manifest: mf.Manifest) -> None:
    """Rewrite the load path after a manifest change, if the library has one."""
    marker = load_path(library_root) / MARKER
    if marker.is_file():
        python = marker.read_text().strip() or None
        write_load_path(library_root, manifest, python)
