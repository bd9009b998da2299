#!/usr/bin/env bash
# Real worker hosts for the SSH tests: each is an OpenSSH sshd in its own network namespace
# (its own IP on a veth pair) and its own mount namespace, where /srv/tune-hosts is a private
# bind mount of that worker's storage directory: the head reaches a worker's files only through
# ssh/rsync. Without root (no namespaces) it falls back to sshd's on 127.0.0.1 ports with one
# storage directory each, and says so ("mode": "loopback").
#
#   scripts/test-hosts.sh up STATE_DIR N   start N workers; writes STATE_DIR/hosts.json
#   scripts/test-hosts.sh down STATE_DIR   stop them (by pid) and delete what `up` created
#   scripts/test-hosts.sh cut STATE_DIR K  take worker K's link down (netns mode only)
#   scripts/test-hosts.sh heal STATE_DIR K bring it back
#   scripts/test-hosts.sh kill STATE_DIR K kill worker K's sshd and its sessions (trials keep running)
#   scripts/test-hosts.sh start STATE_DIR K start worker K's sshd again (same host key)
#   scripts/test-hosts.sh rekey STATE_DIR K give worker K a new host key (restarts its sshd)
#   scripts/test-hosts.sh slow STATE_DIR K RATE  limit what worker K sends (tc tbf, e.g. 8mbit)
#   scripts/test-hosts.sh fill STATE_DIR K DIR SIZE  worker K sees a SIZE tmpfs at DIR (relative
#                                          to its storage path): a disk that fills up (netns mode)
#   scripts/test-hosts.sh unfill STATE_DIR K DIR   takes that tmpfs away again
#
# hosts.json: {"mode", "user", "identity_file", "known_hosts", "storage_path",
#              "hosts": [{"name", "host", "port", "storage_path"}]}
set -euo pipefail
cmd=${1:?usage: test-hosts.sh up|down|cut|heal|kill|rekey STATE_DIR [N|K]}
D=$(realpath -m "${2:?STATE_DIR}")
MOUNT=/srv/tune-hosts

netns_ok() {
  [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v unshare >/dev/null || return 1
  local probe="tune-probe-$$"
  ip netns add "$probe" 2>/dev/null || return 1
  ip netns del "$probe"
}

start_sshd() {  # K
  local k=$1 w="$D/w$1"
  if [ "$(cat "$D/mode")" = netns ]; then
    local ns; ns=$(cat "$w/netns")
    ip netns exec "$ns" unshare -m -u --propagation private \
      sh -c "hostname worker$k && mount --bind '$w/root' '$MOUNT' && exec /usr/sbin/sshd -f '$w/sshd_config' -E '$w/sshd.log'"
  else
    /usr/sbin/sshd -f "$w/sshd_config" -E "$w/sshd.log"
  fi
  for _ in $(seq 50); do [ -s "$w/sshd.pid" ] && return 0; sleep 0.1; done
  echo "test-hosts: sshd of worker $k did not start (see $w/sshd.log)" >&2
  return 1
}

descendants() {  # PID: its children, theirs, ... (none for an empty PID)
  [ -n "${1:-}" ] || return 0
  local c
  for c in $(pgrep -P "$1" || true); do echo "$c"; descendants "$c"; done
}

sshd_descendants() {  # PID: those of its descendants that are sshd's (sessions, not their processes)
  local pid
  for pid in $(descendants "${1:-}"); do
    case "$(cat "/proc/$pid/comm" 2>/dev/null)" in sshd | sshd-session) echo "$pid" ;; esac
  done
}

