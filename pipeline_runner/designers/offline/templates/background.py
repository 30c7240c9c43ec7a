"""binloop offline tool: run a slow tool call in the background and poll it (TIMEOUT)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from ._common import is_number  # binloop:inline

NAME: str = "template"  # binloop:fill
DESCRIPTION: str = "template"  # binloop:fill
ANSWERS: dict[str, str] = {}  # binloop:fill
INPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
OUTPUT_SCHEMA: dict[str, Any] = {"type": "object"}  # binloop:fill
CONFIG: dict[str, Any] = {"tool": "", "wait_ms": 1000}  # binloop:fill

Invoke = Callable[[str, dict[str, Any]], Any]
_JOBS: dict[str, dict[str, Any]] = {}
_IDS = itertools.count(1)


def run(params: dict[str, Any], invoke: Invoke | None = None) -> dict[str, Any]:
    """Start the tool with `params["args"]` (or poll `params["job_id"]`), waiting at most
    `wait_ms`; a call that is not done by then keeps running and is reported as running."""
    return evaluate(CONFIG, params, invoke)


def _work(job: dict[str, Any], invoke: Invoke, tool: str, args: dict[str, Any]) -> None:
    try:
        job["result"] = invoke(tool, args)
    except Exception as exc:  # reported to whoever polls the job
        job["error"] = str(exc)[:1000]
    job["done"].set()


def report(job_id: str, job: dict[str, Any]) -> dict[str, Any]:
    if not job["done"].is_set():
        return {"ok": True, "status": "running", "job_id": job_id}
    if "error" in job:
        return {"ok": False, "status": "failed", "job_id": job_id, "error": job["error"]}
    return {"ok": True, "status": "done", "job_id": job_id, "result": job.get("result")}


def evaluate(config: dict[str, Any], params: dict[str, Any], invoke: Invoke | None
             ) -> dict[str, Any]:
    wait_ms = params.get("wait_ms", config["wait_ms"])
    wait_s = min(max(wait_ms, 0), 600_000) / 1000 if is_number(wait_ms) else 1.0
    polled = params.get("job_id")
    if isinstance(polled, str):
        known = _JOBS.get(polled)
        if known is None:
            return {"ok": False, "status": "unknown", "job_id": polled, "error": "no such job"}
        known["done"].wait(wait_s)
        return report(polled, known)
    args = params.get("args")
    if not isinstance(args, dict):
        return {"ok": False, "status": "failed", "error": "give args (an object) or a job_id"}
    if invoke is None:
        return {"ok": False, "status": "failed",
                "error": f"no invoker: the host must let this tool call {config['tool']}"}
    job_id = f"job-{next(_IDS)}"
    job: dict[str, Any] = {"done": threading.Event()}
    _JOBS[job_id] = job
    threading.Thread(target=_work, args=(job, invoke, config["tool"], args), daemon=True).start()
    job["done"].wait(wait_s)
    return report(job_id, job)
