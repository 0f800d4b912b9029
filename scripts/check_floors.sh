#!/usr/bin/env bash
# The lower bounds in pyproject.toml are versions orch was run with: install every dependency of orch and
# its extras (aws, gcp, azure, postgres, plot, dev; not e2e's torch) pinned AT its lower bound into a
# scratch venv, then run the provider adapter, fake-contract and contract tests there.
#
#   scripts/check_floors.sh            # or: ORCH_CHECK_FLOORS=1 scripts/test.sh
#   ORCH_FLOORS_VENV=/tmp/floors scripts/check_floors.sh   # keep (and reuse) the venv
#
# Transitive dependencies resolve to what pip picks for the pinned set. A dependency without a ">=" bound
# is an error: every bound must be one this script can pin.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
venv="${ORCH_FLOORS_VENV:-$(mktemp -d)/venv}"
pins="$(mktemp)"
python3 - "$pins" <<'PY'
import re
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
wanted = list(project["dependencies"])
for extra in ("aws", "gcp", "azure", "postgres", "plot", "dev"):
    wanted += [r for r in extras[extra] if not r.startswith("orch[")]
pins = []
for req in wanted:
    m = re.match(r"^\s*([A-Za-z0-9_.-]+(?:\[[^\]]+\])?)\s*([^;#]*)", req)
    floor = re.search(r">=\s*([0-9][^,\s]*)", m.group(2)) if m else None
    if floor is None:
        sys.exit(f"check_floors: {req!r} has no '>=' lower bound to pin")
    pins.append(f"{m.group(1)}=={floor.group(1)}")
open(sys.argv[1], "w").write("\n".join(pins) + "\n")
print(f"check_floors: {len(pins)} dependencies pinned at their lower bounds", file=sys.stderr)
PY
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
fi
"$venv/bin/python" -m pip install -q -r "$pins"
"$venv/bin/python" -m pip check
installed=$(date +%s)
echo "check_floors: installed in $((installed - start)) s into $venv" >&2
# The checkout itself is imported from the working tree, not installed (no egg-info, no dependency upgrade).
PYTHONPATH="$PWD" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_aws_adapter.py tests/test_azure_adapter.py tests/test_gcp_adapter.py tests/test_vast_adapter.py \
  tests/test_lambda_adapter.py tests/test_runpod_adapter.py tests/contract tests/test_gce_fake_contract.py \
  tests/test_fake_spec_vast.py tests/test_fake_specs_lambda_runpod.py "$@"
echo "check_floors: passed in $(( $(date +%s) - start )) s in all" >&2
