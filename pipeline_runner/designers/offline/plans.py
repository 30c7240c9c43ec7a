"""One plan per failure class: what tool to build, learned from the evidence.

A plan names the template, the learned configuration, the input/output schemas and
the acceptance cases. Expected outputs of the deterministic tools are computed with
the template's own `evaluate` (the reference implementation, shipped code rather than
generated code), and each plan asserts what makes the tool worth having: the
reproduced failure must be flagged, a repaired call must pass. A plan that cannot
learn enough raises :class:`NoDesign` (the build then rolls back cleanly).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Final

from binloop.core.schema import ToolInvocation
from pipeline_runner.design import AcceptanceCase, NoDesign, Step
from pipeline_runner.designers.offline import learn
from pipeline_runner.designers.offline.templates._common import (
    distance,
    kind_of,
    normalize,
    values_at,
)

TEMPLATES: Final = "pipeline_runner.designers.offline.templates"
DEFAULT_TRANSIENT: Final = (
    "timed out", "timeout", "connection", "reset", "refused", "unreachable", "temporar",
    "unavailable", "econn", "etimedout", "enotfound", "eai_again", "network", "socket",
    "bad gateway", "gateway", "too many requests", "rate limit", "dns", "tls", "ssl",
    "broken pipe")
CHECK_OUTPUT: Final = {
    "type": "object", "required": ["ok", "repaired", "args", "issues", "changes"],
    "properties": {
        "ok": {"type": "boolean", "description": "the given args pass every check"},
        "repaired": {"type": "boolean", "description": "the returned args pass every check"},
        "args": {"type": "object", "description": "the args, repaired where possible"},
        "issues": {"type": "array", "items": {"type": "object",
                                              "required": ["rule", "path", "message"]}},
        "changes": {"type": "array", "items": {"type": "object"}},
    }}


@dataclass
class Context:
    tool: str
    failure_mode: str
    evidence: list[ToolInvocation]
    args_schema: dict[str, Any]


@dataclass
class Plan:
    template: str
    verb: str
    summary: str
    sketch: str
    config: dict[str, Any]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    cases: list[AcceptanceCase] = field(default_factory=list)
    name_from_tool_only: bool = False


Oracle = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def oracle(template: str) -> Oracle:
    module = importlib.import_module(f"{TEMPLATES}.{template}")
    evaluate: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] = module.evaluate
    return evaluate


def pattern(output: Any, drop: tuple[str, ...] = ("message", "advice", "how")) -> Any:
    """An expected-output pattern: the output without its free-text fields."""
    if isinstance(output, dict):
        return {k: pattern(v, drop) for k, v in output.items() if k not in drop}
    if isinstance(output, list):
        return [pattern(v, drop) for v in output]
    return output


def case(name: str, params: dict[str, Any], expect: dict[str, Any],
         reproduces: str | None = None, invoke: list[dict[str, Any]] | None = None
         ) -> AcceptanceCase:
    return AcceptanceCase(name, [Step(params, expect)], invoke, reproduces)


def unique_case_names(cases: list[AcceptanceCase]) -> list[AcceptanceCase]:
    """`cases` with a repeated name numbered (`name`, `name_2`, ...): a plan may
    derive two cases of one kind from evidence that differs only in detail."""
    taken: set[str] = set()
    out = []
    for item in cases:
        name, number = item.name, 2
        while name in taken:
            name = f"{item.name}_{number}"
            number += 1
        taken.add(name)
        out.append(item if name == item.name else replace(item, name=name))
    return out


def object_input(args_schema: dict[str, Any], extra: dict[str, Any],
                 required: tuple[str, ...] = ("args",)) -> dict[str, Any]:
    return {"type": "object", "properties": {"args": args_schema or {"type": "object"}, **extra},
            "required": list(required)}


def _distinct_by_args(evidence: list[ToolInvocation]) -> list[ToolInvocation]:
    seen: list[Any] = []
    out = []
    for rec in evidence:
        if rec["args"] not in seen:
            seen.append(rec["args"])
            out.append(rec)
    return out


def _flagged(evidence: list[ToolInvocation], evaluate: Oracle, config: dict[str, Any]
             ) -> Iterator[tuple[int, ToolInvocation, dict[str, Any], dict[str, Any]]]:
    """(number, record, params, answer) for each distinct evidence call the tool's
    oracle flags (`ok` false) when called with the record's args."""
    for number, rec in enumerate(_distinct_by_args(evidence), 1):
        params = {"args": rec["args"]}
        out = evaluate(config, params)
        if not out["ok"]:
            yield number, rec, params, out


