"""numpy for scanning bytes, imported without starting OpenBLAS's thread pool.

binloop uses numpy only to find bytes in blocks of lines (newline offsets and the checks
around them: `binloop.replay.readers`, `binloop.core.block_parse`), never for linear
algebra. Importing numpy loads OpenBLAS, which starts a thread per core at once; that
is start-up every replay pays for nothing: `python -c "import numpy"` took 0.176 s wall
and 0.166 CPU-s with it, 0.112 s and 0.109 CPU-s with `OPENBLAS_NUM_THREADS=1` (medians
of 15 alternating runs, 2-core machine, load average 2.6). So the variable is set to 1
for the import, unless the user set it; it is removed again afterwards, so that child
processes (a build's tests, a sandboxed tool) get the environment they were given.
"""

from __future__ import annotations

import os
from typing import Final

_THREADS_VARIABLE: Final = "OPENBLAS_NUM_THREADS"
_set_here = _THREADS_VARIABLE not in os.environ
if _set_here:
    os.environ[_THREADS_VARIABLE] = "1"
try:
    import numpy as np
finally:
    if _set_here:
        os.environ.pop(_THREADS_VARIABLE, None)

__all__ = ["np"]
