#!/usr/bin/env python3
"""An SSH worker behind a link with latency (scripts/test-hosts.sh; needs root): command to first
output read, and wall time per one-result trial, when every byte between the driver and the
host's sshd is held back `--delay-ms` each way (a TCP relay on this machine; the kernel's netem
is not available everywhere). The figures the loopback benchmark (bench.py --only ssh) cannot
show: what each round trip of the driver's per-trial protocol costs on a real network.

    bench/ssh_latency.py [--tune BIN] [--baseline-tune OLD_BIN] [--delay-ms 10] [--repeat 3]
                         [--trials 20] [--syncer none|rsync]

    bench/ssh_latency.py --step-trials 8 [--steps 40] [...]   step mode (below)

Each run: `--trials` trials, one at a time, each printing one result and exiting; with
`--syncer rsync` (the default syncer; `none` here by default) each trial's dir is brought to the
head when it ends, as a user's would be. The wall time per trial is the run's divided by the
trials (the connection's set-up included); "each trial after the first" is the time from one
trial's end to the next one's, set-up and the workdir's copy left out. The builds
run alternately, `--repeat` times each, in the same invocation; figures are medians of the runs'
medians (the driver's own "ssh timings" line), with the runs' range.

With `--step-trials C`: C step-mode trials at once on the host (`cpus: C`), each a Trainable
that the driver steps `--steps` times, one command line to its stdin per step; the figure is
steps per second, each trial's from its first result to its last (on the trial's own clock),
summed over the trials: each command's trip to the host is what differs between builds."""
import argparse
import asyncio
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "test-hosts.sh")


def start_relay(target_host, target_port, delay_s):
    """A TCP relay on 127.0.0.1 (its port returned) to target, each chunk passed on delay_s after
    it came, in order, both ways: a link with 2 * delay_s of round-trip time."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    port = []

    async def pipe(reader, writer):
        queue = asyncio.Queue()

        async def pass_on():
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:
                    writer.close()
                    return
                writer.write(data)
                await writer.drain()

        task = asyncio.ensure_future(pass_on())
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((loop.time() + delay_s, data or None))
                if not data:
                    break
            await task
        except (ConnectionError, OSError):
            task.cancel()

    async def client(reader, writer):
        try:
            up_r, up_w = await asyncio.open_connection(target_host, target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer), return_exceptions=True)

    async def serve():
        server = await asyncio.start_server(client, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True).start()
    ready.wait(10)
    return port[0]


def workdir_with(tmp, name, text):
    """The bench's workdir with file `name` holding `text`: its path. (A workdir of its own: the
    bench's dir holds the worker's storage, which a copy of the workdir to that worker would copy
    into itself.)"""
    work = os.path.join(tmp, "work")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, name), "w") as f:
        f.write(text)
    return work, os.path.join(work, name)


def one_run(tune, tmp, hosts, port, trials, name, syncer):
    h = hosts["hosts"][0]
    work, one = workdir_with(tmp, "one_result.sh", "echo '{\"x\": 1}'\n")
    yaml = os.path.join(tmp, name + ".yaml")
    with open(yaml, "w") as f:
        f.write(textwrap.dedent(f"""
            name: {name}
            trial: {{command: [sh, {json.dumps(one)}], workdir: {json.dumps(work)}}}
            param_space: {{i: {{grid_search: {list(range(trials))}}}}}
            sync_config: {{syncer: {syncer}}}
            hosts:
              - ssh: {{host: 127.0.0.1, port: {port}, user: {hosts["user"]},
                       identity_file: {hosts["identity_file"]},
                       known_hosts_file: {hosts["known_hosts"]}, storage_path: {h["storage_path"]},
                       cpus: 1}}
            """))
    storage = os.path.join(tmp, "runs")
    t0 = time.monotonic()
    subprocess.run([tune, "run", yaml, "--quiet", "--storage-path", storage], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    wall = time.monotonic() - t0
    with open(os.path.join(storage, name, "tune.log")) as f:
        lines = f.readlines()
    line = [l for l in lines if "ssh timings:" in l][-1]
    # Each trial after the first: from one trial's end to the next one's (the connection's
    # set-up, and the copy of the workdir before the first trial, left out).
    ends = [datetime.datetime.strptime(l[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            for l in lines if re.search(r"trial \S+ TERMINATED", l)]
    first = float(re.search(r"first output read ([\d.]+) ms", line).group(1))
    looks = int(re.search(r"(\d+) looks at trials' output", line).group(1))
    rsyncless = re.search(r"(\d+) of them last syncs without rsync", line)
    return {"first_ms": first, "trial_ms": wall * 1000 / trials,
            "next_ms": (ends[-1] - ends[0]) * 1000 / max(1, len(ends) - 1), "looks": looks,
            "rsyncless": int(rsyncless.group(1)) if rsyncless else 0}


STEP_TRIAL = """
import tune_trial

class Quick(tune_trial.Trainable):
    def setup(self, config):
        self.i = 0

    def step(self):
        self.i += 1
        return {"i": self.i}

