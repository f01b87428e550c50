#!/usr/bin/env bash
# scripts/run-default.sh: the README's main job on the built-in default.
# For now (foundation issue) it builds megac and shows the target production layout
# (128 ranks = TP 2 x PP 4 x DP 16); training on Debian's fortunes corpus comes with the
# training and data issues.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
build/megac/megac layout --world-size 128 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4
