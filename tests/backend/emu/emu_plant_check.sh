#!/bin/sh
# tests/backend/emu/emu_plant_check.sh: runs emu_plant in one mode and checks that the
# build's sanitizer caught (or, for `ok`, did not report) the planted bug.
#   usage: emu_plant_check.sh SANITIZER EMU_PLANT MODE SOURCE
#   SANITIZER is meson's b_sanitize (none, thread, address, address,undefined, ...).
#   race needs thread, oob needs address, ok needs either; otherwise exit 77 (skip).
san=$1 exe=$2 mode=$3 src=$4
fail() { echo "emu_plant_check: FAIL ($mode, b_sanitize=$san): $*"; exit 1; }
case "$san" in *thread*) have=thread ;; *address*) have=address ;; *) have=none ;; esac
case "$mode:$have" in
    ok:none | race:address | race:none | oob:thread | oob:none)
        echo "emu_plant_check: $mode needs another sanitizer (b_sanitize=$san): skip"; exit 77 ;;
esac
out=$("$exe" "$mode" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$mode" = ok ]; then
    [ $rc -eq 0 ] || fail "exit code $rc"
    printf '%s\n' "$out" | grep -q "Sanitizer" && fail "a sanitizer reported the correct kernel"
    echo "emu_plant_check: ok: clean under $have"; exit 0
fi
if [ "$mode" = race ]; then want="ThreadSanitizer: data race" marker=PLANT-RACE
else want="heap-buffer-overflow" marker=PLANT-OOB; fi
[ $rc -ne 0 ] || fail "exit code 0"
printf '%s\n' "$out" | grep -q "$want" || fail "no '$want' in the output"
for line in $(grep -n "$marker" "$src" | cut -d: -f1); do
    if printf '%s\n' "$out" | grep -Eq "emu_plant\.cpp:$line([^0-9]|\$)"; then
        echo "emu_plant_check: $mode: '$want' reported at emu_plant.cpp:$line"; exit 0
    fi
done
fail "the report does not point at the $marker lines of $src"
