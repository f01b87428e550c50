#!/usr/bin/env bash
# scripts/setup.sh: install the Debian 12 packages megac builds and runs with (needs root or
# sudo). Idempotent; takes ~30 s on a fresh machine. The CUDA toolkit and NCCL are not Debian
# packages: when /usr/local/cuda is present the CUDA backend is built too.
set -euo pipefail
pkgs=(gcc g++ pkg-config ninja-build meson python3
      mpich libmpich-dev libhdf5-mpich-dev hdf5-tools libopenblas-dev hwloc-nox
      libpcre2-dev libjson-c-dev
      slurm-wlm munge  # tests/scripts: a one-machine Slurm cluster runs pretrain_gpt.sbatch
      fortunes         # fortunes: the default training corpus (/usr/share/games/fortunes)
      gnuplot-nox      # megac ablate: the sweep's plots (tests/plan)
      xz-utils         # scripts/gpu/pack.sh and its no-GPU test (tests/scripts/test_selfcheck.sh)
      python3-torch python3-venv)  # tests/hf: transformers runs on Debian's torch (~5 min, once)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"
"$(dirname "$0")/../tests/hf/setup_venv.sh"  # transformers + safetensors + tensorboard in a venv (pip); never fails the set-up
