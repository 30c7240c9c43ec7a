"""The loader's fast path: lines proven valid without parsing each in Python.

Polars reads a block of lines at once (`read_ndjson`, every field but `args` as text). A
line is *proven* when it is byte for byte the JSON encoding of the typed values polars
read, with keys in sorted order and compact (`,` `:`) or spaced (`, ` `: `) separators,
as the telemetry client, the simulator and `json.dumps(sort_keys=True)` write it, and
those values pass the checks of `binloop.core.schema` (re-stated here as conservative column
expressions: anything doubtful is simply not proven). Such a line can mean nothing else
to orjson, so the reference parser would accept it and produce exactly these values.
`args` is not typed: it is the text between the fields before and after it, accepted when
it is one JSON object that validation keeps as it is (no truncation).

Lines that are not proven are not rejected here: the loader hands them to
`binloop.core.schema.parse_record`, which decides and gives the reasons.
"""

from __future__ import annotations

import io
import math
import time
from typing import Final

import polars as pl

from binloop.core.classify import GIVEN, INFER
from binloop.core.schema import (
    FAILURE_MODE_MAX_CHARS,
    LINE_MAX_BYTES,
    OUTCOMES,
    TOOL_MAX_CHARS,
    RecordLimits,
    ts_floor,
)
from binloop.engines.polars.frame import empty_rows

# A record near the future-skew bound is left to the reference check (it reads the clock).
SKEW_MARGIN_MS: Final = 60_000
# `args` text of at most limit/5 bytes cannot re-encode to more than the limit (the worst
# growth of a JSON token under orjson is a short exponent float: `1e15` -> 18 bytes).
ARGS_GROWTH: Final = 5

_FIELDS: Final = ("agent_id", "args", "duration_ms", "error", "failure_mode", "id", "outcome",
                  "session_id", "tool", "ts")
_UINT: Final = r"^(0|[1-9][0-9]{0,17})$"
_INT: Final = r"^-?(0|[1-9][0-9]{0,17})$"
_MODE: Final = r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$"
_KNOWN_KEY: Final = '"(' + "|".join(_FIELDS) + r')"[ \t\r\n]*:'
# \uD800-\uDFFF escapes are left to the slow path: polars accepts a lone surrogate,
# orjson does not.
_UNSAFE_ESCAPE: Final = r"\\u[dD][89a-fA-F]"
# JSON tokens that orjson may re-encode longer than written: exponents, very long integers.
_GROWS: Final = r"[0-9][eE][+-]?[0-9]+[,}\] ]|[0-9]{19}"


def candidates(block: pl.DataFrame) -> pl.DataFrame:
    """The lines (`text`, `size`, `row`) worth trying: UTF-8 objects within the size limit."""
    text = pl.col("text")
    return block.filter(text.is_not_null() & (pl.col("size") <= LINE_MAX_BYTES)
                        & text.str.starts_with("{") & text.str.ends_with("}")
                        & ~text.str.contains(_UNSAFE_ESCAPE))


def prove(lines: list[bytes], candidates: pl.DataFrame, limits: RecordLimits,
           first_line: int) -> pl.DataFrame:
    """The candidate lines proven valid, as frame rows (with their block `row`)."""
    read = _read_fields(lines, candidates)
    if read is None:
        return empty_rows()
    spaced = (read["text"].str.slice(read["text"].str.find('":', literal=True) + 2, 1)
              == " ").fill_null(False)
    parts = [_prove_style(read.filter(spaced == style), limits, style, first_line)
             for style in (False, True)]
    return pl.concat(parts).sort("row")


def _read_fields(lines: list[bytes], candidates: pl.DataFrame) -> pl.DataFrame | None:
    """The candidates with every field but `args` as text (`v_<name>`), None if polars
    cannot read them."""
    schema = {name: pl.String for name in _FIELDS if name != "args"}
    for attempt in range(2):
        if candidates.is_empty():
            return None
        if candidates.height == len(lines):
            joined = b"\n".join(lines)
        else:
            joined = b"\n".join([lines[row] for row in candidates["row"].to_list()])
        try:
            values = pl.read_ndjson(io.BytesIO(joined), schema=schema)
        except pl.exceptions.PolarsError:
            if attempt:
                return None
            # Some line is not JSON: keep those that polars can read one by one.
            candidates = candidates.filter(
                pl.col("text").str.json_path_match("$.ts").is_not_null())
            continue
        if values.height != candidates.height:
            return None
        return pl.concat([candidates, values.rename({n: f"v_{n}" for n in schema})],
                         how="horizontal")
    return None


