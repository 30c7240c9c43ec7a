"""What the LLM designers share: prompts, output schemas, validation, retries, limits.

A provider client only has to turn (system prompt, messages, JSON schema) into the raw
JSON text of one answer (:class:`JsonClient`). This module asks for a design, then for
an implementation, each as structured output, and validates every answer: JSON, the
schema, the size limit, the design contract (`pipeline_runner.design`), and for
sources a syntax check (parsing only: nothing generated runs here). An invalid answer
is sent back with the reason, up to `retries` times. Transport failures are retried by
the SDKs themselves and then surface as :class:`ProviderError` (a clean rollback); a
request that runs out of time surfaces as `TimeoutError`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, Protocol, TypeVar

import orjson

from binloop.core.config import default
from binloop.core.events import BINEvent
from binloop.library.manifest import Answers, Manifest
from pipeline_runner import design as design_module
from pipeline_runner.design import Design, InvalidDesign, NoDesign, design_from_json

T = TypeVar("T")
Message = dict[str, str]
DEFAULT_MAX_OUTPUT_BYTES: Final = 200_000


class ProviderError(NoDesign):
    """The LLM provider could not be reached or refused (after the SDK's retries)."""


class JsonClient(Protocol):
    def complete_json(self, system: str, messages: list[Message], schema: dict[str, Any],
                      schema_name: str) -> str:
        """The raw JSON text of one structured answer."""


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


DESIGN_SCHEMA: Final = {
    "type": "object", "additionalProperties": False,
    "required": ["name", "description", "input_schema_json", "output_schema_json", "sketch",
                 "acceptance"],
    "properties": {
        "name": _string("tool name: lower-case letters, digits and _ (2-64 characters)"),
        "description": _string("what the tool does, for the agent that will call it"),
        "input_schema_json": _string("JSON Schema (type object) of the params, as JSON text"),
        "output_schema_json": _string("JSON Schema (type object) of the result, as JSON text"),
        "sketch": _string("implementation sketch"),
        "acceptance": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["name", "steps_json", "invoke_json", "reproduces"],
            "properties": {
                "name": _string("case name"),
                "steps_json": _string("JSON array of steps {params, expect, sleep_ms?}"),
                "invoke_json": _string("JSON array of scripted invoke responses, or null"),
                "reproduces": {"type": ["string", "null"],
                               "description": "id of the evidence record this case reproduces"},
            }}},
    }}
IMPLEMENTATION_SCHEMA: Final = {
    "type": "object", "additionalProperties": False, "required": ["source"],
    "properties": {"source": _string("the complete source of the tool's one file")}}

SYSTEM: Final = """You design and implement micro-tools for an AI agent fleet (the "Build It \
Now" loop). A tool of the agent failed the same way several times; you get the failing calls \
(secrets redacted) and design one small, deterministic tool that prevents or handles that \
failure next time. Tools are pure functions of their params unless they need the host's \
invoke(tool, args) capability (to call the failing tool, e.g. to retry it). Answer with JSON \
only, exactly matching the given schema."""

PYTHON_CONTRACT: Final = """Target python: one module tool.py that defines NAME: str, \
DESCRIPTION: str, ANSWERS: dict[str, str], INPUT_SCHEMA: dict[str, Any], OUTPUT_SCHEMA: \
dict[str, Any] and def run(params: dict[str, Any], invoke: Callable[[str, dict[str, Any]], \
Any] | None = None) -> dict[str, Any]. Standard library only, no I/O, no network, no \
subprocesses. It must pass `ruff check --select E,F,W,B --ignore E501` and `mypy --strict` \
(Python 3.10+, `from __future__ import annotations`)."""

TYPESCRIPT_CONTRACT: Final = """Target typescript: one ES module index.ts, a Hanzo bot \
(OpenClaw) plugin using the real plugin API only. `import type { AnyAgentTool, \
OpenClawPluginApi, OpenClawPluginConfigSchema, OpenClawPluginDefinition } from \
"openclaw/plugin-sdk/core";` then a default export typed OpenClawPluginDefinition: {id, name, \
description, configSchema, register(api)} where configSchema is a validator object like the \
SDK's emptyPluginConfigSchema() ({safeParse(value), jsonSchema}), not a raw JSON Schema, and \
register calls api.registerTool(tool) once with an AnyAgentTool {name, label, description, \
parameters, execute(toolCallId, params, signal?, onUpdate?)}; execute resolves to {content: \
[{type: "text", text: JSON.stringify(details)}], details}. The API has no invokeTool: a tool \
that must call another tool exports `function binloopHost(invoke?: (tool: string, params: \
Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>): void`, which binloop's \
host calls before register (invoke may be undefined: answer with an error then); it may \
invoke only the tool it answers (the host refuses any other name). It must \
pass `tsc --strict --noEmit --erasableSyntaxOnly` (no enums, namespaces or parameter \
properties) against both the openclaw package and the bot's declarations below, with Node \
types available; no imports besides node: built-ins and that type import. The bot's \
declarations:
"""


@dataclass(frozen=True)
class Limits:
    retries: int = default("llm_retries")
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES


def matching_rules() -> str:
    return design_module.__doc__ or ""


