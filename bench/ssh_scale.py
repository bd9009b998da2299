#!/usr/bin/env python3
"""Many SSH hosts at once: HOSTS worker hosts x SLOTS slots, TRIALS short trials.

    python3 bench/ssh_scale.py [--tune BIN] [--hosts 100] [--slots 8] [--trials 2000]
                               [--results 5] [--sleep S] [--baseline-tune OLD/tune]

The hosts are 127.0.0.1 ... 127.0.0.HOSTS on one free port, served by OpenSSH sshd's started
here (one per 16 addresses, sshd's limit): each address is a host of its own to tune (its own
connection, OpenSSH master, I/O thread, storage dir, known_hosts entry). What the hosts do not model: latency (loopback), and separate disks or CPUs (the trials of
all hosts share this machine's). Each trial prints RESULTS JSON lines and exits. Remote
commands run with an empty HOME (sshd's SetEnv) unless --login-rc: bash sources ~/.bashrc for
every command sshd runs, rsync's included, and a heavy one would be measured instead of tune.

Printed: wall time, the driver's own CPU time and peak RSS (as tune.log reports them), results per second at the head,
the state writes' mean and longest cost and the loop's longest stall (from tune.log), and the
same experiment on the local host with the same total concurrency as the baseline of the same
run. Every trial must end TERMINATED with RESULTS rows; the script fails otherwise.
"""
import argparse
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_sshd(d, hosts, login_rc=False):
    """One port; sshd listens on at most 16 addresses, so one sshd per 16 hosts."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d + "/hostkey"], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d + "/userkey"], check=True)
    shutil.copy(d + "/userkey.pub", d + "/authorized_keys")
    port = free_port()
    os.makedirs("/run/sshd", exist_ok=True)
    for n, first in enumerate(range(0, hosts, 16)):
        listen = "".join("ListenAddress 127.0.0.%d\n" % (k + 1)
                         for k in range(first, min(hosts, first + 16)))
        conf = "%s/sshd_config.%d" % (d, n)
        with open(conf, "w") as f:
            f.write(f"""Port {port}
{listen}HostKey {d}/hostkey
AuthorizedKeysFile {d}/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PidFile {d}/sshd.{n}.pid
{"" if login_rc else "SetEnv HOME=" + d + "/home"}
Subsystem sftp internal-sftp
MaxSessions 1000
MaxStartups 1000
""")
        subprocess.run(["/usr/sbin/sshd", "-f", conf, "-E", "%s/sshd.%d.log" % (d, n)], check=True)
        for _ in range(100):
            if os.path.exists("%s/sshd.%d.pid" % (d, n)):
                break
            time.sleep(0.05)
        else:
            sys.exit("sshd did not start (see %s/sshd.%d.log)" % (d, n))
    return port


def wait4(argv, env=None):
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("%s failed: %s" % (" ".join(argv[:3]), err[-2000:]))
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0


def from_log(path):
    text = open(path).read()
    out = {}
    m = re.findall(r"state writes: (\d+), mean ([\d.]+) ms, longest ([\d.]+) ms", text)
    if m:
        out["state_writes"], out["state_write_mean_ms"], out["state_write_max_ms"] = (
            int(m[-1][0]), float(m[-1][1]), float(m[-1][2]))
    m = re.findall(r"driver CPU: ([\d.]+) s, peak RSS (\d+) MB", text)
    if m:
        out["cpu_s"], out["rss_mb"] = float(m[-1][0]), float(m[-1][1])
    m = re.findall(r"longest loop stall: (\d+) ms", text)
    if m:
        out["longest_stall_ms"] = int(m[-1])
    return out


def check(storage, name, trials, results):
    with open(os.path.join(storage, name, "experiment_state.json")) as f:
        st = json.load(f)
    bad = [t for t in st["trials"] if t["status"] != "TERMINATED"]
    if len(st["trials"]) != trials or bad:
        sys.exit("%s: %d trials, %d not TERMINATED (e.g. %s)" % (
            name, len(st["trials"]), len(bad), bad[:1]))
    short = 0
    for t in st["trials"]:
        p = os.path.join(storage, name, t["trial_name"], "result.json")
        with open(p) as f:
            if sum(1 for _ in f) != results:
                short += 1
    if short:
        sys.exit("%s: %d trials lack some of their %d result rows at the head" % (name, short, results))


def run(tune, d, name, hosts_yaml, trials, results, concurrency, sleep=0.0):
    # Each run's files in a dir of their own: the experiment's dir is its trials' workdir,
    # which trial.sync_workdir copies to every host, and the scratch dir holds the storage of
    # the runs before (a second run once copied the first's 2,000 trial dirs to 100 hosts).
    d = os.path.join(d, "wd-" + name)
    os.makedirs(d, exist_ok=True)
    trial = os.path.join(d, "trial.sh")
    with open(trial, "w") as f:
        f.write('i=1; while [ $i -le %d ]; do echo "{\\"loss\\": $i}"; i=$((i+1)); %sdone\n'
                % (results, "sleep %g; " % sleep if sleep > 0 else ""))
    yaml = os.path.join(d, name + ".yaml")
    with open(yaml, "w") as f:
        f.write("name: %s\ntrial: {command: [sh, %s]}\n" % (name, json.dumps(trial)) +
                "param_space: {i: {grid_search: [%s]}}\n" % ", ".join(map(str, range(trials))) +
                "max_concurrent_trials: %d\n" % concurrency + hosts_yaml)
    storage = os.path.join(os.path.dirname(d), "storage-" + name)
    wall, _, _ = wait4([tune, "run", yaml, "--quiet", "--storage-path", storage])
    check(storage, name, trials, results)
    # The driver's own CPU and RSS, as it logs them (wait4 would add the helpers it reaped, and
    # for local trials their agent and supervisors).
    r = {"wall_s": wall, "cpu_s": float("nan"), "rss_mb": float("nan"),
         "results_per_s": trials * results / wall, "trials_per_s": trials / wall}
    r.update(from_log(os.path.join(storage, name, "tune.log")))
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "tune"))
    ap.add_argument("--baseline-tune", help="another build of tune, run on the same hosts")
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--results", type=int, default=5)
    ap.add_argument("--sleep", type=float, default=0.0,
                    help="seconds each trial sleeps after each result (quiet trials: what "
                         "watching them costs)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir")
    ap.add_argument("--login-rc", action="store_true",
                    help="remote commands start with this user's own ~/.bashrc (by default the "
                         "hosts get an empty HOME: a heavy rc file, e.g. one running `pyenv init` "
                         "or `conda init`, runs at every ssh command, every rsync included)")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="tune-ssh-scale-")
    os.makedirs(d + "/home")
    port = start_sshd(d, a.hosts, a.login_rc)
    user = os.environ.get("USER") or subprocess.run(["id", "-un"], capture_output=True,
                                                     text=True).stdout.strip()
    try:
        lines = ["hosts:"]
        for k in range(a.hosts):
            lines.append("  - ssh: {host: 127.0.0.%d, port: %d, user: %s, identity_file: %s, "
                         "known_hosts_file: %s, storage_path: %s, cpus: %d}" % (
                             k + 1, port, user, d + "/userkey", d + "/known_hosts",
                             "%s/host%d" % (d, k + 1), a.slots))
        ssh_hosts = "\n".join(lines) + "\n"
        total = a.hosts * a.slots
        rows = []
        binaries = [("tune", a.tune)] + ([("baseline", a.baseline_tune)] if a.baseline_tune else [])
        for label, binary in binaries:
            r = run(binary, d, "ssh_" + label, ssh_hosts, a.trials, a.results, total, a.sleep)
            rows.append(("%s, %d SSH hosts x %d" % (label, a.hosts, a.slots), r))
        local = run(a.tune, d, "local", "hosts:\n  - local: {cpus: %d}\n" % total, a.trials,
                    a.results, total, a.sleep)
        rows.append(("tune, local host, %d slots" % total, local))
        print("%d trials x %d results%s; %d hosts x %d slots (127.0.0.1-%d)" % (
            a.trials, a.results, ", %g s apart" % a.sleep if a.sleep else "", a.hosts, a.slots,
            a.hosts))
        print("| run | wall s | driver CPU s | CPU % of wall | peak RSS MB | results/s | "
              "state writes (mean / longest ms) | longest loop stall ms |")
        print("|---|---|---|---|---|---|---|---|")
        for label, r in rows:
            print("| %s | %.1f | %.1f | %.0f%% | %.0f | %.0f | %s (%.1f / %.1f) | %s |" % (
                label, r["wall_s"], r["cpu_s"], 100 * r["cpu_s"] / r["wall_s"], r["rss_mb"],
                r["results_per_s"], r.get("state_writes", "?"), r.get("state_write_mean_ms", 0),
                r.get("state_write_max_ms", 0), r.get("longest_stall_ms", "?")))
        ssh = rows[0][1]
        print("ratios to the local run of the same build: wall %.2fx, driver CPU %.2fx, RSS %.2fx" % (
            ssh["wall_s"] / local["wall_s"], ssh["cpu_s"] / local["cpu_s"],
            ssh["rss_mb"] / local["rss_mb"]))
        print(json.dumps({"hosts": a.hosts, "slots": a.slots, "trials": a.trials,
                          "results": a.results, "rows": rows}))
    finally:
        for pidfile in glob.glob(d + "/sshd.*.pid"):
            try:
                with open(pidfile) as f:
                    os.kill(int(f.read()), 15)
            except (OSError, ValueError):
                pass
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
        else:
            print("kept", d)


if __name__ == "__main__":
    main()
