#!/usr/bin/env bash
# tests/scripts/test_slurm.sh MODE MEGAC YIELD_LIB SBATCH_SCRIPT LOCAL_CLUSTER: the Slurm
# launch script scripts/slurm/pretrain_gpt.sbatch, tested for real.
#
# MODE dry-run (no Slurm needed): the script run by hand with DRY_RUN=1 and the production
#   layout (SLURM_NTASKS=128 on 16 nodes): the layout divides (TP 2 x PP 4 x DP 16) and the
#   command is `srun --mpi=pmi2 ... megac train --device cuda` with one GPU per rank.
# MODE cluster: starts a one-machine Slurm cluster (scripts/slurm/local_cluster.sh) in a
#   temporary directory, stopped on exit whatever happens, and submits four jobs at once:
#     bad    6 tasks at TP 2 x PP 2: the script rejects the layout before srun (exit 2);
#     train  8 tasks, TP 2 x PP 2 x DP 2, CPU mode, tiny model, --mock-data, 4 iterations,
#            checkpoints in SAVE;
#     resume the same SAVE with 6 iterations, after `train` (--dependency=afterok): the
#            script finds the checkpoint and continues at iteration 5;
#     gpu    MEGAC_DEVICE=cuda with a stand-in megac that prints what each rank sees:
#            rank r gets entry r of CUDA_VISIBLE_DEVICES.
#   `sbatch --wait` waits for `resume`; then each job's output is checked for its lines and
#   the success (or failure) marker, since sbatch --wait returns 0 even for a job cancelled
#   while pending. Then one more job:
#     stop   60 iterations; SIGUSR1 to its ranks (`scancel -s USR1`, what --signal=USR1@180
#            sends before the time limit) after iteration 3: megac saves and exits 0, the
#            script prints STOPPED and requeues the job, which resumes from that checkpoint
#            and ends with SUCCESS at iteration 60 (one output file, one appended log).
# Exit 77 (meson: SKIP) when Slurm or munge is not installed, or not root.
set -uo pipefail
mode="$1" megac="$(realpath "$2")" yield_lib="$(realpath "$3")" sbatch_script="$(realpath "$4")"
local_cluster="$(realpath "$5")"
t0=$(date +%s%N)
elapsed() { local ds=$((($(date +%s%N) - t0) / 100000000)); echo "$((ds / 10)).$((ds % 10)) s"; }
fail() { echo "FAIL: $*"; exit 1; }
# expect FILE REGEX WHAT: FILE has a line matching REGEX.
expect() { grep -Eq -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "$3"; }; }
reject() { ! grep -Eq -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "$3"; }; }

