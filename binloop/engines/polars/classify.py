"""The failure-mode classifier over a polars frame (vectorised over distinct messages).

Error texts repeat endlessly, so the classifier (binloop.core.classify, the one
definition) runs once per distinct (error, outcome) pair and the answers are joined back:
the same modes as the parse step gives record by record, at the cost of the distinct
messages only.
"""

from __future__ import annotations

import polars as pl

from binloop.core.classify import classify


def infer_modes(frame: pl.DataFrame, error: str = "error",
                outcome: str = "outcome") -> pl.DataFrame:
    """`frame` with `inferred_mode` and `error_template` columns (null where `error` is
    null or blank: nothing to infer from)."""
    pairs = frame.select(error, outcome).unique().filter(
        pl.col(error).is_not_null() & (pl.col(error).str.strip_chars() != ""))
    verdicts = [classify(text, kind) for text, kind in pairs.iter_rows()]
    answers = pairs.with_columns(
        inferred_mode=pl.Series([v.failure_mode for v in verdicts], dtype=pl.String),
        error_template=pl.Series([v.template for v in verdicts], dtype=pl.String))
    return frame.join(answers, on=[error, outcome], how="left", nulls_equal=False,
                      maintain_order="left")
