"""binloop's reference agent: how an agent integrates with the BIN loop (Python).

* :mod:`binloop.agent.agent` — the agent: telemetry for every tool call, answering
  pause/resume, using the tools that answer its failures;
* :mod:`binloop.agent.control_listener` — the agent's listener on the NATS control plane
  (pause, resume, registry notices) and the pause gate;
* :mod:`binloop.agent.registry` — the gated tools of the tool library (only what the
  manifest lists, hash-checked, never quarantined), called through the sandboxed tool
  host (`pipeline_runner.sandbox.host`: one sandboxed worker per tool version, never an
  import into the agent);
* :mod:`binloop.agent.task`, :mod:`binloop.agent.airline` — the scripted job and the mock
  airline service it runs against.

Run it with `python -m binloop.agent --nats URL --library DIR` (see `--help`);
`binloop demo` starts it beside the live job.
"""