def _prove_style(lines: pl.DataFrame, limits: RecordLimits, spaced: bool,
                 first_line: int) -> pl.DataFrame:
    """Lines (all written with one separator style) whose text is the encoding of their
    values: `head` + `args` object + `tail`, or `whole` for a line without an object."""
    if lines.is_empty():
        return empty_rows()
    kv, sep = (": ", ", ") if spaced else (":", ",")
    text = pl.col("text")
    session_is_str = text.str.contains(f'"session_id"{kv}"', literal=True)
    session = pl.when(session_is_str).then(_json_string(pl.col("v_session_id"))).otherwise(
        pl.col("v_session_id"))
    # Every field after `args`, up to the closing brace; null if a required one is missing.
    after = pl.concat_str([
        _optional("duration_ms", kv, sep, pl.col("v_duration_ms")),
        _optional("error", kv, sep, _json_string(pl.col("v_error"))),
        _optional("failure_mode", kv, sep, _quoted(pl.col("v_failure_mode"))),
        pl.lit(f'"id"{kv}"'), pl.col("v_id"),
        pl.lit(f'"{sep}"outcome"{kv}"'), pl.col("v_outcome"),
        pl.lit(f'"{sep}"session_id"{kv}'), session,
        pl.lit(f'{sep}"tool"{kv}'), _quoted(pl.col("v_tool")),
        pl.lit(f'{sep}"ts"{kv}'), pl.col("v_ts"), pl.lit("}")])
    agent = _optional("agent_id", kv, sep, _json_string(pl.col("v_agent_id")))
    marked = lines.with_columns(session_int=~session_is_str,
                                args_object=text.str.contains(f'"args"{kv}{{', literal=True))
    with_args = _with_args(marked.filter(pl.col("args_object")), limits, kv, sep, agent, after)
    args_null = pl.when(text.str.contains(f'"args"{kv}null', literal=True)).then(
        pl.lit(f'"args"{kv}null{sep}')).otherwise(pl.lit(""))
    whole = pl.concat_str([pl.lit("{"), agent, args_null, after])
    without = (marked.lazy().filter(~pl.col("args_object"))
               .filter((text == whole).fill_null(False)).collect())
    checked = pl.concat([with_args, without], how="diagonal")
    return _typed(checked.lazy(), limits, first_line).collect()


def _with_args(lines: pl.DataFrame, limits: RecordLimits, kv: str, sep: str, agent: pl.Expr,
               after: pl.Expr) -> pl.DataFrame:
    """Lines `head` + args + `tail` whose args text is an object kept as it is."""
    text = pl.col("text")
    head = pl.concat_str([pl.lit("{"), agent, pl.lit(f'"args"{kv}')])
    tail = pl.concat_str([pl.lit(sep), after])
    args_len = (pl.col("size").cast(pl.Int64) - pl.col("head").str.len_bytes().cast(pl.Int64)
                - pl.col("tail").str.len_bytes().cast(pl.Int64))
    framed = (lines.lazy()
              .with_columns(head=head, tail=tail)
              .with_columns(args_len=args_len)
              .filter((text.str.starts_with(pl.col("head")) & text.str.ends_with(pl.col("tail"))
                       & pl.col("args_len").is_between(2, limits.args_max_bytes))
                      .fill_null(False))
              .with_columns(args=text.str.slice(pl.col("head").str.len_chars(),
                                                pl.col("args_len")))
              .filter(_args_object(pl.col("args")))
              .drop("head", "tail")
              .collect())
    # Long `args` could re-encode longer, or nest deeper than orjson allows: check those.
    long_args = pl.col("args_len") * ARGS_GROWTH > limits.args_max_bytes
    return pl.concat([framed.filter(~long_args),
                      framed.filter(long_args & _args_stay(pl.col("args")))])


def _optional(name: str, kv: str, sep: str, encoded: pl.Expr) -> pl.Expr:
    """`"name": value, `, or `"name": null, ` when the line has that, or "" (absent)."""
    written_null = f'"{name}"{kv}null{sep}'
    return (pl.when(pl.col(f"v_{name}").is_not_null())
            .then(pl.concat_str([pl.lit(f'"{name}"{kv}'), encoded, pl.lit(sep)]))
            .when(pl.col("text").str.contains(written_null, literal=True))
            .then(pl.lit(written_null)).otherwise(pl.lit("")))


