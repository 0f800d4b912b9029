"""The wheel still builds (``pip wheel --no-deps .``) and declares its license the PEP 639 way."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_builds_with_an_spdx_license_and_its_file(tmp_path: Path) -> None:
    # No build isolation: the test environment's setuptools (dev extra: >= 77.0.3) builds it, offline.
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    [wheel] = tmp_path.glob("orch-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = z.read(metadata).decode().split("\n\n", 1)[0].splitlines()
    assert "License-Expression: Apache-2.0" in headers
    assert "License-File: LICENSE" in headers and not any(h.startswith("License: ") for h in headers)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