raise SystemExit(tune_trial.run_trainable(Quick))
"""


def step_run(tune, tmp, hosts, port, trials, steps, name):
    h = hosts["hosts"][0]
    work, script = workdir_with(tmp, "quick_step.py", STEP_TRIAL)
    yaml = os.path.join(tmp, name + ".yaml")
    with open(yaml, "w") as f:
        f.write(textwrap.dedent(f"""
            name: {name}
            trial: {{command: [{json.dumps(sys.executable)}, {json.dumps(script)}], mode: step,
                     workdir: {json.dumps(work)}}}
            param_space: {{i: {{grid_search: {list(range(trials))}}}}}
            stop: {{training_iteration: {steps}}}
            sync_config: {{syncer: none}}
            hosts:
              - ssh: {{host: 127.0.0.1, port: {port}, user: {hosts["user"]},
                       identity_file: {hosts["identity_file"]},
                       known_hosts_file: {hosts["known_hosts"]}, storage_path: {h["storage_path"]},
                       cpus: {trials}}}
            """))
    storage = os.path.join(tmp, "runs")
    subprocess.run([tune, "run", yaml, "--quiet", "--storage-path", storage], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    # Each trial's rate from its first result to its last (time_total_s, the trial's own
    # clock: the supervisor notes when each line arrived), summed over the trials, which ran at
    # once.
    rate = 0.0
    exp = os.path.join(storage, name)
    for d in os.listdir(exp):
        path = os.path.join(exp, d, "result.json")
        if os.path.exists(path):
            with open(path) as f:
                rows = [json.loads(l) for l in f if l.strip()]
            if len(rows) != steps:
                raise RuntimeError("%s: %d results, not %d" % (path, len(rows), steps))
            span = rows[-1]["time_total_s"] - rows[0]["time_total_s"]
            rate += (steps - 1) / span if span > 0 else 0.0
    return {"steps_per_s": rate}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tune", default=os.path.join(ROOT, "build", "tune"))
    ap.add_argument("--baseline-tune")
    ap.add_argument("--delay-ms", type=float, default=10.0, help="each way")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--syncer", choices=("none", "rsync"), default="none")
    ap.add_argument("--step-trials", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tune-ssh-latency-")
    hosts_dir = os.path.join(tmp, "hosts")
    subprocess.run([SCRIPT, "up", hosts_dir, "1"], check=True, stdout=subprocess.DEVNULL)
    try:
        with open(os.path.join(hosts_dir, "hosts.json")) as f:
            hosts = json.load(f)
        h = hosts["hosts"][0]
        port = start_relay(h["host"], h["port"], a.delay_ms / 1000)
        builds = [("this build", a.tune)] + ([("baseline", a.baseline_tune)]
                                             if a.baseline_tune else [])
        runs = {label: [] for label, _ in builds}
        if a.step_trials:
            return step_bench(a, builds, runs, tmp, hosts, port)
        for k in range(a.repeat):
            for label, binary in builds:
                runs[label].append(one_run(binary, tmp, hosts, port, a.trials,
                                           "lat%d%s" % (k, "b" if label == "baseline" else ""),
                                           a.syncer))
        print("link: %.1f ms each way (round trip %.1f ms), %d one-result trials one at a time, "
              "syncer %s, %d runs of each build, alternated" % (
                  a.delay_ms, 2 * a.delay_ms, a.trials, a.syncer, a.repeat))
        for key, what in (("first_ms", "command to first output read, ms"),
                          ("trial_ms", "wall time per trial, ms"),
                          ("next_ms", "each trial after the first, ms"),
                          ("looks", "looks at output over SFTP, per run"),
                          ("rsyncless", "last syncs without rsync, per run")):
            cells = []
            for label, _ in builds:
                v = [r[key] for r in runs[label]]
                cells.append("%s %.1f (%.1f-%.1f)" % (label, statistics.median(v), min(v), max(v)))
            if len(builds) == 2:
                base = statistics.median(r[key] for r in runs[builds[1][0]])
                ratio = statistics.median(r[key] for r in runs[builds[0][0]]) / base if base else 0
                cells.append("ratio %.2fx" % ratio if base else "ratio -")
            print("%-38s %s" % (what, "; ".join(cells)))
    finally:
        subprocess.run([SCRIPT, "down", hosts_dir], stdout=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


def step_bench(a, builds, runs, tmp, hosts, port):
    for k in range(a.repeat):
        for label, binary in builds:
            runs[label].append(step_run(binary, tmp, hosts, port, a.step_trials, a.steps,
                                        "step%d%s" % (k, "b" if label == "baseline" else "")))
    print("link: %.1f ms each way (round trip %.1f ms), %d step-mode trials at once on one host, "
          "%d steps each, %d runs of each build, alternated" % (
              a.delay_ms, 2 * a.delay_ms, a.step_trials, a.steps, a.repeat))
    cells = []
    for label, _ in builds:
        v = [r["steps_per_s"] for r in runs[label]]
        cells.append("%s %.1f (%.1f-%.1f)" % (label, statistics.median(v), min(v), max(v)))
    if len(builds) == 2:
        base = statistics.median(r["steps_per_s"] for r in runs[builds[1][0]])
        mine = statistics.median(r["steps_per_s"] for r in runs[builds[0][0]])
        cells.append("ratio %.2fx" % (mine / base) if base else "ratio -")
    print("%-38s %s" % ("steps per second, all trials", "; ".join(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