def _error(rec: ToolInvocation) -> str:
    return rec.get("error", "") or ""


# -- ARGS --------------------------------------------------------------------------------
_EXPECTED_NUMBER = re.compile(
    r"(?:total|price|expected|required|due|owed|should be)[^0-9\-]{0,40}(-?\d+(?:\.\d+)?)")
_REQUIRED = re.compile(r"(?i)(?:missing|required)\s+(?:argument|field|parameter|key|property)?"
                       r"\s*['\"`]?([A-Za-z_][\w.]*)|['\"`]([A-Za-z_][\w.]*)['\"`] is required")
_TYPED = re.compile(r"(?i)['\"`]?([A-Za-z_][\w.\[\]]*)['\"`]? (?:must|should) be (?:an? )?"
                    r"(integer|int|number|float|string|str|boolean|bool)\b")
_ENUM = re.compile(r"(?i)['\"`]?([A-Za-z_][\w.\[\]]*)['\"`]? must be one of:?\s*(.+)$")
_TYPE_NAMES: Final = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def _as_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _sum_rule(rec: ToolInvocation) -> tuple[dict[str, Any], int | float] | None:
    error = _error(rec)
    found = learn.numbers(error)
    for key, items in rec["args"].items():
        if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
            continue
        fields = [f for f in items[0] if all(isinstance(i.get(f), int | float)
                                             and not isinstance(i.get(f), bool) for i in items)]
        for name in fields:
            total = sum(i[name] for i in items)
            others = [n for n in found if abs(n - total) > 1e-6]
            if not others or not any(abs(n - total) <= 1e-6 for n in found):
                continue
            match = _EXPECTED_NUMBER.search(error.lower())
            expected = float(match.group(1)) if match else others[0]
            if abs(expected - total) <= 1e-6:
                expected = others[0]
            rule = {"kind": "sum_equals", "list": key, "field": name, "param": "expected_total",
                    "message": normalize(error)}
            return rule, _as_number(expected)
    return None


