"""A tool design (paper Alg. 2, Design step) and its validation.

A designer returns a :class:`Design`: the tool's name, what it answers, JSON Schemas
for its input and output, an implementation sketch, and acceptance criteria as data:
cases of one or more steps (`params` in, an `expect`ed subset of the output) with an
optional scripted `invoke` (the host's way to call the original tool: each entry is
`{"result": value}` or `{"error": "message"}`, optionally with `"delay_ms"`). The
targets turn the cases into unit tests. Matching rules for `expect` (same in every
target's harness): objects match when every expected key matches; lists match
element-wise with equal length; `{"$contains": s}` (substring), `{"$type": t}`,
`{"$len": n}`, `{"$some": pattern}` (some list element matches), `{"$gte"|"$lte": n}`;
the step key `"$calls"` is the number of invoke calls so far. A step's string param
`"$prev.<key>"` is replaced by that key of the previous step's output.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final

import jsonschema
import orjson

from binloop.core.names import UnsafeName, check_tool_name
from binloop.library.manifest import Answers

DESIGN_MAX_BYTES: Final = 64 * 1024
MAX_CASES: Final = 20
MAX_STEPS: Final = 5
MATCH_OPERATORS: Final = frozenset({"$contains", "$type", "$len", "$some", "$gte", "$lte"})
JSON_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})


class NoDesign(Exception):
    """The designer cannot design a tool for this event (a clean rollback)."""


class InvalidDesign(ValueError):
    """A design (or an implementation) does not meet the contract (a clean rollback)."""


@dataclass(frozen=True)
class Step:
    params: dict[str, Any]
    expect: dict[str, Any]
    sleep_ms: int = 0


@dataclass(frozen=True)
class AcceptanceCase:
    name: str
    steps: list[Step]
    invoke: list[dict[str, Any]] | None = None
    reproduces: str | None = None


@dataclass(frozen=True)
class Design:
    name: str
    description: str
    answers: Answers
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    sketch: str
    acceptance: list[AcceptanceCase]
    behaviour: str = "custom"
    config: dict[str, Any] = field(default_factory=dict)
    designer: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def cases_json(self) -> list[dict[str, Any]]:
        return [asdict(case) for case in self.acceptance]


# The offline designer's templates that call the tool they answer through the host's
# invoke; `alias` calls the existing tool it stands for (its config's `alias`).
WRAPPER_BEHAVIOURS: Final = frozenset({"retry", "guard", "background"})


def invoked_tool(design: Design) -> str | None:
    """The one tool that this design's tool may call through the host's invoke (None: no
    tool). A wrapper calls the tool it answers, an alias the tool it stands for, a custom
    (LLM) design at most the tool it answers; the host refuses any other name."""
    if design.behaviour == "alias":
        alias = design.config.get("alias")
        return alias if isinstance(alias, str) and alias else None
    if design.behaviour in WRAPPER_BEHAVIOURS or design.behaviour == "custom":
        return design.answers["tool"]
    return None


def design_from_json(value: Any, answers: Answers, designer: str) -> Design:
    """Build and validate a design from decoded JSON (e.g. an LLM's structured output)."""
    if not isinstance(value, dict):
        raise InvalidDesign("a design must be a JSON object")
    try:
        cases = [AcceptanceCase(
            name=str(c["name"]),
            steps=[Step(dict(s["params"]), dict(s["expect"]), int(s.get("sleep_ms", 0)))
                   for s in c["steps"]],
            invoke=None if c.get("invoke") is None else [dict(x) for x in c["invoke"]],
            reproduces=c.get("reproduces"),
        ) for c in value["acceptance"]]
        design = Design(
            name=value["name"], description=str(value["description"]), answers=answers,
            input_schema=dict(value["input_schema"]), output_schema=dict(value["output_schema"]),
            sketch=str(value.get("sketch", "")), acceptance=cases,
            behaviour=str(value.get("behaviour", "custom")),
            config=dict(value.get("config") or {}), designer=designer)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidDesign(f"design is missing or mistypes a field: {exc!r}") from None
    return check_design(design)


def check_design(design: Design) -> Design:
    """Raise :class:`InvalidDesign` unless the design is safe and complete."""
    try:
        check_tool_name(design.name)
    except UnsafeName as exc:
        raise InvalidDesign(str(exc)) from None
    size = len(orjson.dumps(design.to_json()))
    if size > DESIGN_MAX_BYTES:
        raise InvalidDesign(f"design is {size} bytes, over the {DESIGN_MAX_BYTES}-byte limit")
    if not 1 <= len(design.description) <= 1000:
        raise InvalidDesign("description must be 1-1000 characters")
    for label, schema in (("input", design.input_schema), ("output", design.output_schema)):
        _check_schema(label, schema)
    if not 1 <= len(design.acceptance) <= MAX_CASES:
        raise InvalidDesign(f"need 1-{MAX_CASES} acceptance cases")
    if not any(case.reproduces for case in design.acceptance):
        raise InvalidDesign("no acceptance case reproduces the observed failure")
    names = [case.name for case in design.acceptance]
    if len(set(names)) != len(names):
        raise InvalidDesign("acceptance case names must be unique")
    for case in design.acceptance:
        _check_case(case, design.input_schema)
    return design


def _check_schema(label: str, schema: dict[str, Any]) -> None:
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidDesign(f"{label} schema is not a JSON Schema: {exc.message}") from None
    if schema.get("type") != "object":
        raise InvalidDesign(f"{label} schema must describe an object")


def _check_case(case: AcceptanceCase, input_schema: dict[str, Any]) -> None:
    if not case.name or len(case.name) > 100:
        raise InvalidDesign("an acceptance case needs a name of 1-100 characters")
    if not 1 <= len(case.steps) <= MAX_STEPS:
        raise InvalidDesign(f"case {case.name!r} needs 1-{MAX_STEPS} steps")
    if case.invoke is not None:
        for entry in case.invoke:
            if not ("result" in entry or "error" in entry):
                raise InvalidDesign(f"case {case.name!r}: invoke entries need result or error")
    validator = jsonschema.Draft202012Validator(input_schema)
    for step in case.steps:
        if not 0 <= step.sleep_ms <= 10_000:
            raise InvalidDesign(f"case {case.name!r}: sleep_ms must be 0-10000")
        if not step.expect:
            raise InvalidDesign(f"case {case.name!r}: a step must expect something")
        _check_pattern(step.expect, case.name)
        if not _refers_back(step.params):
            errors = sorted(validator.iter_errors(step.params), key=str)
            if errors:
                raise InvalidDesign(f"case {case.name!r}: params do not fit the input schema: "
                                    f"{errors[0].message[:200]}")


def _check_pattern(pattern: Any, case: str) -> None:
    if isinstance(pattern, dict):
        for key, value in pattern.items():
            if key.startswith("$") and key != "$calls" and key not in MATCH_OPERATORS:
                raise InvalidDesign(f"case {case!r}: unknown match operator {key!r}")
            if key == "$type" and value not in JSON_TYPES:
                raise InvalidDesign(f"case {case!r}: unknown $type {value!r}")
            _check_pattern(value, case)
    elif isinstance(pattern, list):
        for item in pattern:
            _check_pattern(item, case)


def _refers_back(params: Any) -> bool:
    if isinstance(params, str):
        return params.startswith("$prev.")
    if isinstance(params, dict):
        return any(_refers_back(v) for v in params.values())
    if isinstance(params, list):
        return any(_refers_back(v) for v in params)
    return False
