#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures and builds tune in build/.
# Idempotent and quick when everything is already there.
#   scripts/setup.sh            build dependencies + build
#   scripts/setup.sh --test     also what the test suite needs (Optuna for tune_optuna, help2man
#                               for the man page, dpkg-dev and lintian for the .deb, zsh)
#   scripts/setup.sh --bench    also what bench/peers.py and bench/schedulers compare against
#                               (GNU parallel, Optuna; scikit-learn through --test)
#   scripts/setup.sh --fuzz     also clang-16 and libFuzzer (scripts/fuzz.sh)
#   scripts/setup.sh --examples also python3-sklearn, for configs/asha_digits.yaml and
#                               configs/hyperband_digits.yaml (the tests need it too)
# TUNE_WITH_TORCH=1 also installs Debian's python3-torch for configs/torch_example.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
want_bench=0
want_fuzz=0
[ "${1:-}" = "--test" ] && want_tests=1
[ "${1:-}" = "--bench" ] && want_tests=1 && want_bench=1
[ "${1:-}" = "--fuzz" ] && want_tests=1 && want_fuzz=1
want_examples=0
[ "${1:-}" = "--examples" ] && want_examples=1

packages=(cmake g++ make ccache pkg-config python3 rsync
          libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libssh-dev catch2)
if [ "$want_tests" = 1 ]; then
  # awscli talks to the S3-compatible server (s3rver, from npm) that the upload tests start.
  packages+=(openssh-client openssh-server iproute2 procps awscli)
  want_examples=1  # the scheduler tests run the digits example
  # tune report is loaded in a real headless browser (integration.report); TensorBoard event
  # files are decoded with protobuf's own Python library (integration.tensorboard).
  packages+=(chromium python3-protobuf)
  # A real one-machine Slurm cluster for integration.slurm (scripts/test-slurm.sh).
  packages+=(slurm-wlm munge)
  # tune_optuna, the shipped external searcher, runs Optuna's samplers (integration.extsearch).
  packages+=(python3-optuna)
  # The man page (help2man, rendered by man-db's man), the .deb (cpack runs dpkg-shlibdeps, in
  # dpkg-dev, checked by lintian) and the zsh completion (integration.install,
  # integration.completion).
  packages+=(help2man man-db dpkg-dev lintian zsh)
  command -v npm >/dev/null || packages+=(nodejs npm)
fi
if [ "$want_examples" = 1 ]; then
  packages+=(python3-sklearn)  # scikit-learn's digits: a real training problem, no download
fi
if [ "$want_bench" = 1 ]; then
  packages+=(parallel python3-optuna)  # the peers bench/peers.py compares against
fi
if [ "$want_fuzz" = 1 ]; then
  packages+=(clang-16 libclang-rt-16-dev)  # libFuzzer ships in libclang-rt-16-dev
fi
if [ "${TUNE_WITH_TORCH:-0}" = 1 ]; then
  packages+=(python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset default >/dev/null
cmake --build build -j"$jobs"
echo "setup: built build/tune"
