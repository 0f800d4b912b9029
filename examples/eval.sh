#!/usr/bin/env bash
# The command example's job: a stand-in evaluation sweep over $EVAL_SPLIT. Shipped with the code pack
# (code: {path: examples}); replace it with yours.
set -euo pipefail
echo "eval split=${EVAL_SPLIT:-test} args=$*"
python3 -c 'import platform; print("evaluated on", platform.node())'