def design_prompt(event: BINEvent, manifest: Manifest) -> str:
    library = [{"name": e["name"], "answers": e["answers"], "status": e["status"]}
               for e in manifest["tools"].values()]
    facts = {"tool": event["tool"], "failure_mode": event["failure_mode"],
             "count": event["count"], "evidence": event["evidence"][-3:], "library": library}
    return ("Design a tool that answers this recurring failure.\n\n"
            + orjson.dumps(facts, option=orjson.OPT_INDENT_2).decode()
            + "\n\nThe acceptance cases become unit tests; at least one must reproduce an "
              "evidence record (give its id in `reproduces`). The tool's name must not be "
              "one of the library's unless it answers the same failure. Acceptance rules:\n"
            + matching_rules())


def implementation_prompt(design: Design, target: str) -> str:
    if target == "python":
        contract = PYTHON_CONTRACT
    else:
        declarations = resources.files("pipeline_runner.targets.harness").joinpath(
            "hanzo-bot.d.ts").read_text()
        contract = TYPESCRIPT_CONTRACT + declarations
    return (contract + "\n\nImplement this design so that every acceptance case passes:\n"
            + orjson.dumps(design.to_json(), option=orjson.OPT_INDENT_2).decode())


def _loads(text: str, what: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidDesign(f"{what} is not JSON: {exc}") from None


def parse_design(text: str, answers: Answers, designer: str) -> Design:
    raw = _loads(text, "the design")
    if not isinstance(raw, dict):
        raise InvalidDesign("the design must be a JSON object")
    try:
        cases = [{"name": c["name"], "steps": _loads(c["steps_json"], f"case {c['name']} steps"),
                  "invoke": None if c.get("invoke_json") in (None, "", "null")
                  else _loads(c["invoke_json"], f"case {c['name']} invoke"),
                  "reproduces": c.get("reproduces")} for c in raw["acceptance"]]
        value = {"name": raw["name"], "description": raw["description"],
                 "input_schema": _loads(raw["input_schema_json"], "input_schema_json"),
                 "output_schema": _loads(raw["output_schema_json"], "output_schema_json"),
                 "sketch": raw.get("sketch", ""), "acceptance": cases, "behaviour": "llm"}
    except (KeyError, TypeError) as exc:
        raise InvalidDesign(f"the design misses or mistypes {exc}") from None
    return design_from_json(value, answers, designer)


def parse_source(text: str, target: str) -> dict[str, str]:
    raw = _loads(text, "the implementation")
    source = raw.get("source") if isinstance(raw, dict) else None
    if not isinstance(source, str) or not source.strip():
        raise InvalidDesign("the implementation has no source")
    if target == "python":
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise InvalidDesign(f"tool.py does not parse: {exc}") from None
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        if "run" not in names:
            raise InvalidDesign("tool.py defines no top-level run(params, invoke=None)")
        return {"tool.py": source}
    if "export default" not in source or "registerTool" not in source:
        raise InvalidDesign("index.ts must export a default plugin that calls api.registerTool")
    return {"index.ts": source}


class LLMDesigner:
    """A designer backed by any :class:`JsonClient` (Anthropic, OpenAI, ...)."""

    def __init__(self, name: str, client: JsonClient, limits: Limits | None = None) -> None:
        self.name = name
        self.client = client
        self.limits = limits or Limits()

    def design(self, event: BINEvent, manifest: Manifest) -> Design:
        answers: Answers = {"tool": event["tool"], "failure_mode": event["failure_mode"]}
        return self._ask(design_prompt(event, manifest), DESIGN_SCHEMA, "tool_design",
                         lambda text: parse_design(text, answers, self.name))

    def implement(self, design: Design, target: str) -> dict[str, str]:
        return self._ask(implementation_prompt(design, target), IMPLEMENTATION_SCHEMA,
                         "tool_source", lambda text: parse_source(text, target))

    def _ask(self, prompt: str, schema: dict[str, Any], schema_name: str,
             parse: Callable[[str], T]) -> T:
        messages: list[Message] = [{"role": "user", "content": prompt}]
        problem = "no answer"
        for _ in range(self.limits.retries + 1):
            text = self.client.complete_json(SYSTEM, messages, schema, schema_name)
            try:
                if len(text.encode()) > self.limits.max_output_bytes:
                    raise InvalidDesign(f"the answer is over {self.limits.max_output_bytes} bytes")
                return parse(text)
            except InvalidDesign as exc:
                problem = str(exc)
                messages += [{"role": "assistant", "content": text[:8000]},
                             {"role": "user", "content": f"That answer is invalid: {problem}. "
                                                         "Answer again with corrected JSON."}]
        raise InvalidDesign(f"{self.name}: no valid answer after {self.limits.retries + 1} "
                            f"attempts; last problem: {problem}")


def designer_from_config(name: str, client_of: Callable[[Any], JsonClient],
                         config: Any = None) -> LLMDesigner:
    """The LLM designer `name` with the client `client_of(config)` builds from the
    job's settings (the environment's and defaults when `config` is None)."""
    if config is None:
        from binloop.core.config import load_config
        config = load_config({})
    return LLMDesigner(name, client_of(config), Limits(retries=config.llm_retries))
