#!/usr/bin/env bash
# Runs `python3 ARGS...` (the integration tests) as an unprivileged user, as users run tune:
# the local suites, and the SSH tests without root (test-hosts.sh then starts sshd's on
# 127.0.0.1 ports as that user, "loopback" mode). As root: as the user tune-test (made if missing), with the system's
# /usr/bin/python3 (root's own Python may live where that user cannot read). As anyone else:
# as that user. Exits 77 (ctest: skipped, with the reason) if root cannot make the user.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then exec python3 "$@"; fi
user=tune-test
if ! id "$user" >/dev/null 2>&1; then
  useradd -m -s /bin/sh "$user" 2>/dev/null || {
    echo "as_user.sh: cannot create the user $user: skipped" >&2
    exit 77
  }
fi
home=$(getent passwd "$user" | cut -d: -f6)
for d in "$TUNE_BUILD_DIR" "$TUNE_SOURCE_DIR"; do  # what the user must read
  runuser -u "$user" -- test -r "$d/CMakeLists.txt" -o -r "$d/CMakeCache.txt" || {
    echo "as_user.sh: $user cannot read $d: skipped" >&2
    exit 77
  }
done
exec runuser -u "$user" -- env HOME="$home" USER="$user" LOGNAME="$user" \
  TUNE_BIN="$TUNE_BIN" TUNE_BUILD_DIR="$TUNE_BUILD_DIR" TUNE_SOURCE_DIR="$TUNE_SOURCE_DIR" \
  PATH=/usr/sbin:/usr/bin:/sbin:/bin /usr/bin/python3 "$@"
