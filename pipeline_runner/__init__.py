"""The BIN build pipeline (Loop 1 action side)."""
