#!/usr/bin/env bash
# scripts/test.sh: the test command of the README: install packages, build, run every test
# (meson test), then print "N passed, N failed, N skipped" as the last line.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
scripts/setup.sh || exit 1
scripts/build.sh "$build" || { echo "0 passed, 1 failed"; exit 1; }
meson test -C "$build" --print-errorlogs --num-processes 2 "$@"
rc=$?
python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
c = {"OK": 0, "FAIL": 0, "SKIP": 0}
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    key = "OK" if r in ("OK", "EXPECTEDFAIL") else "SKIP" if r == "SKIP" else "FAIL"
    c[key] += 1
print(f"{c['OK']} passed, {c['FAIL']} failed, {c['SKIP']} skipped")
PY
exit $rc
