"""Inside the sandbox, before the untrusted command: set the resource limits, then exec it.

Run as `python -I -S limits_exec.py LIMITS_JSON ARGV...` (standard library only, never
the project). Limits are set here, inside the new user namespace, rather than on bwrap
itself: RLIMIT_NPROC then counts the processes of this sandbox only (the kernel charges
it per user namespace), and a hard limit lowered here cannot be raised again by the
command (no CAP_SYS_RESOURCE in the initial namespace).
"""

import json
import os
import resource
import sys


def apply(limits: dict) -> None:  # type: ignore[type-arg]
    os.nice(int(limits.get("nice", 0)))
    for name, value in limits["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (int(value), int(value)))


def main() -> None:
    apply(json.loads(sys.argv[1]))
    argv = sys.argv[2:]
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
