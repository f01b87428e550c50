#!/usr/bin/env bash
# tests/bench/bad_input.sh BENCH_TRAIN BENCH_GEMM BENCH_PIPELINE BENCH_CHECKSUM: the benchmark
# programs refuse bad arguments with one line and exit 2 before any work (a thread count
# past the limit used to crash inside libgomp; bench_checksum's arguments used to reach
# HDF5 as a file name or a size), and nothing is written for a refused run.
source "$(dirname "$0")/../lib.sh"
train=$1 gemm=$2 pipeline=$3 checksum=$4
lib_tmpdir bench-input

expect 2 "--threads 100000: at most 1024 CPU threads per rank" "$train" --threads 100000
expect 2 "--threads -3 must be >= 0" "$train" --threads -3 --config small
expect 2 "--threads 5000: at most 1024 CPU threads per rank" "$gemm" --threads 5000
expect 2 "--reps and --steps must be >= 1" "$gemm" --steps 0
expect 2 "--vocab must be >= 1" "$gemm" --vocab 0 --no-gemm
expect 2 "--num-threads 2000: at most 1024 CPU threads per rank" "$pipeline" --num-threads 2000
expect 2 "--threads 5000: at most 1024" python3 "$(dirname "$0")/../../bench/peer_torch.py" \
  --threads 5000 --bench-train "$train"

expect 2 "DIR is not a folder" "$checksum" "$tmp/none"
expect 2 "DIR is not a folder" "$checksum" --threads
expect 2 "PARAMS_M must be a number in [0.1, 1000]" "$checksum" "$tmp" abc
expect 2 "TOKENS_M in [2, 1000]" "$checksum" "$tmp" 1 1
expect 2 "too many arguments" "$checksum" "$tmp" 1 2 3
expect 0 "usage: megac-mpiexec -n 2 bench_checksum" "$checksum" --help
[[ -z "$(ls -A "$tmp")" ]] || fail "a refused run wrote: $(ls "$tmp")"

lib_done bench_bad_input
