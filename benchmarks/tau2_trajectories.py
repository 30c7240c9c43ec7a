"""A second set of real agent trajectories: tau2-bench leaderboard submissions -> records.

    python -m benchmarks.tau2_trajectories --git-dir DIR --out FILE

Source: the public repository sierra-research/tau2-bench (MIT licence), brought here
with the search tool's `fetch` (DIR is that snapshot's git directory; nothing of it is
committed). Its leaderboard submissions held agent trajectories (`*/trajectories/*.json`,
removed from the tree later, still in its history); every such file whose content the
snapshot holds is read, in path order: other agents (GPT-5 ToolOrchestra, gpt-oss
LangChain, Claude Sonnet/Opus, GPT-5.4 based agents) and other domains (retail, medical
triage) than the tau-bench airline file of ../shared/data.

Each tool message of a simulation is one record: `tool` and `args` from the assistant's
tool call it answers, `outcome` failure when the tool's answer starts with `Error:` (how
tau2's environment reports a tool's exception), `error` that answer; `session_id` the
file's stem and the simulation's index; `ts` a synthetic clock (one hour per simulation,
two seconds per turn: the files' own times are placeholders).

Labels: the data carries no failure codes. They were assigned by hand, here, per message
family (`LABELS`), from the taxonomy's definitions, by the author of binloop's rules:
that makes agreement an optimistic figure (the labeller knew the rules), stated as such
beside the results.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
from pathlib import Path
from typing import Any

# (pattern over the error text, failure mode), first match wins.
LABELS: tuple[tuple[str, str], ...] = (
    (r"Patient .*not found", "NOTFOUND.patient"),
    (r"User not found", "NOTFOUND.user"),
    (r"Order not found", "NOTFOUND.order"),
    (r"Reservation \S+ not found", "NOTFOUND.reservation"),
    (r"Flight \S+ not found", "NOTFOUND.flight"),
    (r"Payment method \S+ not found", "NOTFOUND.payment_method"),
    (r"New item \S+ not found or available", "NOTFOUND.item"),
    (r"[Bb]alance is not enough|Not enough balance", "CONFLICT.insufficient_balance"),
    (r"Not enough seats", "CONFLICT.no_seats"),
    (r"Too many reservations", "CONFLICT.reservation_limit"),
    (r"Non-delivered order cannot be exchanged", "CONFLICT.order_status"),
    (r"Payment amount does not add up", "ARGS.payment_total_mismatch"),
    (r"Certificate cannot be used", "ARGS.certificate_not_allowed"),
    (r"new item id should be different", "ARGS.same_item"),
    (r"validation errors? for", "ARGS.missing_field"),
    (r"Invalid characters in expression", "SYNTAX.expression"),
)
BASE_TS = 1_735_689_600_000  # 2025-01-01


def trajectory_files(git_dir: Path) -> list[tuple[str, str]]:
    """(commit, path) of each trajectory file whose content the snapshot holds."""
    commits = _git(git_dir, "log", "--all", "--format=%H", "--", "*/trajectories/*.json").split()
    found: dict[str, str] = {}
    for commit in commits:
        for line in _git(git_dir, "ls-tree", "-r", "--long", commit).splitlines():
            meta, _, path = line.partition("\t")
            parts = meta.split()
            if (path.endswith(".json") and "/trajectories/" in path and path not in found
                    and len(parts) == 4 and parts[3].isdigit()):
                found[path] = commit
    return sorted((commit, path) for path, commit in found.items())


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True,
                          text=True, check=True).stdout


def label(error: str) -> str | None:
    for pattern, mode in LABELS:
        if re.search(pattern, error):
            return mode
    return None


def records_of(name: str, data: Any, first_session: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    sims = data.get("simulations") if isinstance(data, dict) else None
    for index, sim in enumerate(sims or []):
        calls: dict[str, dict[str, Any]] = {}
        session = f"{name}:{index}"
        start = BASE_TS + (first_session + index) * 3_600_000
        for message in sim.get("messages") or []:
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and call.get("id"):
                    calls[call["id"]] = call
            if message.get("role") != "tool":
                continue
            call = calls.get(message.get("id") or "", {})
            content = str(message.get("content"))
            failed = content.startswith("Error:")
            args = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
            rec: dict[str, Any] = {
                "session_id": session, "tool": call.get("name") or "unknown_tool",
                "ts": start + int(message.get("turn_idx") or 0) * 2000, "args": args,
                "outcome": "failure" if failed else "success",
                "failure_mode": label(content) if failed else None,
                "agent_id": name,
            }
            if failed:
                rec["error"] = content[:4096]
            body = json.dumps(rec, sort_keys=True)
            rec["id"] = hashlib.sha256(f"tau2:{session}:{message.get('id')}:{body}".encode()
                                       ).hexdigest()
            out.append(rec)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    sessions = 0
    for commit, path in trajectory_files(args.git_dir):
        raw = _git(args.git_dir, "show", f"{commit}:{path}")
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            continue
        name = Path(path).stem
        recs = records_of(name, data, sessions)
        sessions += len(data.get("simulations") or []) if isinstance(data, dict) else 0
        rows.extend(recs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    failed = [r for r in rows if r["outcome"] == "failure"]
    unlabelled = sum(1 for r in failed if r["failure_mode"] is None)
    print(f"{len(rows)} records, {len(failed)} failures ({unlabelled} unlabelled), "
          f"{sessions} sessions -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
