"""binloop's declarations of the Hanzo bot's plugin contract restate the bot's own.

`pipeline_runner/targets/harness/hanzo-bot.d.ts` marks each declaration it restates;
each must be, whitespace aside, the text of the same declaration in hanzoai/bot's
src/plugins/types.ts (AnyAgentTool: src/agents/tools/common.ts). `BotPluginApi`
restates members: each of its members must be a member of the bot's type, unchanged,
except `registerTool`, narrowed to the tool-object form (its type must be one of the
bot's union).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.hanzo_bot import show

DTS = Path(__file__).resolve().parents[1] / "pipeline_runner/targets/harness/hanzo-bot.d.ts"
_DECL = re.compile(r"^// restated(?: \(members\))?(?:: (\S+))?\nexport type (\w+)", re.M)


def declaration(source: str, name: str) -> str:
    """`export type NAME ... ;` (to the first line that closes it at column 0)."""
    match = re.search(rf"^export type {name}\b[^\n]*(?:\n(?!export |// |\n)[^\n]*)*", source, re.M)
    assert match, f"{name} not found"
    return match.group(0)


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("( ", "(").replace(" )", ")").strip()


def restated() -> list[tuple[str, str]]:
    return [(m.group(1) or "src/plugins/types.ts", m.group(2))
            for m in _DECL.finditer(DTS.read_text())]


def test_every_restated_declaration_is_marked() -> None:
    names = [name for _, name in restated()]
    assert {"AnyAgentTool", "OpenClawPluginConfigSchema", "OpenClawPluginDefinition",
            "PluginLogger", "BotPluginApi"} <= set(names)


@pytest.mark.parametrize(("source", "name"), [r for r in restated() if r[1] != "BotPluginApi"])
def test_declaration_is_the_bots(source: str, name: str) -> None:
    ours = declaration(DTS.read_text(), name)
    theirs = declaration(show(source), name)
    assert squash(ours) == squash(theirs)


def members(text: str) -> dict[str, str]:
    body = text.split("{", 1)[1].rsplit("}", 1)[0]
    out: dict[str, str] = {}
    depth, current = 0, ""
    for line in body.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("/*", "*", "//")):
            continue
        current += " " + stripped
        depth += stripped.count("(") + stripped.count("{") + stripped.count("<")
        depth -= stripped.count(")") + stripped.count("}") + stripped.count(">")
        depth += stripped.count("=>")  # '=>' is not a closing bracket
        if depth <= 0 and current.rstrip().endswith(";"):
            key = re.match(r"\s*(\w+)", current)
            assert key
            out[key.group(1)] = squash(current)
            depth, current = 0, ""
    return out


def test_bot_plugin_api_members_are_the_bots() -> None:
    ours = members(declaration(DTS.read_text(), "BotPluginApi"))
    theirs = members(declaration(show("src/plugins/types.ts"), "BotPluginApi"))
    assert set(ours) <= set(theirs), set(ours) - set(theirs)
    for name, text in ours.items():
        if name == "registerTool":
            assert "tool: AnyAgentTool | OpenClawPluginToolFactory," in theirs[name]
            assert text == theirs[name].replace(" | OpenClawPluginToolFactory", "")
        else:
            assert text == theirs[name], name
