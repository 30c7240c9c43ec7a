"""`binloop tools`: inspect and manage a tool library.

    binloop tools list       --library DIR [--json]
    binloop tools show NAME  --library DIR [--json]
    binloop tools promote NAME     --library DIR [--reason TEXT]
    binloop tools quarantine NAME  --library DIR [--reason TEXT]
    binloop tools rollback NAME    --library DIR [--to VERSION]
    binloop tools apply --telemetry FILE --library DIR   (count uses, promote/quarantine)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from binloop.core.config import add_arguments, load_config


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
                                        "quarantines)")):
        sub = actions.add_parser(action, help=help_text)
        if action not in ("list", "apply"):
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
    try:
        return int(_ACTIONS[args.action](args, config, library))
    except KeyError as exc:
        print(f"binloop tools {args.action}: {exc.args[0]}", file=sys.stderr)
        return 2


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
        print(f"{row['name']:<50} v{row['version']:<3} {row['status']:<12} {row['target']:<10} "
              f"ok {row['uses_ok']:<3} failed {row['uses_failed']:<3} "
              f"{row['tool']} / {row['failure_mode']}")
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
            print(f"{key:>14}: {entry[key]}")
        for rel, digest in sorted(entry["files"].items()):
            print(f"{'file':>14}: {digest[:16]}  {rel}")
        for old in entry["history"]:
            print(f"{'history':>14}: v{old['version']} {old['status']} {old['created']}")
    return 1 if entry["modified_files"] else 0


def _status(status: str) -> Any:
    def change(args: argparse.Namespace, config: Any, library: Any) -> int:
        library.entry(args.name)
        written = library.set_status(args.name, status, args.reason)
        note = f"manifest version {written['version']}" if written else "unchanged"
        print(f"{args.name}: {status} ({note})")
        return 0
    return change


def _rollback(args: argparse.Namespace, config: Any, library: Any) -> int:
    from binloop.library.manifest import ManifestError

    try:
        written = library.rollback(args.name, args.to)
    except ManifestError as exc:
        print(f"binloop tools rollback: {exc}", file=sys.stderr)
        return 2
    entry = written["tools"][args.name]
    print(f"{args.name}: active version {entry['version']} ({entry['status']}), manifest "
          f"version {written['version']}")
    return 0


def _apply(args: argparse.Namespace, config: Any, library: Any) -> int:
    from binloop.core.schema import InvalidRecord, parse_record
    from pipeline_runner.factory import policy_of
    from pipeline_runner.lifecycle import apply_telemetry

    records, invalid = [], 0
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
            print(f"{change.name} v{change.version}: {change.old} -> {change.new}")
    return 0


_ACTIONS = {"list": _list, "show": _show, "promote": _status("stable"),
            "quarantine": _status("quarantined"), "rollback": _rollback, "apply": _apply}
