"""The one slug and the one escape for names from telemetry or an LLM."""

from __future__ import annotations

import ast
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from binloop.core.names import (
    UnsafeName,
    check_event_id,
    escape_name,
    slug,
    source_literal,
    tool_name_for,
)


@given(st.text())
def test_slug_and_tool_names_never_hold_a_separator_or_control_character(name: str) -> None:
    assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789_" for c in slug(name))
    tool = tool_name_for(name, "ARGS.x")
    assert tool.isascii() and tool.isidentifier() and "\x00" not in tool and "/" not in tool


@given(st.text())
def test_escape_is_one_printable_line_and_reversible(name: str) -> None:
    shown = escape_name(name)
    assert "\n" not in shown and "\r" not in shown and "\x00" not in shown
    assert "\u202e" not in shown and "\u2028" not in shown
    # Reversible: the escapes decode back to the name (unicode_escape on the ASCII form).
    assert shown.encode("ascii", "backslashreplace").decode("unicode_escape") == name


@given(st.text())
def test_source_literal_is_the_same_string_in_python(name: str) -> None:
    literal = source_literal(name)
    assert all(ord(c) > 0xFFFF or c.isprintable() for c in literal)
    assert ast.literal_eval(literal) == name


def test_nul_and_control_names() -> None:
    assert tool_name_for("book\x00flight", "ARGS.x\x1b[31m") == "book_flight_args_x_31m"
    assert escape_name("book\x00flight\x1b[31m") == "book\\x00flight\\x1b[31m"
    assert escape_name("caf\u00e9 \u202egnp.exe") == "caf\u00e9 \\u202egnp.exe"


@pytest.mark.parametrize("bad", ["/../../../..", "A" * 64, "a" * 63, "a" * 65, "", None, 7,
                                 "g" * 64, "a" * 63 + "\x00", "../" + "a" * 61])
def test_event_ids_are_64_lower_case_hex(bad: object) -> None:
    with pytest.raises(UnsafeName):
        check_event_id(bad)
    assert check_event_id("0123456789abcdef" * 4) == "0123456789abcdef" * 4


NAMES = ["book\x00flight", "a\u2028b\u2029c", "quote\"back\\slash", "caf\u00e9", "\U0001f600",
         "\ud800lone", "\u202eevil", "tab\tnew\nline", "\x7f\x80\x9f", "\U000e0001tag"]


def test_source_literal_means_the_same_in_typescript() -> None:
    import subprocess

    import orjson

    from pipeline_runner.toolchain import node_binary

    program = "console.log(JSON.stringify([" + ",".join(source_literal(n) for n in NAMES) + \
        "].map(s => Array.from({length: s.length}, (_, i) => s.charCodeAt(i)))))"
    out = subprocess.run([str(node_binary()), "-e", program], capture_output=True, check=True,
                         timeout=60)
    assert orjson.loads(out.stdout) == [_utf16_units(n) for n in NAMES]


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return list(struct.unpack(f"<{len(data) // 2}H", data))
