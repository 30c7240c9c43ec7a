"""The acceptance run, owned by binloop's parent process (not by the generated code).

The tool runs in its own sandboxed worker (:class:`~pipeline_runner.sandbox.client.
ToolWorker`); this module sends it each step of each case over the pipe, answers its
`invoke` requests from the case's script, and judges each reply itself against the
case's `expect` pattern (rules in :mod:`pipeline_runner.design`). The run counts only
when every one of the N steps got a judged, matching reply; nothing the tool's process
prints is a verdict. An exit (on import or mid-run), a hang, a protocol break or a
limit ends the run with that reason.

Then the same cases are run against *null tools* — one that returns its input, one
that raises, one that forwards the call once to the original tool unchanged. If any of
them passes, the cases prove nothing about the tool and the stage fails.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from pipeline_runner.sandbox.client import Invoke, ToolError, ToolWorker, WorkerFailed
from pipeline_runner.targets import StageRun, StepRun

NO_PROOF: Final = "acceptance cases do not distinguish the tool from doing nothing"
TYPES: Final = {"string": str, "boolean": bool, "object": dict, "array": list,
                "null": type(None)}
# (details, text part or None) of one call; raises ToolError / WorkerFailed
Call = Callable[[dict[str, Any], Invoke | None, float], tuple[Any, str | None]]


# -- matching (the one implementation of the rules in pipeline_runner.design) --------------
def is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, TYPES[name]) if name in TYPES else False


def matches(expected: Any, actual: Any, where: str = "output") -> list[str]:
    """Mismatches of `actual` against the pattern `expected` (empty when it matches)."""
    if isinstance(expected, dict) and any(k.startswith("$") for k in expected):
        return operator_mismatches(expected, actual, where)
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object, got {actual!r:.200}"]
        out: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{where}.{key}: missing")
            else:
                out.extend(matches(value, actual[key], f"{where}.{key}"))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {len(expected)} items, got {actual!r:.200}"]
        return [m for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                for m in matches(e, a, f"{where}[{i}]")]
    if isinstance(expected, bool) or isinstance(actual, bool):
        same = expected is actual
    elif isinstance(expected, int | float) and isinstance(actual, int | float):
        same = abs(expected - actual) <= 1e-9 * max(1.0, abs(expected))
    else:
        same = expected == actual
    return [] if same else [f"{where}: expected {expected!r:.200}, got {actual!r:.200}"]


def operator_mismatches(pattern: dict[str, Any], actual: Any, where: str) -> list[str]:
    out: list[str] = []
    for op, arg in pattern.items():
        if op == "$contains":
            ok = isinstance(actual, str) and str(arg) in actual
        elif op == "$type":
            ok = is_type(actual, arg)
        elif op == "$len":
            ok = isinstance(actual, list | str | dict) and len(actual) == arg
        elif op == "$some":
            ok = isinstance(actual, list) and any(not matches(arg, a) for a in actual)
        elif op == "$gte":
            ok = is_type(actual, "number") and actual >= arg
        elif op == "$lte":
            ok = is_type(actual, "number") and actual <= arg
        else:
            ok = False
        if not ok:
            out.append(f"{where}: {op} {arg!r:.200} does not hold for {actual!r:.200}")
    return out


def substitute(value: Any, previous: dict[str, Any] | None) -> Any:
    if isinstance(value, str) and value.startswith("$prev."):
        return None if previous is None else previous.get(value[len("$prev."):])
    if isinstance(value, dict):
        return {k: substitute(v, previous) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, previous) for v in value]
    return value


class ScriptedInvoke:
    """The original tool, as a case scripts it: one response per call, in order. With
    `allowed` (the tool's `invokes`), a call of any other tool is refused and noted, as
    the tool host refuses it at use time."""

    def __init__(self, script: list[dict[str, Any]],
                 allowed: frozenset[str] | None = None) -> None:
        self.script = script
        self.allowed = allowed
        self.refused: list[str] = []
        self.calls = 0

    def __call__(self, tool: str, args: dict[str, Any]) -> Any:
        if self.allowed is not None and tool not in self.allowed:
            self.refused.append(tool)
            raise PermissionError(f"this tool may not invoke {tool[:100]!r}: the tool host "
                                  f"lets it call {', '.join(sorted(self.allowed)) or 'no tool'}"
                                  " only")
        index = self.calls
        self.calls += 1
        if index >= len(self.script):
            raise RuntimeError(f"invoke called {index + 1} times; the script has "
                               f"{len(self.script)} responses")
        entry = self.script[index]
        if entry.get("delay_ms"):
            time.sleep(min(float(entry["delay_ms"]), 10_000) / 1000)
        if "error" in entry:
            raise RuntimeError(str(entry["error"]))
        return entry.get("result")


# -- one run -----------------------------------------------------------------------------
@dataclass
class RunReport:
    expected: int
    judged: int = 0
    failed: dict[str, list[str]] = field(default_factory=dict)
    fatal: str = ""

    @property
    def ok(self) -> bool:
        return not self.fatal and not self.failed and self.judged == self.expected

    def reason(self) -> str:
        if self.fatal:
            return f"{self.fatal} ({self.judged} of {self.expected} replies judged)"
        if self.failed:
            name, problems = next(iter(self.failed.items()))
            more = f" (+{len(self.failed) - 1} more cases)" if len(self.failed) > 1 else ""
            return f"case {name!r} failed: {'; '.join(problems)[:600]}{more}"
        if self.judged != self.expected:
            return f"only {self.judged} of {self.expected} replies judged"
        return ""


def run_cases(call: Call, cases: list[dict[str, Any]], required: list[str],
              deadline: float, check_text: bool = False,
              reset: Callable[[bool], None] | None = None, step_timeout_s: float = 30.0,
              invokes: frozenset[str] | None = None) -> RunReport:
    """Judge every step of every case; stops at the first fatal failure of the worker.
    With `invokes`, a case whose tool invokes another tool than those fails."""
    report = RunReport(sum(len(c["steps"]) for c in cases))
    for case in cases:
        try:
            if reset is not None:  # a fresh tool per case; an invoke only where scripted
                reset(case.get("invoke") is not None)
            problems = _run_case(call, case, required, deadline, check_text, step_timeout_s,
                                 report, invokes)
        except WorkerFailed as exc:
            report.fatal = str(exc)
            return report
        if problems:
            report.failed[str(case["name"])] = problems
    return report


def _run_case(call: Call, case: dict[str, Any], required: list[str], deadline: float,
              check_text: bool, step_timeout_s: float, report: RunReport,
              invokes: frozenset[str] | None = None) -> list[str]:
    invoke = ScriptedInvoke(case["invoke"], invokes) if case.get("invoke") is not None \
        else None
    previous: dict[str, Any] | None = None
    for number, step in enumerate(case["steps"], 1):
        if step.get("sleep_ms"):
            time.sleep(min(int(step["sleep_ms"]), 10_000) / 1000)
        left = deadline - time.monotonic()
        if left <= 0:
            raise WorkerFailed("timeout", "timed out: the acceptance run passed its wall-clock "
                               "limit")
        params = substitute(step["params"], previous)
        try:
            output, text = call(params, invoke, min(left, step_timeout_s))
        except WorkerFailed as exc:
            raise WorkerFailed(exc.kind, f"case {case['name']!r} step {number}: {exc}") from None
        except ToolError as exc:
            report.judged += 1
            return [f"step {number}: the tool raised: {exc}"[:500]]
        report.judged += 1
        if invoke is not None and invoke.refused:
            return [f"step {number}: the tool invoked {invoke.refused[0][:100]!r}; it may "
                    f"invoke only {', '.join(sorted(invoke.allowed or ())) or 'no tool'}"]
        problems = _judge(step["expect"], output, text, number, invoke, required, check_text)
        if problems:
            return problems
        previous = output
    return []


def _judge(expect: dict[str, Any], output: Any, text: str | None, number: int,
           invoke: ScriptedInvoke | None, required: list[str], check_text: bool) -> list[str]:
    if not isinstance(output, dict):
        return [f"step {number}: the tool must return an object, got {type(output).__name__}"]
    if check_text:
        try:
            same = text is not None and json.loads(text) == output
        except ValueError:
            same = False
        if not same:
            return [f"step {number}: the text part must be the JSON of details"]
    expected = dict(expect)
    calls = expected.pop("$calls", None)
    problems = matches(expected, output, f"step {number}")
    made = 0 if invoke is None else invoke.calls
    if calls is not None and made != calls:
        problems.append(f"step {number}: expected {calls} invoke calls, got {made}")
    missing = [k for k in required if k not in output]
    if missing:
        problems.append(f"step {number}: output lacks required keys {missing}")
    return problems


# -- null tools --------------------------------------------------------------------------
def _identity(params: dict[str, Any], invoke: Invoke | None, timeout: float
              ) -> tuple[Any, str | None]:
    return json.loads(json.dumps(params)), None


def _raising(params: dict[str, Any], invoke: Invoke | None, timeout: float
             ) -> tuple[Any, str | None]:
    raise ToolError("the null tool raises")


def forwarding(original: str) -> Call:
    """The null wrapper: calls the original tool once with the call unchanged."""
    def forward(params: dict[str, Any], invoke: Invoke | None, timeout: float
                ) -> tuple[Any, str | None]:
        if invoke is None:
            raise ToolError("no original tool to forward to")
        try:
            result = invoke(original, params)
        except Exception as exc:
            raise ToolError(str(exc)) from None
        return (result if isinstance(result, dict) else {"result": result}), None
    return forward


def null_tools(original: str) -> dict[str, Call]:
    return {"returns its input": _identity, "raises": _raising,
            "forwards once to the original tool": forwarding(original)}


# -- the stage ---------------------------------------------------------------------------
def worker_call(worker: ToolWorker) -> Call:
    def call(params: dict[str, Any], invoke: Invoke | None, timeout: float
             ) -> tuple[Any, str | None]:
        return worker.call(params, invoke, timeout)
    return call


def acceptance_stage(start: Callable[[], ToolWorker], cases: list[dict[str, Any]],
                     meta: dict[str, Any], wall_s: float, check_text: bool,
                     contract: Callable[[dict[str, Any]], list[str]]) -> StageRun:
    """The test stage: the tool in its sandbox, judged here; then the null tools."""
    stage = StageRun(True)
    required = list((meta.get("output_schema") or {}).get("required") or [])
    started = time.perf_counter()
    deadline = time.monotonic() + wall_s
    report = RunReport(sum(len(c["steps"]) for c in cases))
    try:
        worker = start()
    except WorkerFailed as exc:
        report.fatal = str(exc)
        worker = None
    if worker is not None:
        try:
            broken = contract(worker.ready)
            if broken:
                report.fatal = "the tool does not declare its contract: " + "; ".join(broken)
            else:
                report = run_cases(worker_call(worker), cases, required, deadline, check_text,
                                   worker.reset, invokes=frozenset(meta.get("invokes") or ()))
        finally:
            worker.close()
            stderr = worker.stderr_tail(1500)
    else:
        stderr = ""
    verdict = (f"{report.judged} of {report.expected} replies judged, all matched"
               if report.ok else report.reason())
    stage.steps.append(StepRun("acceptance", report.ok, "" if report.ok else
                               f"acceptance: {verdict}", time.perf_counter() - started,
                               (verdict + "\n" + stderr).strip()))
    if not report.ok:
        return StageRun(False, f"acceptance: {verdict}", stage.steps)
    original = str((meta.get("answers") or {}).get("tool", ""))
    for label, null in null_tools(original).items():
        begun = time.perf_counter()
        null_report = run_cases(null, cases, required, time.monotonic() + 60, False)
        passed = null_report.ok
        stage.steps.append(StepRun(f"null tool ({label})", not passed,
                                   f"{NO_PROOF} (a null tool that {label} passes every case)"
                                   if passed else "", time.perf_counter() - begun,
                                   "passes every case" if passed else
                                   f"fails as it must: {null_report.reason()}"))
        if passed:
            return StageRun(False, stage.steps[-1].reason, stage.steps)
    return stage
