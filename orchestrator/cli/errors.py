"""How the CLI fails: one clear line on stderr and an exit code, never a traceback.

Exit codes: 0 ok; 1 nothing matched / operation failed; 2 bad input (usage, manifest, flags).
"""

from __future__ import annotations

import sys
from typing import NoReturn

EXIT_NO_MATCH = 1
EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(code)