def _arg_rules(rec: ToolInvocation) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rules one failing record teaches, and the extra params that reproduce it."""
    error, args = _error(rec), rec["args"]
    rules: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    if (summed := _sum_rule(rec)) is not None:
        rules.append(summed[0])
        params["expected_total"] = summed[1]
    for match in _REQUIRED.finditer(error):
        rules.append({"kind": "required", "path": match.group(1) or match.group(2)})
    for match in _TYPED.finditer(error):
        rules.append({"kind": "type", "path": match.group(1),
                      "type": _TYPE_NAMES.get(match.group(2).lower(), match.group(2).lower())})
    if (enum := _ENUM.search(error)) is not None:
        values = [v.strip(" '\"`.") for v in re.split(r",|\bor\b|\|", enum.group(2))]
        rules.append({"kind": "enum", "path": enum.group(1), "values": [v for v in values if v]})
    kinds = learn.kind_paths(args, error)
    for path, kind in kinds:
        rules.append({"kind": "forbidden_kind", "path": path, "value_kind": kind,
                      "message": normalize(error)})
    kind_covered = {p for p, _ in kinds}
    for path in learn.mentioned_paths(args, error):
        if path not in kind_covered and not summed:
            for _, value in values_at(args, path):
                if value.lower() in error.lower():
                    rules.append({"kind": "forbidden_value", "path": path, "value": value,
                                  "message": normalize(error)})
    return rules, params


def plan_args(ctx: Context) -> Plan:
    rules: list[dict[str, Any]] = []
    reproductions: list[tuple[ToolInvocation, dict[str, Any]]] = []
    for rec in _distinct_by_args(ctx.evidence):
        learned, extra = _arg_rules(rec)
        # Errors that differ only in wording (a suffix, a code) teach the same rule: the
        # first message is kept.
        known = [_without_message(r) for r in rules]
        rules.extend(r for r in learned if _without_message(r) not in known)
        reproductions.append((rec, {"args": rec["args"], **extra}))
    if not rules:
        raise NoDesign("no argument rule could be learned from the errors in the evidence")
    config = {"rules": rules}
    evaluate = oracle("args_check")
    cases: list[AcceptanceCase] = []
    for number, (rec, params) in enumerate(reproductions, 1):
        out = evaluate(config, params)
        if out["ok"]:
            raise NoDesign(f"the learned rules do not flag failing call {number} of the "
                           "evidence")
        cases.append(case(f"flags_failure_{number}", params, pattern(out), rec["id"]))
        if out["repaired"]:
            fixed = {**params, "args": out["args"]}
            passed = evaluate(config, fixed)
            if not passed["ok"]:
                raise NoDesign("the repaired arguments do not pass the learned rules")
            # from the real call, then the tool's own repair of it
            cases.append(AcceptanceCase(f"repaired_args_pass_{number}", [
                Step(params, pattern(out)),
                Step({**params, "args": "$prev.args"}, pattern(passed))], None, rec["id"]))
    cases.extend(_args_extra_cases(config, reproductions[0][1], evaluate,
                                   reproductions[0][0]["id"]))
    extra_inputs: dict[str, Any] = {"alternatives": {
        "type": "array", "items": {"type": "string"},
        "description": "candidate values to use instead of a refused one"}}
    for rule in rules:
        if rule["kind"] == "sum_equals":
            extra_inputs[rule["param"]] = {
                "type": "number", "description": f"what {rule['list']}[].{rule['field']} must "
                                                 "add up to (e.g. the price quoted for the call)"}
    kinds = ", ".join(sorted({r["kind"] for r in rules}))
    return Plan(
        "args_check", "check",
        f"Checks the arguments of {ctx.tool} before the call ({kinds}) and repairs what it "
        f"can, so that {ctx.failure_mode} does not happen again.",
        f"Rules learned from the failing calls: {rules}. For each rule report issues on the "
        "given args; repair sums by adjusting the last item, coerce types, swap refused "
        "values for given alternatives; re-check the repaired args.",
        config, object_input(learn.loosen(ctx.args_schema), extra_inputs), CHECK_OUTPUT, cases)


def _without_message(rule: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rule.items() if k != "message"}


def _args_extra_cases(config: dict[str, Any], params: dict[str, Any],
                      evaluate: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
                      reproduces: str) -> list[AcceptanceCase]:
    extra: list[AcceptanceCase] = []
    for rule in config["rules"]:
        if rule["kind"] == "sum_equals" and rule["param"] in params:
            bare = {k: v for k, v in params.items() if k != rule["param"]}
            extra.append(case("sum_needs_expected_total", bare, pattern(evaluate(config, bare)),
                              reproduces))
        if rule["kind"] == "forbidden_kind":
            values = [v for _, v in values_at(params["args"], rule["path"]) if isinstance(v, str)]
            if values:
                alternatives = [learn.bump_identifier(values[0]), f"other_{len(values[0])}"]
                swap = {**params, "alternatives": alternatives}
                out = evaluate(config, swap)
                if not any(i["rule"] == "forbidden_kind" for i in
                           evaluate(config, {**swap, "args": out["args"]})["issues"]):
                    extra.append(case("swaps_refused_value", swap, pattern(out), reproduces))
    return extra


# -- NOTFOUND ----------------------------------------------------------------------------
def plan_notfound(ctx: Context) -> Plan:
    paths: list[str] = []
    for rec in ctx.evidence:
        paths.extend(p for p in learn.mentioned_paths(rec["args"], _error(rec)) if p not in paths)
    if not paths:
        for rec in ctx.evidence:
            paths.extend(p for p in learn.noun_paths(rec["args"], _error(rec)) if p not in paths)
    if not paths:
        raise NoDesign("the evidence does not show which argument refers to the missing thing")
    noun = re.split(r"[.\[\]]+", paths[0].strip("[]."))[-1] or "identifier"
    config = {"paths": paths, "noun": noun}
    evaluate = oracle("resolve")
    cases: list[AcceptanceCase] = []
    for number, rec in enumerate(_distinct_by_args(ctx.evidence), 1):
        args, error = rec["args"], _error(rec).lower()
        present = [v for p in paths for _, v in values_at(args, p) if isinstance(v, str)]
        missing = [v for v in present if v.lower() in error] or present
        others = [v for v in present if v not in missing]
        params = {"args": args, "known": others + [learn.bump_identifier(v) for v in missing]}
        out = evaluate(config, params)
        if out["ok"] or not out["repaired"]:
            continue
        cases.append(case(f"resolves_missing_{number}", params, pattern(out), rec["id"]))
        unknown = {"args": args, "known": [*others, "zz_unrelated_record_0"]}
        cases.append(case(f"reports_unresolvable_{number}", unknown,
                          pattern(evaluate(config, unknown)), rec["id"]))
        cases.append(case(f"accepts_existing_{number}", {"args": args, "known": present},
                          pattern(evaluate(config, {"args": args, "known": present})), rec["id"]))
    if not cases:
        raise NoDesign("could not reproduce the missing reference from the evidence")
    return Plan(
        "resolve", "resolve",
        f"Looks up the {noun} references of a {ctx.tool} call among the ones that exist and "
        f"resolves a missing one to the existing one it most likely meant ({ctx.failure_mode}).",
        f"Reference paths {paths}. For each value not in `known`: same text ignoring case, "
        "else the only known value of the same kind (prefix before the number), else the "
        "unique closest by edit distance; otherwise report it with suggestions.",
        config, object_input(ctx.args_schema, {"known": {
            "type": "array", "items": {"type": "string"},
            "description": f"the {noun} identifiers that exist (e.g. from a lookup tool)"}},
            ("args", "known")),
        {**CHECK_OUTPUT, "required": [*CHECK_OUTPUT["required"], "unresolved"]}, cases)


# -- CONFLICT ----------------------------------------------------------------------------
def _resource_paths(evidence: list[ToolInvocation]) -> list[str]:
    paths: list[str] = []
    for rec in evidence:
        found = learn.mentioned_paths(rec["args"], _error(rec))
        found += [p for p, _ in learn.kind_paths(rec["args"], _error(rec))]
        paths.extend(p for p in found if p not in paths)
    return paths


def _conflicted(rec: ToolInvocation, present: list[str]) -> list[str]:
    error = _error(rec).lower()
    named = [v for v in present if v.lower() in error]
    if named:
        return named
    spoken = " ".join(re.findall(r"[a-z0-9]+", error.replace("_", " ")))
    by_kind = [v for v in present
               if kind_of(v) and " ".join(kind_of(v).split("_")) in spoken]
    return by_kind or present


def plan_conflict(ctx: Context) -> Plan:
    paths = _resource_paths(ctx.evidence)
    if not paths:
        raise NoDesign("the evidence does not show which resource was in conflict")
    config = {"paths": paths, "message": normalize(_error(ctx.evidence[-1]))}
    evaluate = oracle("precheck")
    cases: list[AcceptanceCase] = []
    for number, rec in enumerate(_distinct_by_args(ctx.evidence), 1):
        args = rec["args"]
        present = [v for p in paths for _, v in values_at(args, p) if isinstance(v, str)]
        busy = _conflicted(rec, present)
        state: dict[str, Any] = {v: v not in busy for v in present}
        reproduced = {"args": args, "state": state}
        out = evaluate(config, reproduced)
        if out["ok"]:
            continue
        cases.append(case(f"flags_conflict_{number}", reproduced, pattern(out), rec["id"]))
        spare = {**state, **{learn.bump_identifier(v, 7): True for v in busy}}
        swapped = {"args": args, "state": spare}
        cases.append(case(f"offers_alternative_{number}", swapped,
                          pattern(evaluate(config, swapped)), rec["id"]))
        counted = {"args": args, "state": {v: (0 if v in busy else 3) for v in present}, "need": 1}
        cases.append(case(f"counts_remaining_{number}", counted,
                          pattern(evaluate(config, counted)), rec["id"]))
        free = {"args": args, "state": dict.fromkeys(present, True)}
        cases.append(case(f"passes_when_free_{number}", free, pattern(evaluate(config, free)),
                          rec["id"]))
    if not cases:
        raise NoDesign("could not reproduce the conflict from the evidence")
    return Plan(
        "precheck", "precheck",
        f"Checks the resources a {ctx.tool} call uses against their current state before the "
        f"call and proposes free alternatives of the same kind ({ctx.failure_mode}).",
        f"Resource paths {paths}. state maps a resource id to true/false, a remaining amount "
        "or {available, remaining}; a resource is in conflict when unavailable or below "
        "`need`; swap in the first free id of the same kind (sorted).",
        config, object_input(ctx.args_schema, {
            "state": {"type": "object", "description": "resource id -> true/false, remaining "
                                                       "amount, or {available, remaining}"},
            "need": {"type": "number", "description": "amount needed of each (default 1)"}},
            ("args", "state")),
        {**CHECK_OUTPUT, "required": [*CHECK_OUTPUT["required"], "unchecked"]}, cases)


# -- PERM --------------------------------------------------------------------------------
def _permission_rules(evidence: list[ToolInvocation]) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for rec in evidence:
        error = _error(rec)
        learned: list[dict[str, Any]] = []
        for generic, _, value in learn.string_leaves(rec["args"]):
            if len(value) >= 3 and value.lower() in error.lower():
                if value.startswith("/") and os.path.dirname(value) not in ("", "/"):
                    learned.append({"path": generic, "prefix": os.path.dirname(value) + "/"})
                else:
                    learned.append({"path": generic, "value": value})
        if not learned:
            learned = [{"path": p, "kind": k} for p, k in learn.kind_paths(rec["args"], error)]
        rules.extend(r for r in learned if r not in rules)
    return rules


def plan_perm(ctx: Context) -> Plan:
    rules = _permission_rules(ctx.evidence)
    if not rules:
        raise NoDesign("the evidence does not show which argument was refused")
    config = {"tool": ctx.tool, "denied": rules, "message": normalize(_error(ctx.evidence[-1]))}
    evaluate = oracle("permission")
    cases: list[AcceptanceCase] = []
    for number, rec, params, out in _flagged(ctx.evidence, evaluate, config):
        cases.append(case(f"flags_refusal_{number}", params, pattern(out), rec["id"]))
        grants = [i["value"] for i in out["issues"]]
        granted = {"args": rec["args"], "granted": grants}
        cases.append(case(f"passes_when_granted_{number}", granted,
                          pattern(evaluate(config, granted)), rec["id"]))
    if not cases:
        raise NoDesign("the learned refusals do not flag the evidence")
    return Plan(
        "permission", "permission_check",
        f"Tells before a {ctx.tool} call whether it will be refused for lack of permission, "
        f"as it was before ({ctx.failure_mode}), unless the permission was granted.",
        f"Refused before: {rules}. A value under a refused prefix, equal to a refused value or "
        "of a refused kind is flagged unless it starts with a granted prefix.",
        config, object_input(ctx.args_schema, {"granted": {
            "type": "array", "items": {"type": "string"},
            "description": "prefixes or values the caller has permission for"}}),
        {**CHECK_OUTPUT, "required": [*CHECK_OUTPUT["required"], "advice"]}, cases)


# -- SYNTAX ------------------------------------------------------------------------------
_EXPRESSION_LIKE = re.compile(r"^[\d\s+\-*/().\u00d7\u00f7\u2212%]+$")

def _text_kind(value: str) -> str:
    stripped = value.strip()
    if stripped.startswith(("{", "[", "```")):
        return "json"
    if any(c.isdigit() for c in stripped) and _EXPRESSION_LIKE.match(stripped):
        return "expression"
    return "text"


def plan_syntax(ctx: Context) -> Plan:
    fields: list[dict[str, str]] = []
    for rec in ctx.evidence:
        for generic, _, value in learn.string_leaves(rec["args"]):
            kind = _text_kind(value)
            named = generic.split(".")[-1].strip("[]") in _error(rec)
            if (kind != "text" or named) and {"path": generic, "kind": kind} not in fields:
                fields.append({"path": generic, "kind": kind})
    if not fields:
        raise NoDesign("the evidence holds no text argument that looks malformed")
    config = {"fields": fields}
    evaluate = oracle("repair")
    cases: list[AcceptanceCase] = []
    for number, rec, params, out in _flagged(ctx.evidence, evaluate, config):
        cases.append(case(f"flags_malformed_{number}", params, pattern(out), rec["id"]))
        if out["repaired"]:
            fixed = {"args": out["args"]}
            cases.append(AcceptanceCase(f"repaired_is_valid_{number}", [
                Step(params, pattern(out)),
                Step({"args": "$prev.args"}, pattern(evaluate(config, fixed)))],
                None, rec["id"]))
    if not cases:
        raise NoDesign("the text arguments of the evidence are well-formed: nothing to repair")
    return Plan(
        "repair", "repair",
        f"Validates the text arguments of {ctx.tool} (JSON, expressions, text) and repairs "
        f"malformed ones before the call ({ctx.failure_mode}).",
        f"Fields {fields}. JSON: strip fences, fix quotes, Python literals, bare keys, "
        "trailing commas, close brackets. Expressions: normalise operators, drop trailing "
        "operators, balance parentheses. Text: drop control characters.",
        config, object_input(learn.loosen(ctx.args_schema), {}), CHECK_OUTPUT, cases[:20])


# -- RUNTIME -----------------------------------------------------------------------------
def plan_runtime(ctx: Context) -> Plan:
    errors = [_error(r) for r in ctx.evidence if _error(r)]
    if not errors:
        raise NoDesign("the evidence has no error messages to recognise the crash by")
    known = learn.signatures(errors)
    crashing = [{"args": r["args"], "signature": normalize(_error(r))}
                for r in _distinct_by_args(ctx.evidence)]
    config = {"tool": ctx.tool, "signatures": known, "crashing": crashing}
    first = ctx.evidence[-1]
    other = {**first["args"], "binloop_probe": True}
    surprise = "unexpected condition in a part never seen failing"
    if normalize(surprise) in known:
        surprise = "another unexpected condition"
    cases = [
        AcceptanceCase(f"skips_known_crash_{number}", [Step({"args": rec["args"]}, {
            "ok": False, "known_failure": True, "skipped": True, "$calls": 0})], [], rec["id"])
        for number, rec in enumerate(_distinct_by_args(ctx.evidence), 1)]
    cases += [
        AcceptanceCase("passes_result_through", [Step({"args": other}, {
            "ok": True, "result": {"ok": True}, "$calls": 1})], [{"result": {"ok": True}}],
            first["id"]),
        AcceptanceCase("classifies_known_failure", [Step({"args": other}, {
            "ok": False, "known_failure": True, "skipped": False, "$calls": 1})],
            [{"error": errors[-1]}], first["id"]),
        AcceptanceCase("reports_new_failure", [Step({"args": other}, {
            "ok": False, "known_failure": False, "$calls": 1})], [{"error": surprise}],
            first["id"]),
        AcceptanceCase("needs_an_invoker", [Step({"args": other}, {"ok": False, "skipped": True})],
                       None, first["id"]),
    ]
    return Plan(
        "guard", "guard",
        f"Calls {ctx.tool} behind a guard: arguments known to crash it are not sent, and a "
        f"failure comes back classified with advice instead of an exception ({ctx.failure_mode}).",
        f"Known crash signatures {known}; crashing argument sets from the evidence.",
        config, object_input(ctx.args_schema, {}),
        {"type": "object", "required": ["ok", "known_failure", "skipped"],
         "properties": {"ok": {"type": "boolean"}, "known_failure": {"type": "boolean"},
                        "skipped": {"type": "boolean"}, "result": {}, "error": {"type": "string"},
                        "signature": {"type": "string"}, "advice": {"type": "string"}}},
        cases)


# -- NETWORK -----------------------------------------------------------------------------
def plan_network(ctx: Context) -> Plan:
    errors = [_error(r) for r in ctx.evidence if _error(r)] or ["connection reset by peer"]
    transient = [*DEFAULT_TRANSIENT, *(s for s in learn.signatures(errors)
                                       if s not in DEFAULT_TRANSIENT)]
    config = {"tool": ctx.tool, "transient": transient, "max_attempts": 4,
              "base_delay_ms": 200, "max_delay_ms": 5000}
    permanent = "invalid argument: unknown field"
    if any(p in normalize(permanent) for p in transient):
        permanent = "rejected: bad input"
    last = ctx.evidence[-1]
    quick = {"args": last["args"], "base_delay_ms": 1}
    cases = [
        AcceptanceCase(f"recovers_after_transient_failures_{number}", [
            Step({"args": rec["args"], "base_delay_ms": 1}, {
                "ok": True, "attempts": 3, "result": {"ok": True}, "$calls": 3})],
            [{"error": errors[0]}, {"error": _error(rec) or errors[-1]},
             {"result": {"ok": True}}], rec["id"])
        for number, rec in enumerate(_distinct_by_args(ctx.evidence), 1)]
    cases += [
        AcceptanceCase("gives_up_after_max_attempts", [Step({**quick, "max_attempts": 3}, {
            "ok": False, "attempts": 3, "retryable": True, "$calls": 3})],
            [{"error": errors[0]}] * 3, last["id"]),
        AcceptanceCase("does_not_retry_permanent_errors", [Step(quick, {
            "ok": False, "attempts": 1, "retryable": False, "$calls": 1})],
            [{"error": permanent}], last["id"]),
        AcceptanceCase("needs_an_invoker", [Step(quick, {"ok": False, "attempts": 0})], None,
                       last["id"]),
    ]
    return Plan(
        "retry", "with_retry",
        f"Calls {ctx.tool} and retries transient network failures with exponential back-off "
        f"({ctx.failure_mode}); permanent errors are returned at once.",
        f"Transient when the normalised error contains one of {transient}; up to max_attempts "
        "(default 4) with delays base_delay_ms * 2^(n-1), capped at 5 s.",
        config, object_input(ctx.args_schema, {
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 10},
            "base_delay_ms": {"type": "integer", "minimum": 0, "maximum": 60000}}),
        {"type": "object", "required": ["ok", "attempts"],
         "properties": {"ok": {"type": "boolean"}, "attempts": {"type": "integer"},
                        "retryable": {"type": "boolean"}, "result": {},
                        "error": {"type": "string"}}},
        cases)


# -- TIMEOUT -----------------------------------------------------------------------------
def plan_timeout(ctx: Context) -> Plan:
    durations = [r["duration_ms"] for r in ctx.evidence if r.get("duration_ms")]
    wait_ms = int(min(max(min(durations) // 2, 100), 30_000)) if durations else 1000
    config = {"tool": ctx.tool, "wait_ms": wait_ms}
    args = ctx.evidence[-1]["args"]
    error = next((_error(r) for r in reversed(ctx.evidence) if _error(r)), "operation timed out")
    last = ctx.evidence[-1]["id"]
    cases = [
        AcceptanceCase(f"returns_fast_results_{number}", [
            Step({"args": rec["args"], "wait_ms": 5000}, {
                "ok": True, "status": "done", "result": {"v": 1}, "$calls": 1})],
            [{"result": {"v": 1}}], rec["id"])
        for number, rec in enumerate(_distinct_by_args(ctx.evidence), 1)]
    cases += [
        AcceptanceCase("keeps_slow_calls_running", [
            Step({"args": args, "wait_ms": 10}, {"ok": True, "status": "running",
                                                 "job_id": {"$type": "string"}}),
            Step({"job_id": "$prev.job_id", "wait_ms": 5000}, {
                "ok": True, "status": "done", "result": {"v": 2}, "$calls": 1})],
            [{"delay_ms": 300, "result": {"v": 2}}], ctx.evidence[-1]["id"]),
        AcceptanceCase("reports_failures", [Step({"args": args, "wait_ms": 5000}, {
            "ok": False, "status": "failed"})], [{"error": error}], last),
        AcceptanceCase("unknown_job", [Step({"args": args, "job_id": "job-unknown"}, {
            "ok": False, "status": "unknown"})], None, last),
        AcceptanceCase("needs_an_invoker", [Step({"args": args}, {"ok": False,
                                                                  "status": "failed"})],
                       None, last),
    ]
    schema = {"type": "object", "properties": {
        "args": ctx.args_schema or {"type": "object"},
        "job_id": {"type": "string", "description": "poll a call started before"},
        "wait_ms": {"type": "number", "minimum": 0,
                    "description": f"how long to wait for the result (default {wait_ms})"}},
        "anyOf": [{"required": ["args"]}, {"required": ["job_id"]}]}
    return Plan(
        "background", "background",
        f"Runs {ctx.tool} in the background: waits up to wait_ms for the result, otherwise "
        f"returns a job_id to poll, so a slow call no longer times out ({ctx.failure_mode}).",
        f"Jobs kept in memory; default wait {wait_ms} ms (half the observed time to timeout).",
        config, schema,
        {"type": "object", "required": ["ok", "status"],
         "properties": {"ok": {"type": "boolean"},
                        "status": {"enum": ["done", "running", "failed", "unknown"]},
                        "job_id": {"type": "string"}, "result": {}, "error": {"type": "string"}}},
        cases)


# -- TOOL_GAP ----------------------------------------------------------------------------
_HINTS = (re.compile(r"(?i)did you mean\s+['\"`]?([A-Za-z_][\w.\-]*)"),
          re.compile(r"(?i)use\s+['\"`]?([A-Za-z_][\w.\-]*)['\"`]?\s+instead"))
_LISTED = re.compile(r"(?i)(?:available|known|existing)\s+tools?\s*(?:are|:)?\s*(.+)$")


def alias_for(tool: str, errors: list[str]) -> str | None:
    candidates: list[str] = []
    for error in errors:
        for hint in _HINTS:
            candidates.extend(hint.findall(error))
        if (listed := _LISTED.search(error)) is not None:
            candidates.extend(re.findall(r"[A-Za-z_][\w.\-]*", listed.group(1)))
    candidates = [c for c in candidates if c != tool]
    if not candidates:
        return None
    return min(candidates, key=lambda c: (distance(tool, c), candidates.index(c)))


def plan_tool_gap(ctx: Context) -> Plan:
    alias = alias_for(ctx.tool, [_error(r) for r in ctx.evidence])
    if alias is None:
        raise NoDesign("TOOL_GAP: the errors name no existing tool that could stand in for "
                       f"{ctx.tool}; the offline designer cannot invent its behaviour (use an "
                       "LLM designer)")
    config = {"tool": ctx.tool, "alias": alias}
    args, last = ctx.evidence[-1]["args"], ctx.evidence[-1]["id"]
    cases = [
        AcceptanceCase(f"forwards_to_the_existing_tool_{number}", [Step(rec["args"], {
            "ok": True, "via": alias, "result": {"ok": True}, "$calls": 1})],
            [{"result": {"ok": True}}], rec["id"])
        for number, rec in enumerate(_distinct_by_args(ctx.evidence), 1)]
    cases += [
        AcceptanceCase("reports_its_failure", [Step(args, {"ok": False, "via": alias,
                                                            "$calls": 1})],
                       [{"error": "the existing tool failed"}], last),
        AcceptanceCase("needs_an_invoker", [Step(args, {"ok": False, "via": alias})], None,
                       last),
    ]
    return Plan(
        "alias", "", f"Provides the missing tool {ctx.tool} by calling {alias}, the existing "
        f"tool the errors point to ({ctx.failure_mode}).",
        f"Forward the params unchanged to {alias} through the host's invoke.",
        config, ctx.args_schema if ctx.args_schema.get("type") == "object" else {"type": "object"},
        {"type": "object", "required": ["ok", "via"],
         "properties": {"ok": {"type": "boolean"}, "via": {"type": "string"}, "result": {},
                        "error": {"type": "string"}}},
        cases, name_from_tool_only=True)


PLANS: Final[dict[str, Callable[[Context], Plan]]] = {
    "ARGS": plan_args, "NOTFOUND": plan_notfound, "CONFLICT": plan_conflict,
    "PERM": plan_perm, "SYNTAX": plan_syntax, "RUNTIME": plan_runtime,
    "NETWORK": plan_network, "TIMEOUT": plan_timeout, "TOOL_GAP": plan_tool_gap,
}
