"""binloop inside a Hanzo bot (OpenClaw) process: the proxy plugins binloop writes for
each active tool, the load path that holds them (`load_path`), the shared client of the
sandboxed tool host (`host_client.ts`), and the bridge plugin (`bridge/`). See
docs/hanzo.md."""
