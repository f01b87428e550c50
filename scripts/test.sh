#!/usr/bin/env bash
# scripts/test.sh: the test command of the README: install packages, build, run every test
# (meson test), then print "N passed, N failed, N skipped" as the last line.
#
# Four builds: the default one (CPU backend; CUDA compiled by nvcc when the toolkit is
# present, its GPU tests skip without a GPU), then the CUDA backend under the CPU emulator
# (BUILD-emu: op parity and training parity against the CPU backend), and the emulator again
# under AddressSanitizer and ThreadSanitizer (BUILD-emu-address, BUILD-emu-thread: the op
# test and the planted-bug checks). MEGAC_TEST_EMULATOR=0 skips the last three.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
scripts/setup.sh || exit 1
scripts/build.sh "$build" || { echo "0 passed, 1 failed"; exit 1; }
# Two tests run at once on the box's cores, so OpenMP workers that spin while idle (libgomp's
# default, kept for training: backend/cpu/cpu_blas.h) would steal the other test's core.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
meson test -C "$build" --print-errorlogs --num-processes 2 "$@"
rc=$?
logs=("$build/meson-logs/testlog.json")
if [[ "${MEGAC_TEST_EMULATOR:-1}" == 1 && $# -eq 0 ]]; then
  emu="$build-emu"
  if scripts/build.sh "$emu" -Dcuda=disabled -Dgpu_emulator=true; then
    meson test -C "$emu" --print-errorlogs --num-processes 2 --suite cuda --suite emu || rc=1
    logs+=("$emu/meson-logs/testlog.json")
  else
    echo "test.sh: the emulator build failed"; rc=1
  fi
  for san in address thread; do
    d="$build-emu-$san"
    if scripts/build.sh "$d" -Dcuda=disabled -Dgpu_emulator=true -Db_sanitize="$san" \
         -Db_lundef=false -Dbuildtype=debugoptimized; then
      OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
        meson test -C "$d" --print-errorlogs --num-processes 1 --suite sanitize || rc=1
      logs+=("$d/meson-logs/testlog.json")
    else
      echo "test.sh: the $san-sanitizer emulator build failed"; rc=1
    fi
  done
fi
python3 - "${logs[@]}" <<'PY'
import json, os, sys
c = {"OK": 0, "FAIL": 0, "SKIP": 0}
failed = []
for path in sys.argv[1:]:
    if not os.path.exists(path):
        c["FAIL"] += 1
        failed.append((path, "MISSING", "the build did not produce this test log"))
        continue
    for line in open(path):
        t = json.loads(line)
        r = t["result"]
        key = "OK" if r in ("OK", "EXPECTEDFAIL") else "SKIP" if r == "SKIP" else "FAIL"
        c[key] += 1
        if key == "FAIL":
            failed.append((os.path.dirname(os.path.dirname(path)) + ": " + t["name"], r,
                           (t.get("stdout") or "") + (t.get("stderr") or "")))
# The failures again, last, so that a log cut to its tail still names them.
for name, r, out in failed:
    print(f"FAILED {name} ({r})")
    for l in out.strip().splitlines()[-15:]:
        print("    " + l[:300])
print(f"{c['OK']} passed, {c['FAIL']} failed, {c['SKIP']} skipped")
PY
exit $rc
