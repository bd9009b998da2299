"""Shared pieces of the integration tests: each test gets its own scratch directory, runs the
built `tune` binary on real trial scripts, and checks the files it leaves on disk."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

TUNE = os.environ.get("TUNE_BIN") or os.path.abspath("../../build/tune")
BUILD = os.environ.get("TUNE_BUILD_DIR") or os.path.dirname(TUNE)
SOURCE = os.environ.get("TUNE_SOURCE_DIR") or os.path.abspath("../..")
PY = sys.executable


class TuneTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tune-it-")
        self.storage = os.path.join(self.dir, "results")
        self.env = dict(os.environ)
        self.env["TUNE_STORAGE_PATH"] = self.storage
        # A private host-wide resource ledger: tests running side by side do not share CPUs.
        self.env["XDG_RUNTIME_DIR"] = os.path.join(self.dir, "run")
        os.makedirs(self.env["XDG_RUNTIME_DIR"], mode=0o700)
        self.env.pop("NO_COLOR", None)

    def tearDown(self):
        # Supervisors finish recording an exit within moments of their trial's end.
        deadline = time.time() + 5
        while self.processes_under(self.dir) and time.time() < deadline:
            time.sleep(0.05)
        leftovers = self.processes_under(self.dir)
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not os.environ.get("TUNE_TEST_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
        self.assertEqual(leftovers, [], "processes of the experiment were left running")

    @staticmethod
    def processes_under(path):
        """Pids of live (non-zombie) processes whose command line or cwd mentions `path`."""
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().decode(errors="replace")
                with open("/proc/%s/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                cwd = os.readlink("/proc/%s/cwd" % pid)
            except OSError:
                continue
            if state != "Z" and (path in cmd or cwd.startswith(path)):
                found.append(int(pid))
        return found

    def write(self, name, text, mode=0o644):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text).lstrip())
        os.chmod(path, mode)
        return path

    def tune(self, *args, timeout=120, check=None, env=None):
        proc = subprocess.Popen([TUNE, *args], cwd=self.dir, env=env or self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            report = self.hang_report()  # before the kill, while the hang is still there
            proc.kill()
            out, err = proc.communicate()
            self.fail("tune %s ran past its %s s timeout\nstderr:\n%s\n%s"
                      % (" ".join(args), timeout, err[-4000:], report))
        p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check is not None and p.returncode != check:
            self.fail("tune %s exited %d, expected %d\nstdout:\n%s\nstderr:\n%s"
                      % (" ".join(args), p.returncode, check, p.stdout, p.stderr))
        return p

    def hang_report(self):
        """What a hung `tune` left to read: the tail of every tune.log and .tune/*.log under the
        test's directory, and the processes running there (or talking to a test S3 server)."""
        parts = []
        for root, _, names in os.walk(self.dir):
            for n in names:
                if n == "tune.log" or (n.endswith(".log") and os.path.basename(root) == ".tune"):
                    path = os.path.join(root, n)
                    with open(path, errors="replace") as f:
                        parts.append("%s (tail):\n%s" % (path, "".join(f.readlines()[-40:])))
        ps = subprocess.run(["ps", "-eo", "pid,ppid,etimes,stat,args"], capture_output=True,
                            text=True).stdout
        parts.append("processes:\n" + "\n".join(
            line for line in ps.splitlines() if self.dir in line or "aws" in line
            or "s3rver" in line))
        return "\n".join(parts)

    def start_tune(self, *args, env=None):
        return subprocess.Popen([TUNE, *args], cwd=self.dir, env=env or self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def exp_dir(self, name):
        return os.path.join(self.storage, name)

    def state(self, name):
        with open(os.path.join(self.exp_dir(name), "experiment_state.json")) as f:
            return json.load(f)

    def trials(self, name):
        return self.state(name)["trials"]

    def exit_record(self, name, trial_name, attempt=1):
        """The exit line a local supervisor appended to the experiment's attempt log, or None."""
        path = os.path.join(self.exp_dir(name), ".tune", "attempts.log")
        found = None
        try:
            with open(path) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if (rec.get("event") == "exit" and rec.get("trial") == trial_name
                            and rec.get("attempt") == attempt):
                        found = rec
        except FileNotFoundError:
            pass
        return found

    def results(self, name, trial):
        with open(os.path.join(self.exp_dir(name), trial["trial_name"], "result.json")) as f:
            return [json.loads(line) for line in f]

    def iterations(self, name, trial):
        return [r["training_iteration"] for r in self.results(name, trial)]

    def check_arrival_times(self, rows, gap, outage):
        """Rows of a trial that printed a result every `gap` seconds, some read only after an
        `outage` with no driver: each keeps the time its line arrived (not 0 s for the lines
        read late, nor the outage counted in one iteration)."""
        for r in rows:
            self.assertGreaterEqual(r["time_this_iter_s"], gap * 0.8, r)
            self.assertLess(r["time_this_iter_s"], gap + outage * 0.8, r)
        for a, b in zip(rows, rows[1:]):
            self.assertAlmostEqual(b["time_total_s"] - a["time_total_s"], b["time_this_iter_s"],
                                   places=3)
            self.assertLess(b["timestamp"] - a["timestamp"], gap + outage * 0.8 + 1)
        self.assertGreaterEqual(rows[-1]["timestamp"] - rows[0]["timestamp"], outage)

    def wait_for(self, predicate, timeout=30, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if predicate():
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        self.fail("timed out waiting for " + what)
