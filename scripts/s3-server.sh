#!/usr/bin/env bash
# A real S3-compatible endpoint for the tests: s3rver (npm, pinned) on 127.0.0.1, storing on
# local disk under STATE_DIR, with one bucket "tune-bucket".
#   scripts/s3-server.sh start STATE_DIR   prints the endpoint URL (http://127.0.0.1:PORT)
#   scripts/s3-server.sh stop STATE_DIR    stops the server it started there (by pid)
# s3rver is installed once into $TUNE_TOOLS_DIR (default ~/.cache/tune/test-tools).
set -euo pipefail
cmd=${1:?usage: s3-server.sh start|stop STATE_DIR}
dir=${2:?usage: s3-server.sh start|stop STATE_DIR}
tools=${TUNE_TOOLS_DIR:-$HOME/.cache/tune/test-tools}
version=3.7.1

case "$cmd" in
start)
  if [ ! -x "$tools/node_modules/.bin/s3rver" ]; then
    command -v npm >/dev/null || { echo "s3-server: npm is not installed" >&2; exit 1; }
    mkdir -p "$tools"
    echo "s3-server: installing s3rver@$version into $tools" >&2
    npm install --prefix "$tools" --no-audit --no-fund --loglevel=error "s3rver@$version" >&2
  fi
  mkdir -p "$dir/data"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$tools/node_modules/.bin/s3rver" -d "$dir/data" -a 127.0.0.1 -p "$port" --silent \
    --configure-bucket tune-bucket >"$dir/s3rver.log" 2>&1 &
  echo $! >"$dir/s3rver.pid"
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "http://127.0.0.1:$port"
      exit 0
    fi
    kill -0 "$(cat "$dir/s3rver.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "s3-server: s3rver did not start (see $dir/s3rver.log)" >&2
  kill "$(cat "$dir/s3rver.pid")" 2>/dev/null || true
  exit 1
  ;;
stop)
  if [ -f "$dir/s3rver.pid" ]; then
    kill "$(cat "$dir/s3rver.pid")" 2>/dev/null || true
    rm -f "$dir/s3rver.pid"
  fi
  ;;
*)
  echo "usage: s3-server.sh start|stop STATE_DIR" >&2
  exit 2
  ;;
esac