case "$cmd" in
up)
  n=${3:?N}
  command -v /usr/sbin/sshd >/dev/null || { echo "test-hosts: openssh-server is not installed" >&2; exit 1; }
  mkdir -p "$D"
  mkdir -p /run/sshd 2>/dev/null || true  # sshd wants it; as a user it must exist already
  # Every command on a worker runs through the user's shell, which may start pyenv; a
  # `pyenv rehash` killed mid-way (the tests kill hosts' sessions) leaves its lock behind and
  # every later shell then waits on it: each ssh command hangs. A lock older than 5 minutes
  # belongs to no live rehash.
  shim_lock="${PYENV_ROOT:-$HOME/.pyenv}/shims/.pyenv-shim"
  if [ -n "$(find "$shim_lock" -mmin +5 2>/dev/null)" ]; then
    echo "test-hosts: removing a stale pyenv rehash lock ($shim_lock)" >&2
    rm -f "$shim_lock"
  fi
  if netns_ok; then mode=netns; else mode=loopback; fi
  echo "$mode" >"$D/mode"
  # One /16 of 10.0.0.0/8 per run. Parallel runs, and namespaces a killed run left behind (a
  # container's pids repeat from run to run), must not collide: take the first free one from a
  # random start, and claim it by creating worker 1's namespace (which fails if it exists).
  net=""
  if [ "$mode" = netns ]; then
    start=$(( ($$ + RANDOM) % 150 ))
    for i in $(seq 0 149); do
      c=$(( 100 + (start + i) % 150 ))
      ip netns list 2>/dev/null | grep -q "^tune-$c-" && continue
      ip link show "tn${c}h1" >/dev/null 2>&1 && continue
      ip -4 addr show 2>/dev/null | grep -q " 10\.$c\." && continue
      if ip netns add "tune-$c-w1" 2>/dev/null; then
        net=$c; mkdir -p "$D/w1"; echo "tune-$c-w1" >"$D/w1/netns"; break  # `down` removes it
      fi
    done
    [ -n "$net" ] || { echo "test-hosts: no free 10.x.0.0/16 for the worker namespaces" >&2; exit 1; }
  else
    net=$(( 100 + $$ % 150 ))
  fi
  echo "$net" >"$D/net"
  ssh-keygen -q -t ed25519 -N '' -f "$D/userkey" -C tune-test
  cp "$D/userkey.pub" "$D/authorized_keys"
  : >"$D/known_hosts"
  [ "$mode" = netns ] && mkdir -p "$MOUNT"
  hosts=""
  for k in $(seq "$n"); do
    w="$D/w$k"
    mkdir -p "$w/root"
    ssh-keygen -q -t ed25519 -N '' -f "$w/hostkey" -C "worker$k"
    if [ "$mode" = netns ]; then
      ns="tune-$net-w$k"; hv="tn${net}h$k"; wv="tn${net}w$k"
      echo "$ns" >"$w/netns"; echo "$hv" >"$w/veth"
      [ "$k" = 1 ] || ip netns add "$ns"  # worker 1's was made when the net was claimed
      ip link add "$hv" type veth peer name "$wv"
      ip link set "$wv" netns "$ns"
      ip addr add "10.$net.$k.1/24" dev "$hv"
      ip link set "$hv" up
      ip netns exec "$ns" ip addr add "10.$net.$k.2/24" dev "$wv"
      ip netns exec "$ns" ip link set "$wv" up
      ip netns exec "$ns" ip link set lo up
      addr="10.$net.$k.2"; port=22; storage="$MOUNT"
    else
      addr=127.0.0.1
      port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      storage="$w/root"
    fi
    cat >"$w/sshd_config" <<CONF
Port $port
ListenAddress $addr
HostKey $w/hostkey
AuthorizedKeysFile $D/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PidFile $w/sshd.pid
Subsystem sftp internal-sftp
MaxSessions 100
MaxStartups 100
CONF
    start_sshd "$k"
    hosts="$hosts${hosts:+, }{\"name\": \"worker$k\", \"host\": \"$addr\", \"port\": $port, \"storage_path\": \"$storage\"}"
  done
  cat >"$D/hosts.json" <<JSON
{"mode": "$mode", "user": "$(id -un)", "identity_file": "$D/userkey",
 "known_hosts": "$D/known_hosts", "hosts": [$hosts]}