def _quoted(value: pl.Expr) -> pl.Expr:
    """A string that is only valid (or only taken here) without characters to escape."""
    return pl.concat_str([pl.lit('"'), value, pl.lit('"')])


def _json_string(value: pl.Expr) -> pl.Expr:
    """The JSON text of a string as orjson and json.dumps write it, for strings whose only
    characters to escape are `"` and `\\` (others are left to the slow path)."""
    escaped = (value.str.replace_all("\\", "\\\\", literal=True)
               .str.replace_all('"', '\\"', literal=True))
    return pl.concat_str([pl.lit('"'), escaped, pl.lit('"')])


def _args_object(args: pl.Expr) -> pl.Expr:
    """The text between the fields before and after `args` is one object (a valid line
    whose `args` is followed by another pair would show one of our keys in it)."""
    return args.str.starts_with("{") & args.str.ends_with("}") & ~args.str.contains(_KNOWN_KEY)


def _args_stay(args: pl.Expr) -> pl.Expr:
    """Long `args` that orjson re-encodes no longer and that are not deeply nested."""
    return ~args.str.contains(_GROWS) & (args.str.count_matches(r"[\[{]") < 500)


def _typed(lines: pl.LazyFrame, limits: RecordLimits, first_line: int) -> pl.LazyFrame:
    """Rows whose values pass validation, as frame rows; the rest are dropped (slow path)."""
    mode = pl.col("v_failure_mode")
    code = mode.str.extract(r"^([^.]+)", 1).str.to_uppercase()
    taxonomy = sorted(limits.taxonomy)
    ts_ok = pl.col("v_ts").str.contains(_UINT)
    if limits.max_future_skew_ms is not None:
        bound = int(time.time() * 1000) + limits.max_future_skew_ms - SKEW_MARGIN_MS
        ts_ok = ts_ok & (pl.col("v_ts").cast(pl.UInt64, strict=False) <= max(bound, 0))
    floor = ts_floor(limits.ts_unit)  # a ts below it is in seconds: the slow path converts
    if floor > 0:
        ts_ok = ts_ok & (pl.col("v_ts").cast(pl.UInt64, strict=False) >= floor
                         if math.isfinite(floor) else pl.lit(False))
    session = pl.col("v_session_id")
    outcome = pl.col("v_outcome").str.to_lowercase()
    valid = (
        ts_ok
        & pl.when(pl.col("session_int")).then(session.str.contains(_INT))
        .otherwise(session.str.len_chars().is_between(1, TOOL_MAX_CHARS))
        & pl.col("v_tool").str.len_chars().is_between(1, TOOL_MAX_CHARS)
        & pl.col("v_outcome").str.contains(r"^[A-Za-z]+$") & outcome.is_in(sorted(OUTCOMES))
        & (mode.is_null() | (mode.str.contains(_MODE)
                             & (mode.str.len_chars() <= FAILURE_MODE_MAX_CHARS)
                             & code.is_in(taxonomy)))
        & (pl.col("v_duration_ms").is_null() | pl.col("v_duration_ms").str.contains(_UINT))
        & pl.col("v_id").str.contains(r"^[0-9a-fA-F]{64}$")
    )
    if limits.failure_modes != GIVEN:
        # A record whose failure mode is to be inferred takes the slow path, where the
        # parse step's classifier gives it (the same function in every engine).
        inferred = outcome.is_in(sorted(limits.infer_outcomes))
        valid = valid & ~(inferred if limits.failure_modes == INFER else
                          inferred & mode.is_null())
    normal_mode = pl.concat_str([code, mode.str.slice(code.str.len_bytes())])
    return lines.filter(valid.fill_null(False)).select(
        "row",
        line=pl.col("row").cast(pl.UInt64) + first_line,
        id=pl.col("v_id").str.to_lowercase(),
        session_id=session,
        session_int="session_int",
        ts=pl.col("v_ts").cast(pl.UInt64),
        tool="v_tool",
        failure_mode=normal_mode,
        outcome=outcome,
        record=pl.when(mode.is_not_null()).then(pl.col("text").cast(pl.Binary)),
    )
