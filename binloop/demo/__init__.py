"""`binloop demo`: the whole BIN loop on one machine, in one command.

:mod:`binloop.demo.run` starts the embedded NATS server, the live job (`binloop run`
with the build runner and the offline designer) and the reference agent
(`python -m binloop.agent`) as real processes in a work directory, watches the loop
through NATS subjects and the tool library (:mod:`binloop.demo.observer`,
:mod:`binloop.demo.progress`) and prints the timeline (:mod:`binloop.demo.timeline`).
"""