JSON
  echo "$D/hosts.json"
  ;;
down)
  [ -d "$D" ] || exit 0
  for w in "$D"/w*; do
    [ -d "$w" ] || continue
    if [ -f "$w/sshd.pid" ]; then kill "$(cat "$w/sshd.pid")" 2>/dev/null || true; fi
    if [ -f "$w/netns" ]; then
      ns=$(cat "$w/netns")
      # Trials still running on the worker live in its namespace: stop them with it.
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  ;;
cut|heal)
  w="$D/w${3:?K}"
  [ -f "$w/veth" ] || { echo "test-hosts: no link to cut in loopback mode" >&2; exit 3; }
  ip link set "$(cat "$w/veth")" "$([ "$cmd" = cut ] && echo down || echo up)"
  ;;
kill)
  w="$D/w${3:?K}"
  master=$(cat "$w/sshd.pid" 2>/dev/null || true)
  # The per-connection sshd's too, so that every session drops: in loopback mode they are the
  # listener's children. Only sshd's, as when sshd dies: the sessions' own processes (shells,
  # tune-agent and the supervisors it started) see their channel close and go their ways.
  conns=$(sshd_descendants "$master")
  [ -n "$master" ] && kill -9 "$master" 2>/dev/null || true
  for pid in $conns $(cat "$w/conns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  rm -f "$w/sshd.pid" "$w/conns"
  if [ -f "$w/netns" ]; then
    for pid in $(ip netns pids "$(cat "$w/netns")"); do
      case "$(cat "/proc/$pid/comm" 2>/dev/null)" in sshd | sshd-session) kill -9 "$pid" 2>/dev/null || true ;; esac
    done
  fi
  ;;
start)
  start_sshd "${3:?K}"
  ;;
slow)
  w="$D/w${3:?K}"
  [ -f "$w/netns" ] || { echo "test-hosts: cannot shape a link in loopback mode" >&2; exit 3; }
  ns=$(cat "$w/netns"); wv="tn$(cat "$D/net")w${3}"
  ip netns exec "$ns" tc qdisc replace dev "$wv" root tbf rate "${4:?RATE}" burst 32kbit latency 2s
  ;;
fill)
  k=${3:?K}; w="$D/w$k"; dir=${4:?DIR}; size=${5:?SIZE}
  [ "$(cat "$D/mode")" = netns ] || { echo "test-hosts: fill needs netns mode" >&2; exit 1; }
  case "$dir" in /*|*..*) echo "test-hosts: DIR must be relative, without .." >&2; exit 1 ;; esac
  mkdir -p "$w/root/$dir"
  nsenter -t "$(cat "$w/sshd.pid")" -m -- mount -t tmpfs -o "size=$size,mode=0777" tmpfs "$MOUNT/$dir"
  ;;
unfill)
  k=${3:?K}; w="$D/w$k"; dir=${4:?DIR}
  case "$dir" in /*|*..*) echo "test-hosts: DIR must be relative, without .." >&2; exit 1 ;; esac
  nsenter -t "$(cat "$w/sshd.pid")" -m -- umount -l "$MOUNT/$dir"
  ;;
rekey)
  k=${3:?K}; w="$D/w$k"
  # (loopback mode: the sessions outlive their listener; `kill` ends them later)
  sshd_descendants "$(cat "$w/sshd.pid" 2>/dev/null)" >>"$w/conns"
  kill "$(cat "$w/sshd.pid")" 2>/dev/null || true
  rm -f "$w/sshd.pid" "$w/hostkey" "$w/hostkey.pub"
  sleep 0.2
  ssh-keygen -q -t ed25519 -N '' -f "$w/hostkey" -C "worker$k-new"
  start_sshd "$k"
  ;;
*)
  echo "usage: test-hosts.sh up|down|cut|heal|kill|start|rekey|slow|fill|unfill STATE_DIR [N|K] [RATE|DIR SIZE]" >&2
  exit 2
  ;;
esac
