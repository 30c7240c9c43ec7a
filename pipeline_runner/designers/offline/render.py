"""Render an offline template into a generated tool's source (Python or TypeScript).

Python: the template's `# binloop:fill` constants get the design's values as Python
literals, its `from ._common import ...  # binloop:inline` becomes the helpers' source,
and all imports are gathered at the top. TypeScript: the same by line markers, with
the plugin wrapper (`_plugin.ts`) appended. Output is deterministic for a given design.
"""

from __future__ import annotations

import ast
import pprint
import textwrap
from importlib import resources
from typing import Any, Final

import orjson

TEMPLATES: Final = "pipeline_runner.designers.offline.templates"
FILLS: Final = ("NAME", "DESCRIPTION", "ANSWERS", "INPUT_SCHEMA", "OUTPUT_SCHEMA", "CONFIG")
TS_TYPES_IMPORT: Final = ('import type { AnyAgentTool, OpenClawPluginApi, '
                          'OpenClawPluginConfigSchema, OpenClawPluginDefinition } '
                          'from "openclaw/plugin-sdk/core";')


def template_text(name: str) -> str:
    return resources.files(TEMPLATES).joinpath(name).read_text(encoding="utf-8")


def _py_literal(value: Any) -> str:
    text = pprint.pformat(value, width=92, sort_dicts=False)
    if "\n" not in text and len(text) < 70:
        return text
    return "(\n" + textwrap.indent(text, "    ") + "\n)"


def _split_python(source: str) -> tuple[str | None, list[str], list[tuple[int, int, str]]]:
    """(docstring, import statements, [(first line, last line, fill name)]) of a module."""
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree)
    imports: list[str] = []
    spans: list[tuple[int, int, str]] = []
    for node in tree.body:
        end = node.end_lineno or node.lineno
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                spans.append((node.lineno, end, ""))
                continue
            if not (isinstance(node, ast.ImportFrom) and node.level == 1):
                imports.append(ast.get_source_segment(source, node) or "")
            spans.append((node.lineno, end, ""))
        elif isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if isinstance(target, ast.Name) and target.id in FILLS:
                spans.append((node.lineno, end, target.id))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and \
                node.value.value == docstring:
            spans.append((node.lineno, end, ""))
    return docstring, imports, spans


def render_python(template: str, fills: dict[str, Any], header: str) -> str:
    source = template_text(template)
    common = template_text("_common.py")
    _, own_imports, spans = _split_python(source)
    _, common_imports, _ = _split_python(common)
    common_body = common.split("# binloop:body\n", 1)[1]
    annotations = {"NAME": "str", "DESCRIPTION": "str", "ANSWERS": "dict[str, str]",
                   "INPUT_SCHEMA": "dict[str, Any]", "OUTPUT_SCHEMA": "dict[str, Any]",
                   "CONFIG": "dict[str, Any]"}
    lines = source.splitlines()
    out_body: list[str] = []
    skip_until = 0
    by_start = {start: (end, name) for start, end, name in spans}
    for number, line in enumerate(lines, 1):
        if number <= skip_until:
            continue
        if number in by_start:
            end, name = by_start[number]
            skip_until = end
            if name:
                out_body.append(f"{name}: {annotations[name]} = {_py_literal(fills[name])}")
            continue
        out_body.append(line)
    imports = sorted(set(own_imports) | set(common_imports))
    doc = '"""' + fills["DESCRIPTION"].replace('"""', "'''").replace("\\", "\\\\") + '"""'
    text = "\n".join([*(f"# {h}" for h in header.splitlines()), doc, "",
                      "from __future__ import annotations", "", *imports, "", "",
                      common_body.strip("\n"), "", "", "\n".join(out_body).strip("\n")])
    return text + "\n"


def _ts_fill(line: str, fills: dict[str, Any]) -> str:
    head = line.split(" = ", 1)[0]
    name = head.split()[1].rstrip(":")
    value = orjson.dumps(fills[name], option=orjson.OPT_INDENT_2).decode()
    return f"{head} = {value};"


def render_typescript(template: str, fills: dict[str, Any], header: str) -> str:
    source = template_text(template)
    common = template_text("_common.ts").split("// binloop:body\n", 1)[1]
    common = common.split("// binloop:end", 1)[0]
    plugin = template_text("_plugin.ts").split("// binloop:body\n", 1)[1]
    out: list[str] = [*(f"// {h}" for h in header.splitlines()), TS_TYPES_IMPORT, ""]
    for line in source.splitlines():
        if line.endswith("// binloop:inline"):
            out.append(common.strip("\n"))
        elif line.endswith("// binloop:fill"):
            out.append(_ts_fill(line, fills))
        else:
            out.append(line)
    out.extend(["", plugin.strip("\n")])
    return "\n".join(out) + "\n"
