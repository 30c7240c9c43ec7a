"""What the telemetry simulator says: tools, their arguments, failure modes, error texts.

Everything here is a polars expression over a frame of random integers (`r1`, `r2`,
`r3`, u64) and a `secret` flag, so that a million records take seconds. Every string
built here is plain printable ASCII without `"` or `\\`, so that the JSON text that
`binloop.sim.simulate` assembles is byte-for-byte what `orjson` would write; that keeps the
records' `id` an exact content hash (`binloop.core.schema.record_id`).

Secrets: where `secret` is set, some tools put a credential-looking value in their
arguments (an `Authorization` header, a database DSN with a password, a cloud key), and
about a quarter of PERM and NETWORK errors quote a token. They are fakes made of digits,
shaped like real keys (`sk-live-...`, `AKIA...`, `ghp_...`), so that redaction can be
tested downstream.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import polars as pl

# Level-2 failure modes per taxonomy code (level 1 is the paper's code).
FINE_MODES: Final[dict[str, tuple[str, ...]]] = {
    "PERM": ("denied", "token_expired", "readonly_fs", "scope_missing", "sandbox_blocked"),
    "NOTFOUND": ("file", "module", "endpoint", "record", "branch", "payment_method"),
    "TIMEOUT": ("exec", "http", "lock_wait", "build", "test_suite"),
    "SYNTAX": ("json", "yaml", "python", "sql", "shell_quote"),
    "RUNTIME": ("type_error", "key_error", "oom", "segfault", "assertion"),
    "TOOL_GAP": ("no_pdf_reader", "no_diff_tool", "no_csv_parser", "no_image_resize"),
    "ARGS": ("missing_field", "bad_date", "payment_total_mismatch", "enum_value", "too_long"),
    "CONFLICT": ("merge", "stale_write", "no_seats", "insufficient_balance", "duplicate_key"),
    "NETWORK": ("dns", "connection_reset", "tls_handshake", "rate_limited", "proxy"),
}
CODES: Final = tuple(FINE_MODES)
ALL_MODES: Final = tuple(f"{code}.{fine}" for code, fines in FINE_MODES.items() for fine in fines)

_MODULES = ("api", "billing", "auth", "search", "models", "utils", "cli", "db", "views", "jobs")
_HOSTS = ("api.example.com", "billing.internal", "registry.npmjs.test", "db.internal",
          "auth.example.com", "cdn.example.net")
_PACKAGES = ("requests", "polars", "left-pad", "numpy", "express", "pydantic", "lodash")
_USERS = ("mia_li_3668", "raj_sanchez_7340", "olivia_gonzalez_2305", "yusuf_rossi_9620")
_DATES = ("2024-05-15", "2024-05-20", "2024-05-24", "2024-06-01", "2024-06-11")

# Tool name -> weight among background calls (how often an agent calls it).
TOOLS: Final[dict[str, int]] = {
    "read_file": 20, "write_file": 10, "search_code": 10, "run_tests": 8, "run_shell": 10,
    "git_commit": 4, "git_push": 3, "http_get": 6, "http_post": 3, "db_query": 5,
    "install_package": 3, "lint": 4, "type_check": 3, "docker_build": 2, "kubectl_apply": 1,
    "s3_upload": 2, "send_email": 1, "create_ticket": 1, "search_web": 3,
    "book_reservation": 2, "update_reservation_flights": 2,
}
TOOL_NAMES: Final = tuple(TOOLS)


def pick(options: Sequence[str], rand: pl.Expr) -> pl.Expr:
    """`options[rand % len(options)]` as a string expression."""
    return pl.lit(pl.Series(list(options), dtype=pl.String)).gather(
        (rand % len(options)).cast(pl.Int64))


def _num(rand: pl.Expr, modulo: int, offset: int = 0) -> pl.Expr:
    return ((rand % modulo) + offset).cast(pl.String)


def _token(rand: pl.Expr, length: int) -> pl.Expr:
    """`length` digits derived from `rand` (a fake secret's body)."""
    digits = pl.concat_str([rand.cast(pl.String), (rand // 7).cast(pl.String),
                            (rand // 13).cast(pl.String)])
    return digits.str.slice(0, length).str.pad_end(length, "7")


def json_object(fields: Sequence[tuple[str, pl.Expr, bool]]) -> pl.Expr:
    """A compact JSON object from (key, value, is_string) in the order given.

    Keys must be given sorted (orjson's OPT_SORT_KEYS order); a null value drops the pair.
    """
    parts: list[pl.Expr] = []
    for key, value, is_string in fields:
        text = pl.concat_str([pl.lit('"'), value, pl.lit('"')]) if is_string else value
        parts.append(pl.concat_str([pl.lit(f'"{key}":'), text]))
    body = pl.concat_str(parts, separator=",", ignore_nulls=True)
    return pl.concat_str([pl.lit("{"), body, pl.lit("}")])


def _when_secret(secret_value: pl.Expr) -> pl.Expr:
    return pl.when(pl.col("secret")).then(secret_value).otherwise(pl.lit(None, pl.String))


def _tool_args(tool: str) -> pl.Expr:
    r1, r2, r3 = pl.col("r1"), pl.col("r2"), pl.col("r3")
    path = pl.concat_str([pl.lit("src/"), pick(_MODULES, r1), pl.lit("/"),
                          pick(_MODULES, r2 // 11), pl.lit(".py")])
    s = True
    fields: dict[str, list[tuple[str, pl.Expr, bool]]] = {
        "read_file": [("path", path, s)],
        "write_file": [("bytes", _num(r2, 20000, 1), False), ("path", path, s)],
        "search_code": [("query", pl.concat_str([pl.lit("def "), pick(_MODULES, r2)]), s),
                        ("repo", pl.lit("acme/app"), s)],
        "run_tests": [("path", pl.concat_str([pl.lit("tests/test_"), pick(_MODULES, r1),
                                               pl.lit(".py")]), s),
                      ("timeout_s", _num(r2, 600, 30), False)],
        "run_shell": [("cmd", pl.concat_str([pl.lit("make "), pick(("build", "test", "lint",
                                                                     "release"), r2)]), s),
                      ("cwd", pl.lit("/workspace/app"), s),
                      ("env_token", pl.concat_str([pl.lit("ghp_"), _token(r3, 36)]), s)],
        "git_commit": [("message", pl.concat_str([pl.lit("fix "), pick(_MODULES, r1),
                                                  pl.lit(" #"), _num(r2, 900, 100)]), s)],
        "git_push": [("branch", pl.concat_str([pl.lit("feature/"), pick(_MODULES, r1)]), s),
                     ("remote", pl.lit("origin"), s)],
        "http_get": [("headers", json_object([("Authorization", pl.concat_str(
                         [pl.lit("Bearer sk-live-"), _token(r3, 32)]), s)]), False),
                     ("url", pl.concat_str([pl.lit("https://"), pick(_HOSTS, r1),
                                            pl.lit("/v1/items/"), _num(r2, 100000)]), s)],
        "http_post": [("bytes", _num(r2, 4096, 2), False),
                      ("url", pl.concat_str([pl.lit("https://"), pick(_HOSTS, r1),
                                             pl.lit("/v1/events")]), s)],
        "db_query": [("dsn", pl.concat_str([pl.lit("postgres://app:"), _token(r3, 12),
                                            pl.lit("@db.internal:5432/prod")]), s),
                     ("sql", pl.concat_str([pl.lit("SELECT * FROM "), pick(_MODULES, r1),
                                            pl.lit(" WHERE id = "), _num(r2, 10000)]), s)],
        "install_package": [("manager", pick(("pip", "npm", "cargo"), r1), s),
                            ("name", pick(_PACKAGES, r2), s)],
        "lint": [("path", path, s)],
        "type_check": [("path", path, s), ("strict", pl.lit("true"), False)],
        "docker_build": [("context", pl.lit("."), s),
                         ("tag", pl.concat_str([pl.lit("acme/app:"), _num(r2, 500)]), s)],
        "kubectl_apply": [("manifest", pl.concat_str([pl.lit("deploy/"), pick(_MODULES, r1),
                                                      pl.lit(".yaml")]), s),
                          ("namespace", pick(("prod", "staging"), r2), s)],
        "s3_upload": [("aws_access_key_id", pl.concat_str([pl.lit("AKIA"), _token(r3, 16)]), s),
                      ("bucket", pl.lit("acme-artifacts"), s),
                      ("key", pl.concat_str([pl.lit("builds/"), _num(r2, 9999), pl.lit(".tgz")]),
                       s)],
        "send_email": [("subject", pl.concat_str([pl.lit("Build "), _num(r2, 9999)]), s),
                       ("to", pl.concat_str([pick(_USERS, r1), pl.lit("@example.com")]), s)],
        "create_ticket": [("project", pl.lit("OPS"), s),
                          ("title", pl.concat_str([pick(_MODULES, r1), pl.lit(" is flaky")]), s)],
        "search_web": [("query", pl.concat_str([pick(_PACKAGES, r1), pl.lit(" changelog")]), s)],
        "book_reservation": [("amount", _num(r2, 2000, 100), False),
                             ("payment_id", pl.concat_str([pl.lit("credit_card_"),
                                                           _num(r3, 9000000, 1000000)]), s),
                             ("user_id", pick(_USERS, r1), s)],
        "update_reservation_flights": [("cabin", pick(("economy", "business"), r1), s),
                                       ("date", pick(_DATES, r2), s),
                                       ("reservation_id", _num(r3, 900000, 100000), s)],
    }
    secret_keys = {"env_token", "headers", "aws_access_key_id"}
    chosen = []
    for key, value, is_string in fields[tool]:
        if key in secret_keys:
            value = _when_secret(value)
        chosen.append((key, value, is_string))
    if tool == "db_query":  # the password only when secret, a passwordless DSN otherwise
        dsn = pl.when(pl.col("secret")).then(chosen[0][1]).otherwise(
            pl.lit("postgres://app@db.internal:5432/prod"))
        chosen[0] = ("dsn", dsn, True)
    return json_object(chosen)


def tool_args(tool: str) -> pl.Expr:
    """The `args` object of rows of `tool` (unknown tools: `{"n": <number>}`)."""
    if tool in TOOLS:
        return _tool_args(tool)
    return json_object([("n", _num(pl.col("r1"), 1000), False)])


def args_json(frame: pl.DataFrame) -> pl.Series:
    """The `args` object of each row of `frame`, by its `tool` column.

    Computed tool by tool on that tool's rows only (a when/then chain over all tools
    would evaluate every branch on every row).
    """
    indexed = frame.select("tool", "r1", "r2", "r3", "secret").with_row_index("_row")
    parts = [part.select("_row", args=tool_args(str(part["tool"][0])))
             for part in indexed.partition_by("tool", maintain_order=False)]
    if not parts:
        return pl.Series("args", [], dtype=pl.String)
    return pl.concat(parts).sort("_row")["args"]


_ERRORS: Final[dict[str, tuple[str, str]]] = {
    # code -> (text before the fine mode, text after it); a number from r2 follows.
    "PERM": ("PermissionError: ", " while accessing resource "),
    "NOTFOUND": ("NotFound: ", " does not exist, id "),
    "TIMEOUT": ("Timeout: ", " did not finish within seconds: "),
    "SYNTAX": ("SyntaxError: ", " parse error at line "),
    "RUNTIME": ("RuntimeError: ", " in worker, exit status "),
    "TOOL_GAP": ("ToolGap: ", " needed, no installed tool provides it, request "),
    "ARGS": ("ArgumentError: ", " in call, field index "),
    "CONFLICT": ("Conflict: ", " on write, version "),
    "NETWORK": ("NetworkError: ", " talking to upstream, attempt "),
}


def error_text() -> pl.Expr:
    """An error message for each failed row from its `failure_mode` (null elsewhere).

    PERM and NETWORK errors of `secret` rows, and a quarter of the others, quote a token
    (as real auth and proxy errors sometimes do).
    """
    mode = pl.col("failure_mode")
    code = mode.str.split(".").list.first()
    fine = mode.str.split(".").list.get(1, null_on_oob=True).fill_null("unspecified")
    prefix: Any = pl.when(pl.lit(False)).then(pl.lit(""))
    suffix: Any = pl.when(pl.lit(False)).then(pl.lit(""))
    for name, (before, after) in _ERRORS.items():
        prefix = prefix.when(code == name).then(pl.lit(before))
        suffix = suffix.when(code == name).then(pl.lit(after))
    text = pl.concat_str([prefix.otherwise(pl.lit("Error: ")), fine.str.replace_all("_", " "),
                          suffix.otherwise(pl.lit(" ")), _num(pl.col("r2"), 1000)])
    leaked = pl.concat_str([text, pl.lit(" (token ghp_"), _token(pl.col("r3"), 36),
                            pl.lit(" rejected)")])
    quote_token = (pl.col("secret") | (pl.col("r1") % 4 == 0)) & code.is_in(["PERM", "NETWORK"])
    with_secret = pl.when(quote_token).then(leaked).otherwise(text)
    return pl.when(mode.is_null()).then(pl.lit(None, pl.String)).otherwise(with_secret)
