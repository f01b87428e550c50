#!/usr/bin/env bash
# tests/data/test_cli.sh: `megac preprocess` / `megac tokenizer` end to end, and every bad
# input (files, flags, damaged datasets read under MPI) refused with exit code 2 and a message
# naming the file and the problem.
# usage: test_cli.sh MEGAC DATA_PROBE MPIEXEC
set -uo pipefail
megac=$1 probe=$2 mpiexec=$3
tmp=$(mktemp -d /tmp/megac-test-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# expect RC NEEDLE CMD...: CMD exits with RC and its output contains NEEDLE.
expect() {
  local want=$1 needle=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  [[ $rc -eq $want ]] || { fail "$* -> exit $rc, want $want: $out"; return; }
  grep -qF -- "$needle" <<<"$out" || fail "$* -> message lacks '$needle': $out"
}

# --- good runs: fortunes-style text, JSON Lines, a trained tokenizer, encode/decode --------
printf 'One fortune.\n%%\nTwo: caf\xc3\xa9.\n%%\n' > "$tmp/f.txt"
printf '{"text": "hello"}\n{"text": "w\\u00f6rld", "x": 1}\n' > "$tmp/j.jsonl"
expect 0 "2 documents" "$megac" preprocess --input "$tmp/f.txt" --doc-separator % --output "$tmp/f.h5"
expect 0 "2 documents" "$megac" preprocess --input "$tmp/j.jsonl" --output "$tmp/j.h5"
printf '{"body": "one"}\n{"body": "two", "text": 3}\n{"body": "three"}\n' > "$tmp/k.data"
expect 0 "3 documents" "$megac" preprocess --input "$tmp/k.data" --input-format jsonl --json-keys body --output "$tmp/k.h5"
expect 0 "vocab 2" "$megac" tokenizer train --input "$tmp/f.txt" "$tmp/j.jsonl" --doc-separator % \
  --vocab-size 300 --output "$tmp/tok.json"
expect 0 "tokenizer $tmp/tok.json" "$megac" preprocess --input "$tmp/f.txt" "$tmp/j.jsonl" \
  --doc-separator % --tokenizer "$tmp/tok.json" --output "$tmp/b.h5"
"$megac" tokenizer encode --tokenizer "$tmp/tok.json" --input "$tmp/f.txt" > "$tmp/ids" || fail "encode"
"$megac" tokenizer decode --tokenizer "$tmp/tok.json" --input "$tmp/ids" | cmp -s - "$tmp/f.txt" ||
  fail "tokenizer encode | decode does not round-trip"
ls "$tmp"/*.tmp.* >/dev/null 2>&1 && fail "temporary files left behind"

# --- bad preprocess / tokenizer input ------------------------------------------------------
printf 'ok\nbad \xff\n' > "$tmp/bad.txt"
printf '{"text": "ok"}\n{"text": oops}\n' > "$tmp/bad.jsonl"
printf '{"format": "megac-bpe", "version": 1' > "$tmp/badtok.json"
expect 2 "$tmp/missing.txt: No such file" "$megac" preprocess --input "$tmp/missing.txt" --output "$tmp/o.h5"
expect 2 "$tmp/bad.txt:2: invalid UTF-8" "$megac" preprocess --input "$tmp/bad.txt" --output "$tmp/o.h5"
expect 2 "$tmp/bad.jsonl:2: invalid JSON" "$megac" preprocess --input "$tmp/bad.jsonl" --output "$tmp/o.h5"
expect 2 "$tmp/badtok.json: invalid JSON" "$megac" preprocess --input "$tmp/f.txt" --tokenizer "$tmp/badtok.json" --output "$tmp/o.h5"
expect 2 "$tmp/none.json: cannot open tokenizer: No such file" "$megac" preprocess --input "$tmp/f.txt" --tokenizer "$tmp/none.json" --output "$tmp/o.h5"
expect 2 "--output is required" "$megac" preprocess --input "$tmp/f.txt"
# a Hugging Face tokenizer.json whose parts have the wrong JSON type: refused, not read as empty
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": {}}}' > "$tmp/hf_m.json"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": {}}' > "$tmp/hf_a.json"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"content": "<s>"}]}' > "$tmp/hf_i.json"
for c in "m:'model.merges' is not an array" "a:'added_tokens' is not an array" \
         "i:added token 0 has no integer 'id' and string 'content'"; do
  expect 2 "$tmp/hf_${c%%:*}.json: ${c#*:}" "$megac" preprocess --input "$tmp/f.txt" --output "$tmp/o.h5" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$tmp/hf_${c%%:*}.json"
done
expect 2 "$tmp/bad.txt:2: invalid UTF-8" "$megac" tokenizer train --input "$tmp/bad.txt" --vocab-size 300 --output "$tmp/t.json"
expect 2 "--vocab-size must be" "$megac" tokenizer train --input "$tmp/f.txt" --vocab-size 100 --output "$tmp/t.json"
expect 2 "$tmp/nope.idx" "$megac" preprocess --from-megatron "$tmp/nope" --vocab-size 100 --output "$tmp/o.h5"
expect 0 "note: each text file became one document" "$megac" preprocess --input "$tmp/f.txt" --output "$tmp/one.h5"
cp "$tmp/f.txt" "$tmp/same.txt"; mkdir -p "$tmp/outdir"; mkfifo "$tmp/fifo.h5"
expect 2 "--output $tmp/same.txt is the input $tmp/same.txt: refusing to replace an input" "$megac" preprocess --input "$tmp/same.txt" --output "$tmp/same.txt"
cmp -s "$tmp/f.txt" "$tmp/same.txt" || fail "preprocess changed its input"
expect 2 "--output $tmp/outdir: is a directory" "$megac" preprocess --input "$tmp/f.txt" --output "$tmp/outdir"
expect 2 "--output $tmp/fifo.h5: not a regular file" timeout 20 "$megac" preprocess --input "$tmp/f.txt" --output "$tmp/fifo.h5"
[[ -e "$tmp/o.h5" ]] && fail "output written by a failed run"

# --- damaged datasets, opened by every rank -----------------------------------------------
read2() { "$mpiexec" -n 2 "$probe" read "$@"; }
"$probe" make good "$tmp/good.h5" || fail "make good"
for k in version2 format badtoken empty short offsets utf8 utf8fixed; do "$probe" make $k "$tmp/$k.h5" || fail "make $k"; done
head -c 3000 "$tmp/good.h5" > "$tmp/trunc.h5"
expect 0 "ok" read2 "$tmp/good.h5" 16 40 1
expect 0 "ok" read2 "$tmp/f.h5" 8 10 1
expect 0 "ok" read2 "$tmp/utf8.h5" 16 40 1       # h5py's str attributes (UTF-8)
expect 0 "ok" read2 "$tmp/utf8fixed.h5" 16 40 1
expect 2 "$tmp/none.h5: No such file" read2 "$tmp/none.h5" 16 40 1
expect 2 "$tmp/bad.txt: not an HDF5 file" read2 "$tmp/bad.txt" 16 40 1
expect 2 "$tmp/trunc.h5: damaged HDF5 file" read2 "$tmp/trunc.h5" 16 40 1
expect 2 "$tmp/version2.h5: format version 2 is not supported" read2 "$tmp/version2.h5" 16 40 1
expect 2 "$tmp/format.h5: not a megac token dataset" read2 "$tmp/format.h5" 16 40 1
expect 2 "$tmp/empty.h5: empty dataset" read2 "$tmp/empty.h5" 16 40 1
expect 2 "$tmp/offsets.h5: doc_offsets not increasing" read2 "$tmp/offsets.h5" 16 40 1
expect 2 "fewer than one sample" read2 "$tmp/short.h5" 16 40 1
expect 2 "$tmp/badtoken.h5: token id 4000 at position 300 is >= vocab_size 257" read2 "$tmp/badtoken.h5" 4 400 1
expect 2 "must add up to more than 0" read2 "$tmp/good.h5" 16 40 0,0,0
expect 2 "leaves the train split no documents" read2 "$tmp/good.h5" 16 40 0,1,0
expect 2 "not a non-negative number" read2 "$tmp/good.h5" 16 40 90,x,10
expect 2 "$tmp/fifo.h5: not a regular file" timeout 20 "$mpiexec" -n 2 "$probe" read "$tmp/fifo.h5" 16 40 1

echo "test_cli: $fails failure(s)"
[[ $fails -eq 0 ]]
