#!/usr/bin/env bash
# scripts/test.sh [--quick | MESON_TEST_ARGS...]: the test command of the README: install
# packages, build, run the tests (meson test), then print how long each part took, the 10
# slowest tests, and "N passed, N failed, N skipped" as the last line.
#
# Four builds: the default one (CPU backend; CUDA compiled by nvcc when the toolkit is
# present, its GPU tests skip without a GPU), then the CUDA backend under the CPU emulator
# (BUILD-emu: op parity and training parity against the CPU backend), and the emulator again
# under AddressSanitizer and ThreadSanitizer (BUILD-emu-address, BUILD-emu-thread: the quick
# op tests and the planted-bug checks). MEGAC_TEST_EMULATOR=0 skips the last three.
#   --quick            the `quick` suite of the default and emulator builds (unit and op
#                      tests, a few small multi-rank runs, one emulated op test): the
#                      edit-compile-test loop, ~20 s of tests (tests/README.md)
#   MESON_TEST_ARGS    passed to `meson test` in the default build only (a suite, a name)
set -uo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
quick=0
if [[ "${1:-}" == --quick ]]; then quick=1; shift; fi
parts=()  # "name seconds" of each part, in order
timed() {  # NAME CMD...: runs CMD, records how long it took; returns its status
  local name="$1" t0=$SECONDS rc
  shift
  "$@"
  rc=$?
  parts+=("$name $((SECONDS - t0))")
  return $rc
}
timed setup scripts/setup.sh || exit 1
timed "build $build" scripts/build.sh "$build" || { echo "0 passed, 1 failed"; exit 1; }
# Two tests run at once on the box's cores, so OpenMP workers that spin while idle (libgomp's
# default, kept for training: backend/cpu/cpu_blas.h) would steal the other test's core.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
rc=0
logs=()
# run_tests BUILD MESON_TEST_ARGS...: one test pass, its log kept for the summary.
run_tests() {
  local d="$1"
  shift
  rm -f "$d/meson-logs/testlog.json"
  timed "tests $d" meson test -C "$d" --print-errorlogs "$@" || rc=1
  logs+=("$d/meson-logs/testlog.json")
}
if ((quick)); then
  run_tests "$build" --num-processes 2 --suite quick
elif (($# > 0)); then
  run_tests "$build" --num-processes 2 "$@"
else
  run_tests "$build" --num-processes 2
fi
if [[ "${MEGAC_TEST_EMULATOR:-1}" == 1 && $# -eq 0 ]]; then
  emu="$build-emu"
  if timed "build $emu" scripts/build.sh "$emu" -Dcuda=disabled -Dgpu_emulator=true; then
    if ((quick)); then
      run_tests "$emu" --num-processes 2 emu_kernel cuda_ops  # the emulated ones of `quick`
    else
      run_tests "$emu" --num-processes 2 --suite cuda --suite emu
    fi
  else
    echo "test.sh: the emulator build failed"; rc=1
  fi
  for san in address thread; do
    ((quick)) && break
    d="$build-emu-$san"
    if timed "build $d" scripts/build.sh "$d" -Dcuda=disabled -Dgpu_emulator=true \
         -Db_sanitize="$san" -Db_lundef=false -Dbuildtype=debugoptimized; then
      OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 run_tests "$d" --num-processes 1 --suite sanitize
    else
      echo "test.sh: the $san-sanitizer emulator build failed"; rc=1
    fi
  done
fi
python3 - "${parts[@]/#/part=}" "${logs[@]}" <<'PY'
import json, os, sys
c = {"OK": 0, "FAIL": 0, "SKIP": 0}
failed, tests = [], []
parts = [a[5:].rsplit(" ", 1) for a in sys.argv[1:] if a.startswith("part=")]
for path in (a for a in sys.argv[1:] if not a.startswith("part=")):
    build = os.path.dirname(os.path.dirname(path))
    if not os.path.exists(path):
        c["FAIL"] += 1
        failed.append((path, "MISSING", "the build did not produce this test log"))
        continue
    for line in open(path):
        t = json.loads(line)
        r = t["result"]
        key = "OK" if r in ("OK", "EXPECTEDFAIL") else "SKIP" if r == "SKIP" else "FAIL"
        c[key] += 1
        tests.append((t.get("duration", 0.0), build, t["name"]))
        if key == "FAIL":
            failed.append((build + ": " + t["name"], r,
                           (t.get("stdout") or "") + (t.get("stderr") or "")))
print("\ntime per part (s):")
for name, s in parts:
    print(f"  {int(s):6d}  {name}")
print(f"  {sum(int(s) for _, s in parts):6d}  in all")
print("slowest tests (s):")
for d, build, name in sorted(tests, reverse=True)[:10]:
    print(f"  {d:6.1f}  {build}: {name}")
# The failures again, last, so that a log cut to its tail still names them.
for name, r, out in failed:
    print(f"FAILED {name} ({r})")
    for l in out.strip().splitlines()[-15:]:
        print("    " + l[:300])
print(f"{c['OK']} passed, {c['FAIL']} failed, {c['SKIP']} skipped")
PY
exit $rc