tmp=$(mktemp -d)
chmod 0711 "$tmp"  # munged (user munge) must reach $tmp/cluster/munge
cleanup() {
  [[ "$mode" == cluster ]] && "$local_cluster" stop "$tmp/cluster" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM  # meson's timeout: still stop the cluster

if [[ "$mode" == dry-run ]]; then
  env -u SLURM_JOB_ID SLURM_NTASKS=128 SLURM_JOB_NUM_NODES=16 MEGAC_BIN="$megac" MOCK_DATA=1 \
    SAVE="$tmp/ckpt" DRY_RUN=1 bash "$sbatch_script" > "$tmp/dry.txt" 2>&1 \
    || { cat "$tmp/dry.txt"; fail "the dry run of the production layout failed"; }
  expect "$tmp/dry.txt" "^world size 128 = tensor-parallel 2 x data-parallel 16 x pipeline-parallel 4$" \
    "no layout printed for 128 ranks"
  expect "$tmp/dry.txt" "^pretrain_gpt: layout TP 2 x PP 4 x DP 16 = 128; 16 micro-batches" "no layout summary"
  expect "$tmp/dry.txt" "command: srun --mpi=pmi2 --ntasks=128 --kill-on-bad-exit=1 bash -c .* megac-rank $megac train .*--device cuda .*--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --mock-data" \
    "unexpected srun command"
  reject "$tmp/dry.txt" "LD_PRELOAD" "GPU mode must not preload the CPU yield shim"
  # A layout that does not divide, and a global batch that does not split over DP: exit 2.
  env SLURM_NTASKS=100 MEGAC_BIN="$megac" MOCK_DATA=1 DRY_RUN=1 bash "$sbatch_script" > "$tmp/bad.txt" 2>&1
  rc=$?; ((rc == 2)) || { cat "$tmp/bad.txt"; fail "100 ranks at TP 2 x PP 4: exit $rc, want 2"; }
  expect "$tmp/bad.txt" "FAILED: world size 100 .* not divisible by TP 2 x PP 4 = 8; not launching" "no message for 100 ranks"
  env SLURM_NTASKS=128 GLOBAL_BATCH_SIZE=100 MEGAC_BIN="$megac" MOCK_DATA=1 DRY_RUN=1 bash "$sbatch_script" > "$tmp/bad.txt" 2>&1
  rc=$?; ((rc == 2)) || { cat "$tmp/bad.txt"; fail "GLOBAL_BATCH_SIZE 100: exit $rc, want 2"; }
  expect "$tmp/bad.txt" "FAILED: GLOBAL_BATCH_SIZE 100 is not divisible by MICRO_BATCH_SIZE 2 x DP 16" "no message for the batch"
  # Job output goes to logs/ (in the repository, kept empty by its .gitignore), not the root.
  grep -qx "#SBATCH --output=logs/%x-%j.out" "$sbatch_script" || fail "the job output does not go to logs/"
  [[ -f "$(dirname "$sbatch_script")/../../logs/.gitignore" ]] || fail "the repository has no logs/ folder"
  echo "ok: dry run of the production layout (128 = 2 x 4 x 16, --device cuda) and two rejected layouts in $(elapsed)"
  exit 0
fi

for p in sbatch squeue slurmctld slurmd munged; do
  command -v "$p" >/dev/null || { echo "SKIP: $p not installed (apt-get install slurm-wlm munge)"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: the local Slurm cluster runs its daemons as root"; exit 77; }

"$local_cluster" start "$tmp/cluster"
rc=$?; ((rc == 77)) && exit 77
((rc == 0)) || { tail -n 20 "$tmp"/cluster/log/*.log; fail "the local cluster did not start"; }
export SLURM_CONF="$tmp/cluster/slurm.conf"
echo "cluster up after $(elapsed)"

# Everything a job needs, on the sbatch command line (overrides the production #SBATCH header).
# (--signal: the script asks for SIGUSR1 180 s before the limit, more than these 2 minutes)
one_node=(--nodes=1 --gpus-per-node=0 --cpus-per-task=1 --oversubscribe --time=2 --signal=USR1@5)
tiny=(MEGAC_BIN="$megac" MEGAC_YIELD_LIB="$yield_lib" MEGAC_DEVICE=cpu MOCK_DATA=1
      TP=2 PP=2 NUM_LAYERS=2 HIDDEN_SIZE=32 NUM_ATTENTION_HEADS=2 SEQ_LENGTH=16
      MICRO_BATCH_SIZE=1 GLOBAL_BATCH_SIZE=4 LR_WARMUP_ITERS=0 MIN_LR=0
      SAVE_INTERVAL=2 LOG_INTERVAL=1 EVAL_ITERS=0 SAVE="$tmp/ckpt" EXTRA_ARGS="--mock-vocab-size 300")
submit() { # submit NAME ENV... -- SBATCH_FLAGS...: prints the job id
  local name="$1" envs=(); shift
  while [[ "$1" != -- ]]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" sbatch --parsable --job-name="$name" --output="$tmp/$name.out" "$@" "$sbatch_script"
}
bad=$(submit bad "${tiny[@]}" -- "${one_node[@]}" --ntasks-per-node=6) || fail "sbatch (bad) failed"
train=$(submit train "${tiny[@]}" TRAIN_ITERS=4 -- "${one_node[@]}" --ntasks-per-node=8) \
  || fail "sbatch (train) failed"
cat > "$tmp/fake-megac" <<EOF
#!/usr/bin/env bash
# Stand-in for megac in GPU mode: the real layout, then each rank says which GPU it sees.
[[ "\$1" == layout ]] && exec "$megac" "\$@"
echo "fake rank \$SLURM_PROCID local \$SLURM_LOCALID CUDA_VISIBLE_DEVICES=\$CUDA_VISIBLE_DEVICES \$*"
EOF
chmod +x "$tmp/fake-megac"
gpu=$(submit gpu MEGAC_BIN="$tmp/fake-megac" MOCK_DATA=1 TP=2 PP=2 GLOBAL_BATCH_SIZE=8 \
        SAVE="$tmp/ckpt-gpu" CUDA_VISIBLE_DEVICES=7,6,5,4,3,2,1,0 -- "${one_node[@]}" --ntasks-per-node=8) \
  || fail "sbatch (gpu) failed"
echo "submitted bad=$bad train=$train gpu=$gpu after $(elapsed); waiting for resume (after train)"
env "${tiny[@]}" TRAIN_ITERS=6 timeout 50 sbatch --wait --job-name=resume --output="$tmp/resume.out" \
  --dependency=afterok:"$train" --kill-on-invalid-dep=yes "${one_node[@]}" --ntasks-per-node=8 \
  "$sbatch_script" || fail "sbatch --wait (resume) failed or timed out: exit $?"
echo "sbatch --wait returned after $(elapsed)"
for _ in $(seq 100); do  # the other jobs are short; give them up to 10 s to leave the queue
  [[ -z "$(squeue -h -o %i)" ]] && break
  sleep 0.1
done
[[ -z "$(squeue -h -o %i)" ]] || { squeue; fail "jobs still queued"; }

# train: the layout first, then 8 ranks training 4 iterations, then the success marker.
out="$tmp/train.out"
touch "$out" "$tmp/resume.out" "$tmp/bad.out" "$tmp/gpu.out"
reject "$out" "^pretrain_gpt: FAILED" "train: the job failed"
expect "$out" "^world size 8 = tensor-parallel 2 x data-parallel 2 x pipeline-parallel 2$" "train: no layout"
layout_line=$(grep -n "^world size 8" "$out" | head -1 | cut -d: -f1)
srun_line=$(grep -n "^pretrain_gpt: command: srun --mpi=pmi2 --ntasks=8 " "$out" | head -1 | cut -d: -f1)
[[ -n "$srun_line" && "$layout_line" -lt "$srun_line" ]] || { cat "$out"; fail "train: layout not printed before srun"; }
expect "$out" "CPU mode: 8 ranks .* LD_PRELOAD=$yield_lib MPIR_CVAR_NOLOCAL=1" "train: CPU-mode settings not applied"
expect "$out" "^megac train: world 8 = TP 2 x PP 2 x DP 2 " "train: megac did not start 8 ranks"
expect "$out" "^model: L=2 C=32 NH=2 .* V=300 " "train: EXTRA_ARGS (--mock-vocab-size 300) not passed"
expect "$out" "^process ids \(rank:pid\):( [^ ]+:)?( [0-7]:[0-9]+){8}$" "train: not 8 rank processes"
n=$(grep -Ec "^ \[[^]]*\] iteration +[1-4]/ +4 \| .*lm loss: [0-9]\.[0-9]+E[+-][0-9]+ " "$out")
((n == 4)) || { cat "$out"; fail "train: $n training lines, want 4"; }
expect "$out" "^pretrain_gpt: SUCCESS: job $train trained TP 2 x PP 2 x DP 2 .*iteration 4" "train: no success marker"
echo "ok: train (job $train): layout printed before srun, 8 ranks, 4 training lines, SUCCESS"

# resume: automatic --load from SAVE, continues at iteration 5.
out="$tmp/resume.out"
reject "$out" "^pretrain_gpt: FAILED" "resume: the job failed"
expect "$out" "^pretrain_gpt: resuming from $tmp/ckpt at iteration 4$" "resume: checkpoint not found"
expect "$out" "^ loaded checkpoint .*iter_0000004" "resume: megac did not load the checkpoint"
reject "$out" "^ \[[^]]*\] iteration +[1-4]/" "resume: trained iterations 1-4 again"
n=$(grep -Ec "^ \[[^]]*\] iteration +[56]/ +6 \| .*lm loss: " "$out")
((n == 2)) || { cat "$out"; fail "resume: $n training lines, want 2"; }
expect "$out" "^pretrain_gpt: SUCCESS: .*iteration 6 " "resume: no success marker"
n=$(grep -c '^{"iteration"' "$tmp/ckpt/train_log.jsonl" 2>/dev/null)
((n == 6)) || fail "train + resume: $n records in $tmp/ckpt/train_log.jsonl, want 6 (appended)"
expect "$tmp/ckpt/train_log.jsonl" '^\{"event":"run_start","start_iteration":4,"resumed":1,' "resume: no run_start record"
echo "ok: resume: --load found automatically, iterations 5-6, SUCCESS, one log of 6 iterations"

# bad: rejected before srun, exit 2.
out="$tmp/bad.out"
expect "$out" "FAILED: world size 6 \(SLURM_NTASKS\) is not divisible by TP 2 x PP 2 = 4; not launching" \
  "bad: no rejection message"
reject "$out" "pretrain_gpt: command:|process ids|SUCCESS" "bad: the script went on to srun"
state=$(scontrol show job "$bad" 2>/dev/null | grep -o "ExitCode=[0-9:]*" | head -1)
[[ -z "$state" || "$state" == ExitCode=2:0 ]] || fail "bad: $state, want ExitCode=2:0"
echo "ok: bad: 6 ranks at TP 2 x PP 2 rejected before srun (${state:-exit code no longer shown})"

# gpu: --device cuda, one GPU per rank.
out="$tmp/gpu.out"
for r in 0 1 2 3 4 5 6 7; do
  expect "$out" "^fake rank $r local $r CUDA_VISIBLE_DEVICES=$((7 - r)) train .*--device cuda" \
    "gpu: rank $r does not see GPU $((7 - r)) alone"
done
expect "$out" "^pretrain_gpt: SUCCESS" "gpu: no success marker"
echo "ok: gpu: srun --mpi=pmi2 ... megac train --device cuda, rank r sees entry r of CUDA_VISIBLE_DEVICES"

# stop: SIGUSR1 to the ranks -> checkpoint, exit 0, STOPPED, requeue, resume, SUCCESS.
# (20 ms per iteration: 60 tiny iterations otherwise end, on a fast box, before the signal)
stop=$(submit stop "${tiny[@]}" SAVE="$tmp/ckpt-stop" SAVE_INTERVAL=1000 TRAIN_ITERS=60 MEGAC_TEST_SLOW_ITER_MS=20 -- \
       "${one_node[@]}" --ntasks-per-node=8) || fail "sbatch (stop) failed"
out="$tmp/stop.out"
for _ in $(seq 600); do grep -q "^ \[[^]]*\] iteration *3/" "$out" 2>/dev/null && break; sleep 0.1; done
grep -q "^ \[[^]]*\] iteration *3/" "$out" || { cat "$out"; fail "stop: never reached iteration 3"; }
scancel -s USR1 "$stop"
for _ in $(seq 300); do grep -q "^pretrain_gpt: STOPPED" "$out" && break; sleep 0.1; done
# Slurm holds a requeued job for about 2 minutes (BeginTime): start it now, then wait for
# its end marker (at most 40 s).
for i in $(seq 400); do
  grep -Eq "^pretrain_gpt: (SUCCESS|FAILED)" "$out" && break
  ((i % 10 == 0)) && scontrol update JobId="$stop" StartTime=now >/dev/null 2>&1
  sleep 0.1
done
grep -Eq "^pretrain_gpt: (SUCCESS|FAILED)" "$out" || { squeue; cat "$out"; fail "stop: the requeued job did not finish"; }
line=$(grep -m1 "^megac train: stopped at iteration" "$out")
[[ "$line" =~ ^megac\ train:\ stopped\ at\ iteration\ ([0-9]+)\ of\ 60\ \(SIGUSR1\ received\)\;\ checkpoint\ saved ]] \
  || { cat "$out"; fail "stop: no stop line for SIGUSR1: '$line'"; }
at=${BASH_REMATCH[1]}
expect "$out" "^pretrain_gpt: STOPPED: job $stop stopped cleanly .* at iteration $at of 60 .*requeueing it" "stop: no STOPPED marker"
expect "$out" "^pretrain_gpt: resuming from $tmp/ckpt-stop at iteration $at$" "stop: the requeued job did not resume"
expect "$out" "^pretrain_gpt: SUCCESS: job $stop .*iteration 60 " "stop: the requeued job did not succeed"
reject "$out" "^pretrain_gpt: FAILED" "stop: a FAILED marker"
n=$(grep -c '^{"iteration"' "$tmp/ckpt-stop/train_log.jsonl" 2>/dev/null)
((n == 60)) || fail "stop: $n records in the log, want 60"
echo "ok: stop: SIGUSR1 -> checkpoint at iteration $at, STOPPED, requeued, resumed, SUCCESS at 60"
echo "ok: all Slurm checks in $(elapsed)"
