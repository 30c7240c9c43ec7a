"""`binloop tools`: inspect and manage a tool library.

    binloop tools list       --library DIR [--json]
    binloop tools show NAME  --library DIR [--json]
    binloop tools promote NAME     --library DIR [--reason TEXT]
    binloop tools quarantine NAME  --library DIR [--reason TEXT]
    binloop tools rollback NAME    --library DIR [--to VERSION]
    binloop tools apply --telemetry FILE --library DIR   (count uses, promote/quarantine)
    binloop tools hanzo-plugins    --library DIR   (the Hanzo bot load path: docs/hanzo.md)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson

from binloop.core.config import add_arguments, load_config
from binloop.core.display import shown
from binloop.core.errors import InputError, UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("tools", help="list, show, promote, quarantine or roll back "
                                                 "tools of a library")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, help_text in (("list", "list the library's tools"),
                              ("show", "show one tool (all versions, file hashes verified)"),
                              ("promote", "mark a tool stable by hand"),
                              ("quarantine", "quarantine a tool by hand"),
                              ("rollback", "make an earlier version of a tool the active one"),
                              ("apply", "count the uses in a telemetry file (promotions, "
                                        "quarantines)"),
                              ("hanzo-plugins", "write the library's Hanzo bot load path (a "
                                                "proxy plugin per active tool), kept in step "
                                                "with the manifest from then on")):
        sub = actions.add_parser(action, help=help_text)
        if action not in ("list", "apply", "hanzo-plugins"):
            sub.add_argument("name", help="tool name")
        if action in ("promote", "quarantine"):
            sub.add_argument("--reason", default="by hand", help="why (kept in the manifest)")
        if action == "rollback":
            sub.add_argument("--to", type=int, metavar="VERSION",
                             help="version to restore (default: the previous one)")
        if action == "apply":
            sub.add_argument("--telemetry", required=True, metavar="FILE",
                             help="telemetry JSONL whose records are uses of library tools")
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        add_arguments(sub, "tools")
        sub.set_defaults(func=run)


def _print_json(value: Any) -> None:
    print(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())


def run(args: argparse.Namespace) -> int:
    from pipeline_runner.factory import library_of

    config = load_config(args)
    library = library_of(config)
    if not library.root.is_dir():
        raise InputError(f"no tool library at {library.root}")
    try:
        return int(_ACTIONS[args.action](args, config, library))
    except KeyError as exc:
        raise InputError(shown(exc.args[0])) from None


def _list(args: argparse.Namespace, config: Any, library: Any) -> int:
    manifest = library.read()
    rows = [{"name": e["name"], "version": e["version"], "status": e["status"],
             "tool": e["answers"]["tool"], "failure_mode": e["answers"]["failure_mode"],
             "target": e["target"], "uses_ok": e["uses"]["ok"], "uses_failed": e["uses"]["failed"],
             "created": e["created"]} for e in manifest["tools"].values()]
    if args.json:
        _print_json({"manifest_version": manifest["version"], "tools": rows})
        return 0
    print(f"manifest version {manifest['version']}, {len(rows)} tools")
    for row in rows:
        print(f"{shown(row['name']):<50} v{row['version']:<3} {row['status']:<12} "
              f"{row['target']:<10} ok {row['uses_ok']:<3} failed {row['uses_failed']:<3} "
              f"{shown(row['tool'])} / {shown(row['failure_mode'])}")
    return 0


def _show(args: argparse.Namespace, config: Any, library: Any) -> int:
    entry = dict(library.entry(args.name))
    entry["modified_files"] = library.verify(args.name)
    if args.json:
        _print_json(entry)
    else:
        for key in ("name", "version", "status", "status_reason", "target", "path", "entry",
                    "created", "uses", "answers", "event_id", "designer", "description",
                    "modified_files"):
            value = entry[key]
            if key == "answers":
                value = f"{shown(value['tool'])} / {shown(value['failure_mode'])}"
            print(f"{key:>14}: {shown(value) if isinstance(value, str) else value}")
        for rel, digest in sorted(entry["files"].items()):
            print(f"{'file':>14}: {digest[:16]}  {shown(rel)}")
        for old in entry["history"]:
            print(f"{'history':>14}: v{old['version']} {old['status']} {old['created']}")
    return 1 if entry["modified_files"] else 0


def _status(status: str) -> Any:
    def change(args: argparse.Namespace, config: Any, library: Any) -> int:
        library.entry(args.name)
        written = library.set_status(args.name, status, args.reason)
        note = f"manifest version {written['version']}" if written else "unchanged"
        print(f"{shown(args.name)}: {status} ({note})")
        return 0
    return change


def _rollback(args: argparse.Namespace, config: Any, library: Any) -> int:
    from binloop.library.manifest import ManifestError

    try:
        written = library.rollback(args.name, args.to)
    except ManifestError as exc:
        raise UsageError(str(exc)) from None
    entry = written["tools"][args.name]
    print(f"{shown(args.name)}: active version {entry['version']} ({entry['status']}), manifest "
          f"version {written['version']}")
    return 0


def _hanzo_plugins(args: argparse.Namespace, config: Any, library: Any) -> int:
    from binloop.library.hanzo_load_path import write_load_path

    manifest = library.read()
    path = write_load_path(library.root, manifest)
    plugins = sorted(p.name for p in path.iterdir() if p.is_dir())
    if args.json:
        _print_json({"load_path": str(path), "plugins": plugins})
    else:
        print(f"load path {path} ({len(plugins)} plugins): set plugins.load.paths to it")
        for name in plugins:
            print(f"  {name}")
    return 0


def _apply(args: argparse.Namespace, config: Any, library: Any) -> int:
    from binloop.core.schema import InvalidRecord, parse_record
    from pipeline_runner.factory import policy_of
    from pipeline_runner.lifecycle import apply_telemetry

    records, invalid = [], 0
    if not Path(args.telemetry).is_file():
        raise InputError(f"telemetry file {args.telemetry} does not exist")
    with open(args.telemetry, "rb") as handle:
        for line in handle:
            if line.strip():
                try:
                    records.append(parse_record(line, config.record_limits()))
                except InvalidRecord:
                    invalid += 1
    changes = apply_telemetry(library, records, policy_of(config))
    summary = {"records": len(records), "invalid": invalid,
               "changes": [{"name": c.name, "version": c.version, "from": c.old, "to": c.new}
                           for c in changes]}
    if args.json:
        _print_json(summary)
    else:
        print(f"{len(records)} records ({invalid} invalid), {len(changes)} status changes")
        for change in changes:
            print(f"{shown(change.name)} v{change.version}: {change.old} -> {change.new}")
    return 0


_ACTIONS = {"list": _list, "show": _show, "promote": _status("stable"),
            "quarantine": _status("quarantined"), "rollback": _rollback, "apply": _apply,
            "hanzo-plugins": _hanzo_plugins}
