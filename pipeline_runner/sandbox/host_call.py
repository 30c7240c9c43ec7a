# One call of a gated python tool, run by binloop's tool host inside the sandbox (written
# by binloop, not by a designer): reads binloop-call.json, runs the tool's run(params),
# prints one JSON line {"ok", "result": {"content", "details"}} or {"ok": false, "error"}.
import importlib.util
import json
import sys


def main() -> int:
    with open("binloop-call.json", encoding="utf-8") as handle:
        call = json.load(handle)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # the tool's prints must not pass for the reply
    try:
        spec = importlib.util.spec_from_file_location("binloop_tool", call["entry"])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["binloop_tool"] = module
        spec.loader.exec_module(module)
        details = module.run(call["params"], None)
        reply = {"ok": True, "result": {"content": [{"type": "text", "text": json.dumps(details)}],
                                         "details": details}}
    except Exception as exc:
        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    real_stdout.write(json.dumps(reply, default=str) + "\n")
    real_stdout.flush()
    return 0


raise SystemExit(main())
