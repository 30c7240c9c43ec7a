"""The telemetry simulator and θ sweeps.

- ``simulate``, ``catalogue``: seeded telemetry with ground truth beside it.
- ``sweep``, ``truth``, ``sweep_report``, ``replay_engine``: replay a file for every
  (window, θ), score the BINEvents, write the report.
- ``paper``: the paper's published figures; ``plotting``: matplotlib, headless.
"""
