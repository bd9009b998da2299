"""Worker hosts over SSH, on real sshd's started by scripts/test-hosts.sh: each worker
is a network namespace with its own address and a private storage dir, so the head reaches a
worker's files only through ssh/rsync. (Where namespaces cannot be made, the script falls back
to sshd's on loopback ports and the tests say so.)"""
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from harness import BUILD, PY, SOURCE, TuneTest

SCRIPT = os.path.join(SOURCE, "scripts", "test-hosts.sh")
TRIAL = os.path.join(SOURCE, "tests", "fixtures", "chaos_trial.py")
ARGV_TRIAL = """
import json, sys
print(json.dumps({"argv": sys.argv[1:], "done": True}))
"""


# A PBT population member (function mode): val grows by q each iteration; every iteration is
# a checkpoint that names the trial that wrote it, and the first result after a restore says
# whose checkpoint, at which iteration, it went on from.
LINEAGE_TRIAL = """
import json, os, tempfile, time
import tune_trial
cfg = tune_trial.config()
i, val, extra = 0, 0.0, {}
ck = tune_trial.get_checkpoint()
if ck:
    with open(os.path.join(ck, "state")) as f:
        s = json.load(f)
    i, val = s["i"], s["val"]
    extra = {"restored_from": s["trial"], "restored_i": s["i"], "restored_val": s["val"]}
while i < 12:
    i += 1
    val += cfg["q"]
    time.sleep(0.05)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state"), "w") as f:
            json.dump({"i": i, "val": val, "trial": os.environ["TUNE_TRIAL_ID"]}, f)
        tune_trial.report(dict(val=val, **extra), checkpoint_dir=d)
    extra = {}
"""

# A step-mode trial whose own step counter lives in its checkpoint: after a pause and a restore
# (on any host) it must go on from where it was paused, so `i` equals training_iteration.
COUNTER_TRAINABLE = """
import os, tune_trial
class T(tune_trial.Trainable):
    def setup(self, config):
        self.i, self.q = 0, config["q"]
    def step(self):
        self.i += 1
        return {"score": self.q * self.i, "i": self.i}
    def save_checkpoint(self, d):
        with open(os.path.join(d, "i"), "w") as f:
            f.write(str(self.i))
    def load_checkpoint(self, d):
        with open(os.path.join(d, "i")) as f:
            self.i = int(f.read())
raise SystemExit(tune_trial.run_trainable(T))
"""


class SshTest(TuneTest):
    @classmethod
    def setUpClass(cls):
        cls.hosts_dir = tempfile.mkdtemp(prefix="tune-hosts-")
        p = subprocess.run([SCRIPT, "up", cls.hosts_dir, "2"], capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            subprocess.run([SCRIPT, "down", cls.hosts_dir], timeout=60)
            raise RuntimeError("test hosts did not start: " + p.stderr)
        with open(os.path.join(cls.hosts_dir, "hosts.json")) as f:
            cls.hosts = json.load(f)
        print("\ntest hosts: %s mode, %s" % (cls.hosts["mode"], ", ".join(
            "%s:%d" % (h["host"], h["port"]) for h in cls.hosts["hosts"])), file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        subprocess.run([SCRIPT, "down", cls.hosts_dir], timeout=60)
        shutil.rmtree(cls.hosts_dir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.known_hosts = os.path.join(self.dir, "known_hosts")  # a fresh one per test
        open(self.known_hosts, "w").close()

    @contextlib.contextmanager
    def worker_tmpfs(self, name, size, prefix):
        """Worker 1's experiment dir `name` as a tmpfs of `size` in its own mount namespace, so
        that its /tmp (this machine's) is another filesystem; the dirs named `prefix`* that its
        trials make there are removed at the end."""
        self.addCleanup(lambda: [shutil.rmtree(d, ignore_errors=True)
                                 for d in glob.glob(prefix + "*")])
        subprocess.run([SCRIPT, "fill", self.hosts_dir, "1", name, size], check=True, timeout=30)
        try:
            yield
        finally:
            subprocess.run([SCRIPT, "unfill", self.hosts_dir, "1", name], timeout=30)

    def host_lines(self, which=(0, 1), cpus=2):
        lines = []
        for i in which:
            h = self.hosts["hosts"][i]
            lines.append(
                "  - ssh: {host: %s, port: %d, user: %s, identity_file: %s, known_hosts_file: %s,"
                " storage_path: %s, cpus: %d}" % (h["host"], h["port"], self.hosts["user"],
                                                   self.hosts["identity_file"], self.known_hosts,
                                                   h["storage_path"], cpus))
        return "\n".join(lines)

    def name(self, i):
        """Worker i's name in tune's state and logs: its address, with the port unless 22."""
        h = self.hosts["hosts"][i]
        return h["host"] if h["port"] == 22 else "%s:%d" % (h["host"], h["port"])

    def worker_dir(self, i, exp, trial_name):
        """A worker's copy of a trial dir, read behind its back (for checking only)."""
        return os.path.join(self.hosts_dir, "w%d" % (i + 1), "root", exp, trial_name) \
            if self.hosts["mode"] == "netns" else \
            os.path.join(self.hosts["hosts"][i]["storage_path"], exp, trial_name)

    def remote_supervisors(self, exp, attempt=None):
        """The pids (as text) of the live supervisors of experiment `exp` on the workers (of
        attempt `attempt` only, if given): from the workers' attempt logs, each believed as tune
        believes one, by its /proc/PID/stat (alive, leading its session, started then)."""
        pids = []
        for i in range(len(self.hosts["hosts"])):
            logs = glob.glob(os.path.join(self.worker_dir(i, exp, ".tune"), "attempts-*.log"))
            for log in logs:
                with open(log, errors="replace") as f:
                    lines = f.read().splitlines()
                for line in lines:
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue
                    if e.get("event") != "supervising" or (attempt and e["attempt"] != attempt):
                        continue
                    try:
                        with open("/proc/%d/stat" % e["supervisor"]) as f:
                            fields = f.read().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if fields[0] not in "ZX" and int(fields[3]) == e["supervisor"] and \
                            int(fields[19]) == e["supervisor_started"]:
                        pids.append(str(e["supervisor"]))
        return pids

    @staticmethod
    def agent_of(supervisor):
        """The tune-agent that started a remote supervisor: its parent."""
        with open("/proc/%s/stat" % supervisor) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])

    def test_trials_over_two_workers_and_local_come_back_to_the_head(self):
        self.write("exp.yaml", textwrap.dedent(f"""
            name: spread
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space:
              x: {{uniform: [0.1, 3.0]}}
              steps: 12
              sleep: 0.05
            num_samples: 8
            seed: 3
            checkpoint_config: {{num_to_keep: 2}}
            sync_config: {{sync_period: 1}}
            hosts:
              - local: {{cpus: 1}}
            """) + self.host_lines() + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=300)
        # tune status names every host and its state; checkpoints ls says the head holds them.
        status = json.loads(self.tune("status", "spread", "--format", "json", check=0).stdout)
        self.assertEqual(len(status["hosts"]), 3)
        self.assertTrue(all(v == "up" for v in status["hosts"].values()))
        self.assertIn("hosts:", self.tune("status", "spread", check=0).stdout)
        ckpts = json.loads(self.tune("checkpoints", "ls", "spread", "--format", "json", check=0).stdout)
        self.assertEqual(len(ckpts), 16)
        self.assertTrue(all(c["on_head"] for c in ckpts))
        trials = self.trials("spread")
        self.assertEqual(len(trials), 8)
        hosts = {t["host"] for t in trials}
        workers = {self.name(i) for i in range(len(self.hosts["hosts"]))}
        self.assertTrue(workers <= hosts, "both workers ran trials: %s" % hosts)
        self.assertTrue(hosts - workers, "the head ran trials too: %s" % hosts)
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(self.iterations("spread", t), list(range(1, 13)))
            head = os.path.join(self.exp_dir("spread"), t["trial_name"])
            kept = sorted(c["dir"] for c in t["checkpoints"])
            self.assertEqual(len(kept), 2)
            self.assertEqual(sorted(d for d in os.listdir(head) if d.startswith("checkpoint_")), kept)
            self.assertFalse([d for d in os.listdir(head) if d.startswith(".sync_")])
            if t["host"] not in workers:
                continue
            i = [w for w in range(2) if t["host"] == self.name(w)][0]
            worker = self.worker_dir(i, "spread", t["trial_name"])
            # Pruned on both sides; retained ones byte-identical; the logs came back too.
            self.assertEqual(sorted(d for d in os.listdir(worker) if d.startswith("checkpoint_")), kept)
            for c in kept:
                for root, _, files in os.walk(os.path.join(worker, c)):
                    for f in files:
                        rel = os.path.relpath(os.path.join(root, f), worker)
                        with open(os.path.join(worker, rel), "rb") as a, open(os.path.join(head, rel), "rb") as b:
                            self.assertEqual(a.read(), b.read(), rel)
            self.assertTrue(os.path.exists(os.path.join(worker, "stdout.log")))
            for f in ("stdout.log", "stderr.log"):  # stderr.log: only if the trial wrote there
                self.assertEqual(os.path.exists(os.path.join(worker, f)),
                                 os.path.exists(os.path.join(head, f)), f)
                if not os.path.exists(os.path.join(worker, f)):
                    continue
                with open(os.path.join(worker, f), "rb") as a, open(os.path.join(head, f), "rb") as b:
                    self.assertEqual(a.read(), b.read(), f)

    def test_a_driver_clock_ten_minutes_off_neither_orphans_nor_keeps_remote_trials(self):
        # The lease mtimes the driver writes on the workers are 10 minutes behind (then ahead
        # of) the workers' clocks: a live driver's trials run to their end; a dead driver's
        # stop after orphan_timeout_s all the same.
        def exp(name, steps):
            self.write("exp.yaml", textwrap.dedent(f"""
                name: {name}
                trial:
                  command: ["{PY}", "{TRIAL}"]
                param_space: {{x: {{grid_search: [1, 2]}}, steps: {steps}, sleep: 0.5}}
                orphan_timeout_s: 3
                hosts:
                """) + self.host_lines() + "\n")
        exp("behind", 12)  # 6 s, twice orphan_timeout_s
        self.tune("run", "exp.yaml", check=0, timeout=120,
                  env=dict(self.env, TUNE_TEST_LEASE_SKEW_S="-600"))
        for t in self.trials("behind"):
            self.assertEqual(t["status"], "TERMINATED", t.get("error"))
            self.assertEqual(self.iterations("behind", t), list(range(1, 13)))
        exp("ahead", 400)
        p = self.start_tune("run", "exp.yaml", env=dict(self.env, TUNE_TEST_LEASE_SKEW_S="600"))
        self.wait_for(lambda: len(self.trials("ahead")) == 2 and all(
            t["status"] == "RUNNING" and t.get("iteration", 0) > 0 for t in self.trials("ahead")),
                      timeout=60, what="both remote trials running")
        p.kill()
        p.communicate()
        for t in self.trials("ahead"):
            i = [w for w in range(2) if t["host"] == self.name(w)][0]
            err = os.path.join(self.worker_dir(i, "ahead", t["trial_name"]), "stderr.log")
            self.wait_for(lambda: os.path.exists(err) and "lease expired" in open(err).read(),
                          timeout=20, what="the orphaned remote trial to stop")

    def test_step_mode_trials_on_a_worker(self):
        step = os.path.join(SOURCE, "configs", "examples", "python_step.py")
        self.write("exp.yaml", textwrap.dedent(f"""
            name: steps
            trial:
              command: ["{PY}", "{step}"]
              mode: step
            param_space:
              lr: {{uniform: [0.01, 0.02]}}  # slow: never asks for a checkpoint itself
              target: 1.0
            num_samples: 2
            seed: 4
            stop: {{training_iteration: 12}}
            checkpoint_config: {{checkpoint_frequency: 5, checkpoint_at_end: true, num_to_keep: 2}}
            hosts:
            """) + self.host_lines((0,), 2) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=300)
        for t in self.trials("steps"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(self.iterations("steps", t), list(range(1, 13)))
            # checkpoints at 5, 10 and at the end (12); the 2 latest kept, on both sides
            self.assertEqual([c["iteration"] for c in t["checkpoints"]], [10, 12])
            head = os.path.join(self.exp_dir("steps"), t["trial_name"])
            worker = self.worker_dir(0, "steps", t["trial_name"])
            for c in t["checkpoints"]:
                with open(os.path.join(head, c["dir"], "x.json")) as a, \
                        open(os.path.join(worker, c["dir"], "x.json")) as b:
                    self.assertEqual(a.read(), b.read())
            self.assertEqual(sorted(d for d in os.listdir(worker) if "checkpoint" in d),
                             sorted(c["dir"] for c in t["checkpoints"]))

    def test_step_mode_trials_go_on_when_their_agent_is_stopped(self):
        # At its 3rd step one trial stops (SIGSTOP) the host's agent, which took the trials'
        # step commands and stops and carried their answers: once it is silent (3.5 s) their
        # answers are read over SFTP, and their next commands and their stops at the end go
        # through the host's shell (a command the agent took just before it stopped would go
        # there too, once it has been silent for 30 s and is ended). Every iteration once, in
        # order; nothing hangs (it did for ever: the commands waited in the stopped agent).
        self.write("stopagent.py", """
            import os, signal, sys, tune_trial

            class StopsItsAgent(tune_trial.Trainable):
                def setup(self, config):
                    self.i, self.x = 0, config["x"]

                def step(self):
                    self.i += 1
                    mark = os.path.join(os.environ["TUNE_TRIAL_DIR"], "..", "agent-stopped")
                    if self.x == 1 and self.i == 3 and not os.path.exists(mark):
                        open(mark, "w").close()
                        with open("/proc/%d/stat" % os.getppid()) as f:  # (the supervisor's)
                            agent = int(f.read().rsplit(")", 1)[1].split()[1])
                        with open("/proc/%d/cmdline" % agent, "rb") as f:
                            assert b"tune-agent" in f.read()
                        os.kill(agent, signal.SIGSTOP)
                    return {"i": self.i}

            raise SystemExit(tune_trial.run_trainable(StopsItsAgent))
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: agentstop
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'stopagent.py')}"]
              mode: step
            param_space: {{x: {{grid_search: [1, 2]}}}}
            stop: {{training_iteration: 8}}
            hosts:
            """) + self.host_lines((0,), 2) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=300)
        for t in self.trials("agentstop"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual([r["i"] for r in self.results("agentstop", t)], list(range(1, 9)))
        # The stopped agent would never see the EOF that ends the others: it is ended at the
        # end of the run (it was left on the host, stopped, when the run ended within 30 s).
        # (The test hosts share this machine's pids.)
        left = subprocess.run(["pgrep", "-f", "tune-agent remote .*/agentstop/"],
                              capture_output=True, text=True).stdout.split()
        self.assertEqual(left, [], "an agent of the run was left on the host")

    def test_step_mode_trials_go_on_when_their_agent_is_killed_mid_step(self):
        # At its 3rd step (its answer not yet written) one trial SIGKILLs the host's agent,
        # which took both trials' step commands and said which it wrote: the driver starts a
        # new one and sends again the commands the old one did not say written; the host's
        # stdin.sent keeps one it did write from going twice. Every iteration once, in order.
        self.write("killagent.py", """
            import os, signal, tune_trial

            class KillsItsAgent(tune_trial.Trainable):
                def setup(self, config):
                    self.i, self.x = 0, config["x"]

                def step(self):
                    self.i += 1
                    mark = os.path.join(os.environ["TUNE_TRIAL_DIR"], "..", "agent-killed")
                    if self.x == 1 and self.i == 3 and not os.path.exists(mark):
                        open(mark, "w").close()
                        with open("/proc/%d/stat" % os.getppid()) as f:  # (the supervisor's)
                            agent = int(f.read().rsplit(")", 1)[1].split()[1])
                        with open("/proc/%d/cmdline" % agent, "rb") as f:
                            assert b"tune-agent" in f.read()
                        os.kill(agent, signal.SIGKILL)
                    return {"i": self.i}

            raise SystemExit(tune_trial.run_trainable(KillsItsAgent))
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: agentkill
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'killagent.py')}"]
              mode: step
            param_space: {{x: {{grid_search: [1, 2]}}}}
            stop: {{training_iteration: 40}}
            hosts:
            """) + self.host_lines((0,), 2) + "\n")
        p = self.tune("run", "exp.yaml", check=0, timeout=300)
        self.assertIn("starting a new one", p.stderr)  # (else the kill proved nothing)
        for t in self.trials("agentkill"):
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1))
            self.assertEqual([r["i"] for r in self.results("agentkill", t)], list(range(1, 41)))

    def test_step_mode_commands_in_flight_when_the_link_is_cut_go_once(self):
        # Fast step-mode trials on worker 1, whose link is cut for 8 s mid-run: the command in
        # flight when it dropped was lost with it (the old agent never got it) or written
        # with its "written" lost. It went again after the reconnect only if the host's record
        # (stdin.sent) says it did not go: every iteration once, nothing hangs. (It hung for
        # ever: the lost command was never sent again.)
        self.write("fast.py", """
            import time, tune_trial

            class Fast(tune_trial.Trainable):
                def setup(self, config):
                    self.i = 0

                def step(self):
                    self.i += 1
                    time.sleep(0.002)
                    return {"i": self.i}

            raise SystemExit(tune_trial.run_trainable(Fast))
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: stepcut
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'fast.py')}"]
              mode: step
            param_space: {{x: {{grid_search: [1, 2]}}}}
            stop: {{training_iteration: 2500}}
            hosts:
            """) + self.host_lines((0,), 2) + "\n")
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: all(t["iteration"] >= 30 for t in self.trials("stepcut")) and
                      len(self.trials("stepcut")) == 2, timeout=60, what="both trials stepping")
        self.cut(1)
        try:
            time.sleep(8)
        finally:
            self.cut(1, "heal")
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.fail("the run hung after the link came back:\n" + err[-3000:])
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertIn("connection lost", err)  # (else the cut proved nothing)
        for t in self.trials("stepcut"):
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1), t["trial_name"])
            self.assertEqual([r["i"] for r in self.results("stepcut", t)], list(range(1, 2501)))

    def test_a_step_mode_trial_whose_stdin_fifo_is_replaced_fails_and_says_why(self):
        # At its 3rd step the trial moves its stdin.fifo away (it reads on from its old fd)
        # and puts something else in its place, or nothing. Its next command cannot reach it:
        # the attempt fails at once (a file, a link) or after 10 s (no FIFO, or one nobody
        # reads), saying why, instead of the run waiting for ever; nothing is written through
        # the link.
        victim = os.path.join(self.dir, "victim.txt")
        with open(victim, "w") as f:
            f.write("untouched")
        self.write("evil.py", f"""
            import os, sys, tune_trial

            class Evil(tune_trial.Trainable):
                def setup(self, config):
                    self.i, self.how = 0, config["how"]

                def step(self):
                    self.i += 1
                    if self.i == 3:
                        d = os.environ["TUNE_TRIAL_DIR"]
                        fifo = os.path.join(d, "stdin.fifo")
                        os.rename(fifo, fifo + ".old")
                        if self.how == "file":
                            open(fifo, "w").close()
                        elif self.how == "symlink":
                            os.symlink({victim!r}, fifo)
                        elif self.how == "fifo":
                            os.mkfifo(fifo)
                        elif self.how == "dir":
                            os.mkdir(fifo)
                    return {{"i": self.i}}

            raise SystemExit(tune_trial.run_trainable(Evil))
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: evil
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'evil.py')}"]
              mode: step
            param_space: {{how: {{grid_search: [file, symlink, fifo, gone, dir]}}}}
            stop: {{training_iteration: 10}}
            failure_config: {{max_failures: 1}}
            hosts:
            """) + self.host_lines((0,), 5) + "\n")
        self.tune("run", "exp.yaml", check=1, timeout=180)
        for t in self.trials("evil"):
            self.assertEqual(t["status"], "ERROR", t["trial_name"])
            if t["config"]["how"] == "dir":
                # Its retry cannot make its FIFO where the dir is: it says so (it was "gone
                # without recording the trial's exit (killed?)").
                self.assertRegex(t["error"], r"cannot create \S+/stdin.fifo: File exists")
            else:  # (its retry did the same again)
                self.assertEqual(t["attempt"], 2)
                self.assertIn("its step-mode commands could not reach it", t["error"])
                self.assertEqual([r["i"] for r in self.results("evil", t)], [1, 2, 3])
        with open(victim) as f:
            self.assertEqual(f.read(), "untouched")

    def test_config_values_reach_the_remote_trial_as_literal_arguments(self):
        self.write("argv.py", ARGV_TRIAL)
        marker = os.path.join(self.dir, "pwned")
        values = ["two words", "it's", '"quoted"', "$(touch %s)" % marker, "x; touch %s" % marker,
                  "`touch %s`" % marker, "*", "back\\\\slash"]
        self.write("exp.yaml", textwrap.dedent("""
            name: quoting
            trial:
              command: ["%s", "%s", "{v}", "--flag={v}"]
            param_space:
              v: {grid_search: %s}
            hosts:
            """ % (PY, os.path.join(self.dir, "argv.py"), json.dumps(values))) + self.host_lines((0,), 4) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=300)
        for t in self.trials("quoting"):
            v = t["config"]["v"]
            self.assertEqual(self.results("quoting", t)[-1]["argv"], [v, "--flag=" + v])
        self.assertFalse(os.path.exists(marker), "a config value ran as a shell command")

    def busy_experiment(self, name, host_timeout):
        self.write("exp.yaml", textwrap.dedent(f"""
            name: {name}
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space:
              x: {{uniform: [0.1, 3.0]}}
              steps: 40
              sleep: 0.1
            num_samples: 4
            seed: 9
            host_timeout_s: {host_timeout}
            checkpoint_config: {{num_to_keep: 2}}
            sync_config: {{sync_period: 1}}
            hosts:
            """) + self.host_lines() + "\n")

    def cut(self, k, what="cut"):
        p = subprocess.run([SCRIPT, what, self.hosts_dir, str(k)], capture_output=True, text=True,
                           timeout=60)
        if p.returncode == 3:
            self.skipTest("loopback mode: no link to cut")
        self.assertEqual(p.returncode, 0, p.stderr)

    def check_each_iteration_once(self, name, steps=40):
        for t in self.trials(name):
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            rows = self.results(name, t)
            self.assertEqual([r["training_iteration"] for r in rows], list(range(1, steps + 1)))
            # the trial's own step count: a wrong restore point would show here
            self.assertEqual([r["step"] for r in rows], list(range(1, steps + 1)))

    def test_a_short_link_cut_costs_nothing(self):
        self.busy_experiment("blip", 120)
        p = self.start_tune("run", "exp.yaml")
        w1 = self.name(0)
        self.wait_for(lambda: any(t["host"] == w1 and t["iteration"] >= 3 for t in self.trials("blip")),
                      what="a trial running on worker1")
        self.cut(1)
        try:
            import time
            time.sleep(10)
        finally:
            self.cut(1, "heal")
        out, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("connection lost", err)
        self.assertIn("reconnected", err)
        self.check_each_iteration_once("blip")
        # The loop never waited on the dead link: every libssh call runs on the host's own I/O
        # thread (the goal is 50 ms; the bound here is ten times looser, for ASan on 2 cores).
        with open(os.path.join(self.exp_dir("blip"), "tune.log")) as f:
            stall = re.findall(r"longest loop stall: (\d+) ms, longest wait past its timeout: (\d+) ms",
                               f.read())
        self.assertTrue(stall, "no loop stall figure in tune.log")
        print("\nloop stall during a 10 s link cut: %s ms, wait overrun %s ms" % stall[-1],
              file=sys.stderr)
        self.assertLess(int(stall[-1][0]), 500)
        self.assertLess(int(stall[-1][1]), 500)
        on_w1 = [t for t in self.trials("blip") if t["host"] == w1]
        self.assertTrue(on_w1)
        self.assertTrue(all(t["attempt"] == 1 for t in on_w1), "trials were restarted, not re-attached")

    def test_a_host_whose_link_is_down_as_the_run_starts_is_tried_again(self):
        # Worker 1's link is down when the run connects, and back once the first try failed:
        # the host is tried again (it was left out of the whole run at the first failure).
        self.write("exp.yaml", textwrap.dedent(f"""
            name: latehost
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space:
              x: {{grid_search: [1, 2, 3, 4, 5, 6]}}
              steps: 10
              sleep: 0.2
            hosts:
            """) + self.host_lines((0, 1), 1) + "\n")
        self.cut(1)
        early = ""
        try:
            p = self.start_tune("run", "exp.yaml")
            # (healed as soon as the first try failed: its next one, 1 s later, gets through)
            for line in p.stderr:
                early += line
                if "trying again" in line:
                    break
        finally:
            self.cut(1, "heal")
        out, err = p.communicate(timeout=300)
        err = early + err
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertRegex(err, r"host \S+: .*; trying again in 1 s")
        self.assertNotIn("it is left out", err)
        self.assertIn(self.name(0), {t["host"] for t in self.trials("latehost")})

    def test_a_host_lost_past_host_timeout_has_its_trials_finish_elsewhere(self):
        self.busy_experiment("lost", 4)
        p = self.start_tune("run", "exp.yaml")
        w1 = self.name(0)

        def head_log(t):
            path = os.path.join(self.exp_dir("lost"), t["trial_name"], "stdout.log")
            return open(path).read() if os.path.exists(path) else ""
        # A trial on worker1 with a checkpoint, and with output already on the head.
        self.wait_for(lambda: any(t["host"] == w1 and t["checkpoints"] and head_log(t)
                                  for t in self.trials("lost")),
                      what="a checkpoint and output of a trial on worker1 on the head")
        moved = {t["trial_id"]: head_log(t) for t in self.trials("lost")
                 if t["host"] == w1 and t["status"] == "RUNNING"}
        self.cut(1)
        try:
            out, err = p.communicate(timeout=300)
        finally:
            self.cut(1, "heal")
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("re-queued", err)
        self.check_each_iteration_once("lost")
        self.assertTrue(any(moved.values()))
        for t in self.trials("lost"):
            if t["trial_id"] in moved:
                self.assertNotEqual(t["host"], w1)
                self.assertGreaterEqual(t["attempt"], 2)
                self.assertEqual(t["failures"], 0)
                # The head's log keeps what attempt 1 printed on worker1 (what had reached the
                # head before the cut), then the attempt that ran elsewhere.
                log = head_log(t)
                self.assertTrue(log.startswith(moved[t["trial_id"]]), "attempt 1's output was lost")
                self.assertIn("=== attempt %d ===" % t["attempt"], log)

    def test_a_lone_host_lost_and_back_runs_its_trials_again(self):
        # The only host is cut off past host_timeout_s: its trials are re-queued, and when it
        # comes back (no trial running there any more) they start there again from their
        # checkpoints. (The driver once stopped looking at hosts with no trial: it waited for
        # ever.)
        self.busy_experiment("lone", 4)
        self.write("exp.yaml", open(os.path.join(self.dir, "exp.yaml")).read().split("hosts:")[0]
                   + "hosts:\n" + self.host_lines((0,)) + "\n")
        p = self.start_tune("run", "exp.yaml")
        w1 = self.name(0)
        self.wait_for(lambda: any(t["iteration"] >= 6 for t in self.trials("lone")),
                      what="trials running on worker1")
        self.cut(1)
        try:
            log = os.path.join(self.exp_dir("lone"), "tune.log")
            self.wait_for(lambda: "re-queued" in open(log).read(), timeout=60,
                          what="the host declared lost")
        finally:
            self.cut(1, "heal")
        out, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("reconnected", err)
        self.check_each_iteration_once("lone")
        self.assertTrue(all(t["host"] == w1 for t in self.trials("lone")))
        self.assertTrue(any(t["attempt"] >= 2 for t in self.trials("lone")))

    def test_a_sync_past_sync_timeout_is_killed_and_tried_again(self):
        # A 4 MB checkpoint over a link slowed to 8 Mbit/s takes ~4 s; sync_timeout is 1 s: each
        # pull is killed (with a warning naming the trial, the host and the timeout) and tried
        # again at the next sync_period. Once the link is fast again a pull completes, and the
        # head holds the whole checkpoint, never a part of it.
        self.write("slowck.py", """
            import os, tempfile, time, tune_trial
            for i in range(1, 41):
                time.sleep(0.5)
                d = None
                if i == 1:
                    d = tempfile.mkdtemp()
                    with open(os.path.join(d, "weights.bin"), "wb") as f:
                        f.write(b"w" * (4 << 20))
                tune_trial.report({"i": i}, checkpoint_dir=d)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: synctimeout
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'slowck.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            sync_config: {{sync_period: 1, sync_timeout: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        with self.slow_link():
            log = os.path.join(self.exp_dir("synctimeout"), "tune.log")
            def killed():
                if not os.path.exists(log):
                    return False
                with open(log) as f:
                    return "ran longer than sync_timeout (1 s): killed" in f.read()
            run = self.start_tune("run", "exp.yaml")
            self.wait_for(killed, timeout=60, what="a pull killed past sync_timeout")
        out, err = run.communicate(timeout=120)
        self.assertEqual(run.returncode, 0, err)
        t = self.trials("synctimeout")[0]
        self.assertEqual(t["status"], "TERMINATED")
        with open(log) as fh:
            warning = [line for line in fh if "sync_timeout" in line][0]
        self.assertIn("trial %s: sync from %s" % (t["trial_name"], self.hosts["hosts"][0]["host"]),
                      warning)
        f = os.path.join(self.exp_dir("synctimeout"), t["trial_name"], "checkpoint_000001",
                         "weights.bin")
        self.assertEqual(os.path.getsize(f), 4 << 20)

    @contextlib.contextmanager
    def slow_link(self):
        """Worker 1's link shaped to 8 Mbit/s for the block (netns mode; skipped in loopback
        mode, where there is no link), and back to 10 Gbit/s after it, whatever happens."""
        p = subprocess.run([SCRIPT, "slow", self.hosts_dir, "1", "8mbit"], capture_output=True,
                           text=True, timeout=60)
        if p.returncode == 3:
            self.skipTest("loopback mode: no link to shape")
        try:
            yield
        finally:
            subprocess.run([SCRIPT, "slow", self.hosts_dir, "1", "10gbit"], timeout=60)

    def link_rx(self, i):
        """Bytes the head has received over worker i's link (netns mode)."""
        with open(os.path.join(self.hosts_dir, "w%d" % (i + 1), "veth")) as f:
            veth = f.read().strip()
        with open("/sys/class/net/%s/statistics/rx_bytes" % veth) as f:
            return int(f.read())

    def test_a_trial_that_checkpoints_faster_than_its_pulls_go_has_its_newest_copied(self):
        # Over a link slowed to 8 Mbit/s a 1 MB checkpoint takes ~1 s to pull. The trial saves
        # 8 checkpoints of 1 MB 0.1 s apart (keep 7), waits, saves 7 small ones (256 KB) that
        # push the first 8 out, waits, and ends. A sync that a checkpoint asks for copies only
        # the newest one kept: checkpoints 1 and 8 (2 MB), then the small ones: ~4 MB cross the
        # link. Copying every kept one the head lacked (2-8 together after 1) moved ~10 MB.
        self.write("burst.py", """
            import os, tempfile, time, tune_trial
            i = 0
            for burst, size in ((8, 1 << 20), (7, 1 << 18)):
                for _ in range(burst):
                    i += 1
                    d = tempfile.mkdtemp()
                    with open(os.path.join(d, "weights.bin"), "wb") as f:
                        f.write(os.urandom(size))
                    tune_trial.report({"i": i}, checkpoint_dir=d)
                    time.sleep(0.1)
                time.sleep(5)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: burst
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'burst.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            checkpoint_config: {{num_to_keep: 7}}
            sync_config: {{sync_period: 600}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        with self.slow_link():
            before = self.link_rx(0)
            self.tune("run", "exp.yaml", check=0, timeout=180)
            moved = self.link_rx(0) - before
        t = self.trials("burst")[0]
        self.assertEqual(t["status"], "TERMINATED")
        head = os.path.join(self.exp_dir("burst"), t["trial_name"])
        names = sorted(n for n in os.listdir(head) if "checkpoint_" in n)
        self.assertEqual(names, ["checkpoint_%06d" % i for i in range(9, 16)])
        for n in names:
            self.assertEqual(os.path.getsize(os.path.join(head, n, "weights.bin")), 1 << 18)
        print("\n%.1f MB received for 1.75 MB kept" % (moved / 2**20), file=sys.stderr)
        self.assertGreater(moved, 7 << 18)  # (the 7 kept crossed)
        self.assertLess(moved, 7 << 20, "%.1f MB received for 1.75 MB kept" % (moved / 2**20))

    def test_a_checkpoint_written_in_the_trial_dir_crosses_the_link_once(self):
        # The trial writes its checkpoint in a dir of its own trial dir and reports it only
        # once a periodic sync (every 1 s) has copied that dir to the head (the test then
        # drops a "go" file on the worker). Once the dir is the checkpoint, that copy is where
        # the checkpoint's copy starts: its 2 MB cross the link once (twice before, and the
        # head kept the stale dir for good). Waiting for the copy, rather than a fixed time,
        # keeps this true on a loaded machine; bytes are counted from then on.
        self.write("indir.py", """
            import os, tempfile, time, tune_trial
            d = tempfile.mkdtemp(dir=os.environ["TUNE_TRIAL_DIR"])
            with open(os.path.join(d, "weights.bin"), "wb") as f:
                f.write(os.urandom(2 << 20))
            go = os.path.join(os.environ["TUNE_TRIAL_DIR"], "go")
            deadline = time.time() + 120
            while not os.path.exists(go) and time.time() < deadline:
                time.sleep(0.05)
            tune_trial.report({"i": 1}, checkpoint_dir=d)
            time.sleep(1.5)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: indir
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'indir.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            sync_config: {{sync_period: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        if self.hosts["mode"] != "netns":
            self.skipTest("loopback mode: no link to count bytes on")
        p = self.start_tune("run", "exp.yaml")

        def head_copy():  # the periodic sync's complete copy of the trial's tmp dir
            exp = self.exp_dir("indir")
            for t in os.listdir(exp):
                if not t.startswith("trial_"):
                    continue
                for d in os.listdir(os.path.join(exp, t)):
                    w = os.path.join(exp, t, d, "weights.bin")
                    if d.startswith("tmp") and os.path.getsize(w) == 2 << 20:
                        return t
            return None
        try:
            self.wait_for(head_copy, timeout=90, what="the head's copy of the trial's dir")
            # Counted from here: what crosses once the head holds the dir (not the supervisor
            # binary placed on a fresh host, 2.4 MB, nor that first copy).
            before = self.link_rx(0)
            open(os.path.join(self.worker_dir(0, "indir", head_copy()), "go"), "w").close()
            p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        moved = self.link_rx(0) - before
        print("\n%.2f MB received after the head held the 2 MB dir" % (moved / 2**20),
              file=sys.stderr)
        self.assertLess(moved, 1 << 20,
                        "%.2f MB received after the head held the 2 MB dir" % (moved / 2**20))
        t = self.trials("indir")[0]
        self.assertEqual(t["status"], "TERMINATED")
        head = os.path.join(self.exp_dir("indir"), t["trial_name"])
        worker = self.worker_dir(0, "indir", t["trial_name"])
        with open(os.path.join(head, "checkpoint_000001", "weights.bin"), "rb") as a, \
                open(os.path.join(worker, "checkpoint_000001", "weights.bin"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertEqual(sorted(n for n in os.listdir(head) if os.path.isdir(os.path.join(head, n))),
                         ["checkpoint_000001"])  # no stale copy, no staging left

    def test_checkpoints_dropped_as_the_run_ends_are_deleted_on_the_worker_too(self):
        # With the state written only every 60 s, retention's deletions all wait for the run's
        # last state write, just before the driver exits. The worker then keeps exactly what
        # the head keeps (they were dropped from the hosts' queues at exit: it kept all 6).
        self.write("lastck.py", """
            import os, tempfile, tune_trial
            for i in range(1, 7):
                d = tempfile.mkdtemp()
                with open(os.path.join(d, "w"), "w") as f:
                    f.write(str(i))
                tune_trial.report({"i": i}, checkpoint_dir=d)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: lastck
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'lastck.py')}"]
            param_space: {{x: {{grid_search: [1, 2]}}}}
            checkpoint_config: {{num_to_keep: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=120,
                  env=dict(self.env, TUNE_GLOBAL_CHECKPOINT_S="60"))
        for t in self.trials("lastck"):
            self.assertEqual(t["status"], "TERMINATED")
            head = os.path.join(self.exp_dir("lastck"), t["trial_name"])
            worker = self.worker_dir(0, "lastck", t["trial_name"])
            for where in (head, worker):
                self.assertEqual(sorted(n for n in os.listdir(where) if n.startswith("checkpoint_")),
                                 ["checkpoint_000006"], where)

    def test_another_versions_helpers_on_the_same_storage_keep_apart(self):
        # Two tune versions using one storage_path (a shared home): each places its agent and
        # supervisor in a dir of its own, named by their contents. They shared .tune-bin/, each
        # run overwriting the other's binaries, so that one started (or asked for file work)
        # an agent of the other version.
        other = os.path.join(self.dir, "tune-agent")
        shutil.copy(os.path.join(BUILD, "tune-agent"), other)
        with open(other, "ab") as f:
            f.write(b"another version")  # (an ELF file with bytes after its end still runs)
        for name, env in (("mine", self.env), ("theirs", dict(self.env, TUNE_AGENT=other))):
            self.write(name + ".yaml", textwrap.dedent(f"""
                name: {name}
                trial: {{command: ["{PY}", "-c", "pass"]}}
                param_space: {{x: {{grid_search: [1, 2]}}}}
                hosts:
                """) + self.host_lines((0,)) + "\n")
            self.tune("run", name + ".yaml", "--quiet", env=env, timeout=120)
            self.assertEqual([t["status"] for t in self.trials(name)], ["TERMINATED"] * 2)
        bins = os.path.join(os.path.dirname(os.path.dirname(self.worker_dir(0, "e", "t"))),
                            ".tune-bin")
        agents = sorted(glob.glob(os.path.join(bins, "*", "tune-agent")))
        with open(other, "rb") as f:
            theirs = f.read()
        for a in agents:  # (theirs goes: the other tests find this version's helpers alone)
            with open(a, "rb") as f:
                if f.read() == theirs:
                    self.addCleanup(shutil.rmtree, os.path.dirname(a), True)
        self.assertEqual(len(agents), 2, agents)
        self.assertEqual(sorted(open(a, "rb").read() == theirs for a in agents), [False, True])
        self.assertFalse(os.path.exists(os.path.join(bins, "tune-agent")))

    def test_step_mode_saves_on_a_slow_host_never_stall_the_loop(self):
        # A host slow to answer: there, `tune-supervisor --adopt` (which moves a step-mode save
        # into place) takes 1 s; the trial puts that slow wrapper in place on its host before
        # its first step. Each `saved` answer's adoption runs on the host's I/O thread, queued
        # ahead of the next command: the loop never waits for it (it did, 1 s per save).
        self.write("slowsave.py", """
            import os, sys, time, tune_trial
            # (this version's helpers, .tune-bin/<a sum of them>/: where tune_trial comes from)
            BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
                tune_trial.__file__))), "tune-supervisor")

            class SlowHost(tune_trial.Trainable):
                def setup(self, config):
                    self.i = 0
                    if not os.path.exists(BIN + ".real"):
                        os.rename(BIN, BIN + ".real")
                        with open(BIN + ".tmp", "w") as f:
                            f.write('#!/bin/sh\\ncase "$1" in --adopt) sleep 1;; esac\\n'
                                    'exec "$0.real" "$@"\\n')
                        os.chmod(BIN + ".tmp", 0o755)
                        os.rename(BIN + ".tmp", BIN)

                def step(self):
                    time.sleep(0.1)
                    self.i += 1
                    return {"i": self.i}

                def save_checkpoint(self, d):
                    with open(os.path.join(d, "i.json"), "w") as f:
                        f.write(str(self.i))

                def load_checkpoint(self, d):
                    pass

            raise SystemExit(tune_trial.run_trainable(SlowHost))
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: slowsaves
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'slowsave.py')}",
                        "{self.hosts['hosts'][0]['storage_path']}"]
              mode: step
            param_space: {{x: 1}}
            stop: {{training_iteration: 5}}
            checkpoint_config: {{checkpoint_frequency: 1, checkpoint_at_end: true}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        # (the worker's storage, as the head sees it)
        bins = os.path.join(os.path.dirname(os.path.dirname(self.worker_dir(0, "e", "t"))),
                            ".tune-bin", "*", "tune-supervisor")
        try:
            self.tune("run", "exp.yaml", check=0, timeout=300)
        finally:
            for real in glob.glob(bins):
                if os.path.exists(real + ".real"):
                    os.replace(real + ".real", real)
        t = self.trials("slowsaves")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual([c["iteration"] for c in t["checkpoints"]], [1, 2, 3, 4, 5])
        head = os.path.join(self.exp_dir("slowsaves"), t["trial_name"])
        for c in t["checkpoints"]:
            with open(os.path.join(head, c["dir"], "i.json")) as f:
                self.assertEqual(int(f.read()), c["iteration"])
        with open(os.path.join(self.exp_dir("slowsaves"), "tune.log")) as f:
            log = f.read()
        stall = re.findall(r"longest loop stall: (\d+) ms", log)
        self.assertTrue(stall, "no loop stall figure in tune.log")
        print("\nloop stall with 5 saves on a host that takes 1 s to adopt each: %s ms" % stall[-1],
              file=sys.stderr)
        # (the goal is 50 ms; ten times looser here, for ASan on 2 cores)
        self.assertLess(int(stall[-1]), 500)

    def test_sshd_killed_mid_checkpoint_sync_never_leaves_a_partial_checkpoint_on_the_head(self):
        # 4 MB checkpoints over a link slowed to 8 Mbit/s: each takes ~4 s to copy. The trial
        # runs 3 s past its first checkpoint, so the kill comes while it still runs.
        self.write("big.py", """
            import os, tempfile, time, tune_trial
            for i in range(1, 10):
                time.sleep(0.5)
                d = None
                if i % 6 == 3:
                    d = tempfile.mkdtemp()
                    with open(os.path.join(d, "weights.bin"), "wb") as f:
                        f.write(bytes([i]) * (4 << 20))
                tune_trial.report({"i": i}, checkpoint_dir=d)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: partial
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'big.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            sync_config: {{sync_period: 60}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        with self.slow_link():
            run = self.start_tune("run", "exp.yaml")
            head = os.path.join(self.exp_dir("partial"), "trial_00000_x=1")
            # A sync of checkpoint_000001 is under way: its staging dir exists on the head.
            self.wait_for(lambda: os.path.isdir(os.path.join(head, ".sync_checkpoint_000001")),
                          timeout=60, what="a checkpoint being copied")
            subprocess.run([SCRIPT, "kill", self.hosts_dir, "1"], check=True, timeout=60)
            seen_partial = []
            import time
            deadline = time.time() + 3
            while time.time() < deadline:
                for c in [d for d in os.listdir(head) if d.startswith("checkpoint_")]:
                    f = os.path.join(head, c, "weights.bin")
                    if not os.path.exists(f) or os.path.getsize(f) != 4 << 20:
                        seen_partial.append(c)
                time.sleep(0.05)
            subprocess.run([SCRIPT, "start", self.hosts_dir, "1"], check=True, timeout=60)
            out, err = run.communicate(timeout=300)
        self.assertEqual(seen_partial, [], "the head showed a partial checkpoint")
        self.assertEqual(run.returncode, 0, err)
        self.assertIn("connection lost", err)
        # In the end both checkpoints are on the head, complete.
        for c in ("checkpoint_000001", "checkpoint_000002"):
            with open(os.path.join(head, c, "weights.bin"), "rb") as f:
                data = f.read()
            self.assertEqual(len(data), 4 << 20, c)

    def test_a_sync_killed_with_its_driver_leaves_no_partial_copy_after_the_resume(self):
        # 4 MB checkpoints over a link slowed to 8 Mbit/s; the driver (and its rsync) is killed
        # while checkpoint 1 is being copied; checkpoint 2 then prunes it (num_to_keep: 1), so no
        # later sync ever copies it again.
        self.write("big.py", """
            import os, tempfile, time, tune_trial
            for i in range(1, 10):
                time.sleep(0.5)
                d = None
                if i % 6 == 3:
                    d = tempfile.mkdtemp()
                    with open(os.path.join(d, "weights.bin"), "wb") as f:
                        f.write(bytes([i]) * (4 << 20))
                tune_trial.report({"i": i}, checkpoint_dir=d)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: killedsync
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'big.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            sync_config: {{sync_period: 60}}
            checkpoint_config: {{num_to_keep: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        with self.slow_link():
            head = os.path.join(self.exp_dir("killedsync"), "trial_00000_x=1")
            run = self.start_tune("run", "exp.yaml")
            self.wait_for(lambda: os.path.isdir(os.path.join(head, ".sync_checkpoint_000001")),
                          timeout=60, what="a checkpoint being copied")
            run.kill()
            run.communicate()
            # The driver's rsync and ssh master end with it (they get SIGTERM when it dies),
            # and the master's control socket goes with them.
            def helpers_left():
                left = []
                for pid in self.processes_under(self.dir):
                    try:  # (it may have ended meanwhile)
                        with open("/proc/%d/cmdline" % pid, "rb") as f:
                            if os.path.basename(f.read().split(b"\0")[0]) in (b"rsync", b"ssh"):
                                left.append(pid)
                    except FileNotFoundError:
                        pass
                return left
            self.wait_for(lambda: not helpers_left(), timeout=10,
                          what="the killed driver's rsync and ssh master to exit")
            sockets = [f for f in os.listdir(os.path.join(self.exp_dir("killedsync"), ".tune"))
                       if f.endswith(".sock")]
            self.assertEqual(sockets, [])
            # The checkpoint being copied is not on the head: `best` never prints a path that
            # does not exist (it prints one that does, or says where the checkpoint is).
            best = self.tune("checkpoints", "best", "killedsync")
            if best.returncode == 0:
                self.assertTrue(os.path.isdir(best.stdout.strip()), best.stdout)
            else:
                self.assertEqual(best.stdout, "")
                self.assertRegex(best.stderr, r"is on host \S+ and not on the head yet|no checkpoints")
        self.assertTrue(os.path.isdir(os.path.join(head, ".sync_checkpoint_000001")))
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        self.assertEqual([d for d in os.listdir(head) if d.startswith(".sync_")], [])
        self.assertEqual(sorted(d for d in os.listdir(head) if d.startswith("checkpoint_")),
                         ["checkpoint_000002"])
        with open(os.path.join(head, "checkpoint_000002", "weights.bin"), "rb") as f:
            self.assertEqual(len(f.read()), 4 << 20)

    def test_a_host_whose_key_changed_is_refused_and_the_others_carry_on(self):
        self.write("exp.yaml", textwrap.dedent(f"""
            name: keys
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space:
              x: {{uniform: [0.1, 3.0]}}
              steps: 3
              sleep: 0.01
            num_samples: 4
            hosts:
            """) + self.host_lines() + "\n")
        self.tune("run", "exp.yaml", "--name", "keys1", check=0, timeout=300)  # records both keys
        p = subprocess.run([SCRIPT, "rekey", self.hosts_dir, "2"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = self.tune("run", "exp.yaml", "--name", "keys2", check=0, timeout=300)
        bad = self.name(1)
        refused = [l for l in r.stderr.splitlines() if "host key differs" in l]
        self.assertEqual(len(refused), 1, r.stderr)
        self.assertIn(bad, refused[0])
        self.assertIn(self.known_hosts, refused[0])
        self.assertTrue(all(t["status"] == "TERMINATED" and t["host"] != bad
                            for t in self.trials("keys2")))


    def test_a_host_key_that_changes_mid_run_is_named_with_both_fingerprints(self):
        # Worker 2's sshd comes back with a new host key while its trials run: the driver says
        # so (OpenSSH's SHA256 fingerprints, the one it sent and the known one), stops using
        # the host, and its trials finish elsewhere.
        self.write("exp.yaml", textwrap.dedent(f"""
            name: rekeyed
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space: {{x: {{grid_search: [1, 2, 3, 4]}}, steps: 30, sleep: 0.2}}
            host_timeout_s: 600
            hosts:
            """) + self.host_lines() + "\n")
        run = self.start_tune("run", "exp.yaml")
        bad = self.name(1)
        self.wait_for(lambda: any(t["status"] == "RUNNING" and t["host"] == bad
                                  for t in self.trials("rekeyed")), timeout=60,
                      what="a trial running on worker 2")
        for step in ("rekey", "kill", "start"):  # new key; drop the sessions; listen again
            p = subprocess.run([SCRIPT, step, self.hosts_dir, "2"], capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
        out, err = run.communicate(timeout=300)
        self.assertEqual(run.returncode, 0, err)
        named = [l for l in err.splitlines() if "host key differs" in l]
        self.assertEqual(len(named), 1, err)  # once, not at every retry
        self.assertRegex(named[0], r"it sent ssh-ed25519 SHA256:\S+, known: ssh-ed25519 SHA256:\S+")
        self.assertIn("not used again", named[0])
        sent, known = re.findall(r"SHA256:(\S+?)[,)]", named[0])[:2]
        self.assertNotEqual(sent, known)
        for t in self.trials("rekeyed"):
            self.assertEqual(t["status"], "TERMINATED", t.get("error"))
            self.assertEqual(self.iterations("rekeyed", t), list(range(1, 31)))


    def test_a_killed_remote_supervisor_ends_its_attempt_and_the_retry_runs_alone(self):
        # kill -9 of the supervisor on the worker: no exit record will come. The driver notices
        # within seconds (its agent says the supervisor is gone), ends the attempt's trial, and
        # the retry is the only one running.
        self.supervisor_killed("supkill", stop_agent=False)

    def test_a_supervisor_killed_while_its_agent_is_stopped_still_ends_its_attempt(self):
        # The same with the host's agent stopped first (SIGSTOP): it neither says the
        # supervisor is gone nor that it is alive. Silent for seconds, its supervisors are
        # checked by the driver itself, and the retry goes to a new agent. (Without that check
        # the run would wait for ever.)
        self.supervisor_killed("supstop", stop_agent=True)

    def supervisor_killed(self, name, stop_agent):
        self.write("quiet.py", """
            import json, os, time, tune_trial
            tune_trial.report({"attempt": int(os.environ.get("TUNE_TRIAL_ATTEMPT", "0"))})
            time.sleep(60 if not os.path.exists(os.environ["TUNE_TRIAL_DIR"] + "/again") else 0)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: {name}
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'quiet.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            failure_config: {{max_failures: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: [t.get("iteration", 0) for t in self.trials(name)] == [1],
                      timeout=60, what="the trial's first result")
        def supervisors():
            return [int(p) for p in self.remote_supervisors(name)]
        sups = supervisors()
        self.assertEqual(len(sups), 1, sups)
        trial_pids = subprocess.run(["pgrep", "-P", str(sups[0])], capture_output=True,
                                    text=True).stdout.split()
        self.assertEqual(len(trial_pids), 1)
        # the next attempt must not sleep: mark it through the worker's trial dir
        d = self.worker_dir(0, name, self.trials(name)[0]["trial_name"])
        open(os.path.join(d, "again"), "w").close()
        agent = self.agent_of(sups[0])
        if stop_agent:
            os.kill(agent, signal.SIGSTOP)
            self.addCleanup(lambda: os.path.exists("/proc/%d" % agent) and os.kill(agent, 9))
        os.kill(sups[0], 9)
        out, err = run.communicate(timeout=90)
        self.assertEqual(run.returncode, 0, err)
        t = self.trials(name)[0]
        with open(os.path.join(self.exp_dir(name), "tune.log")) as f:
            log = f.read()
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 2), log[-3000:])
        self.assertIn("is gone without recording the trial's exit", log)
        def running(pid):  # (a zombie, not reaped yet, has ended)
            try:
                with open("/proc/%s/stat" % pid) as f:
                    return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
            except (FileNotFoundError, IndexError):
                return False
        self.assertFalse(running(trial_pids[0]),
                         "the first attempt's trial still runs beside the retry")


    def test_a_gone_line_for_a_live_remote_supervisor_is_not_believed(self):
        # A line saying a running trial's supervisor ended, written into its host's agent's
        # stdout (as a process with root there can): the driver asks the host before it ends
        # the attempt, finds the supervisor running, and the trial finishes as attempt 1 with
        # every result. (Before, the attempt was ended as supervisor_died and its trial killed.)
        if self.hosts["mode"] != "netns":
            self.skipTest("needs root on the worker to write into its agent's stdout")
        self.write("slow.py", """
            import os, time, tune_trial
            for i in range(1, 9):
                tune_trial.report({"i": i, "proc": os.getpid()})
                time.sleep(0.25)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: forgegone
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'slow.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            failure_config: {{max_failures: 0}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.remote_supervisors("forgegone")) == 1 and any(
            t.get("iteration", 0) >= 1 for t in self.trials("forgegone")), timeout=60,
            what="the trial running on the worker")
        sup = int(self.remote_supervisors("forgegone")[0])
        line = json.dumps({"event": "gone", "id": self.trials("forgegone")[0]["trial_id"],
                           "attempt": 1, "supervisor": sup, "status": 0})
        with open("/proc/%d/fd/1" % self.agent_of(sup), "w") as f:
            f.write(line + "\n")
        out, err = run.communicate(timeout=60)
        self.assertEqual(run.returncode, 0, err)
        with open(os.path.join(self.exp_dir("forgegone"), "tune.log")) as f:
            log = f.read()
        t = self.trials("forgegone")[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1), log[-3000:])
        rows = self.results("forgegone", t)
        self.assertEqual([r["i"] for r in rows], list(range(1, 9)))
        self.assertEqual(len({r["proc"] for r in rows}), 1)
        self.assertIn("but it still runs there: not believed", log)

    def test_a_killed_remote_agent_leaves_its_trials_running_and_a_new_one_launches(self):
        # kill -9 of the host's tune-agent while two trials run there and two wait: the running
        # ones go on under their supervisors (same attempt, every iteration once), the driver
        # starts a new agent, and the waiting ones are launched through it.
        self.write("slow.py", """
            import os, time, tune_trial
            for i in range(1, 11):
                tune_trial.report({"i": i, "proc": os.getpid()})
                time.sleep(0.3)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: agkill
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'slow.py')}"]
            param_space: {{x: {{grid_search: [1, 2, 3, 4]}}}}
            hosts:
            """) + self.host_lines((0,), cpus=2) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.remote_supervisors("agkill")) == 2 and sum(
            t.get("iteration", 0) > 0 for t in self.trials("agkill")) == 2,
            timeout=60, what="two trials reporting on the worker")
        agent = self.agent_of(self.remote_supervisors("agkill")[0])
        with open("/proc/%d/cmdline" % agent, "rb") as f:
            self.assertIn(b"tune-agent\0remote", f.read())
        os.kill(agent, 9)
        out, err = run.communicate(timeout=120)
        self.assertEqual(run.returncode, 0, err)
        with open(os.path.join(self.exp_dir("agkill"), "tune.log")) as f:
            log = f.read()
        for t in self.trials("agkill"):
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1), log)
            rows = self.results("agkill", t)
            self.assertEqual([r["i"] for r in rows], list(range(1, 11)))
            self.assertEqual(len({r["proc"] for r in rows}), 1, "one process did all the work")
            # and the driver's pid field names it on every row, the first included
            self.assertEqual({r["pid"] for r in rows}, {rows[0]["proc"]})
        self.assertIn("starting a new one", log)

    def test_200_remote_trials_fail_retry_and_resume_after_a_kill_9(self):
        # At the scale users run: 200 short trials over two workers, each failing once at
        # iteration 2 and retried from its checkpoint; the driver is killed (-9) part way and
        # resumed. Every trial ends TERMINATED after one failure, each iteration recorded once.
        self.write("t.py", """
            import json, os, sys, tempfile
            d = os.environ["TUNE_TRIAL_DIR"]
            # (a retry may run on the other worker: only its restore point goes with it)
            ck = os.environ.get("TUNE_RESTORE_CHECKPOINT")
            start = int(open(os.path.join(ck, "i")).read()) if ck else 0
            for i in range(start + 1, 4):
                if i == 2 and not ck:
                    sys.exit(1)
                c = tempfile.mkdtemp(dir=d)
                open(os.path.join(c, "i"), "w").write(str(i))
                print(json.dumps({"i": i, "loss": 1.0 / i, "checkpoint": c}), flush=True)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: many
            trial: {{command: ["{PY}", "{os.path.join(self.dir, 't.py')}"]}}
            param_space: {{x: {{grid_search: [{", ".join(str(i) for i in range(200))}]}}}}
            failure_config: {{max_failures: 1}}
            checkpoint_config: {{num_to_keep: 1}}
            hosts:
            """) + self.host_lines((0, 1), cpus=4) + "\n")
        run = self.start_tune("run", "exp.yaml", "--quiet")
        self.wait_for(lambda: sum(t["status"] == "TERMINATED" for t in self.trials("many")) >= 60,
                      timeout=300, what="60 trials done")
        run.kill()
        run.communicate()
        r = self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0, timeout=600)
        with open(os.path.join(self.exp_dir("many"), "tune.log")) as f:
            log = f.read()
        trials = self.trials("many")
        self.assertEqual(len(trials), 200)
        hosts = set()
        for t in trials:
            self.assertEqual((t["status"], t["failures"]), ("TERMINATED", 1),
                             t["trial_name"] + "\n" + log[-3000:])
            self.assertEqual([row["i"] for row in self.results("many", t)], [1, 2, 3],
                             t["trial_name"])
            self.assertEqual(len(t["checkpoints"]), 1, t["trial_name"])
            hosts.add(t["host"])
        self.assertEqual(hosts, {self.name(0), self.name(1)})

    def test_a_remote_trials_pid_and_exit_come_in_its_agents_events(self):
        # 24 short trials on one host, a third of them exiting with code 3: each trial's pid
        # and exit record come over the agent's channel as its supervisor says them, not from
        # the record file (an SFTP read) or the supervisor's children (a shell command), which
        # the driver counts. (Before, each attempt's record file was read at least once, and
        # its pid asked with a shell command when its first output was read.)
        self.write("short.py", """
            import os, sys, tune_trial
            x = int(sys.argv[1])
            tune_trial.report({"x": x, "proc": os.getpid()})
            sys.exit(3 if x % 3 == 0 else 0)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: events
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'short.py')}", "{{x}}"]
            param_space: {{x: {{grid_search: {list(range(24))}}}}}
            sync_config: {{syncer: none}}
            hosts:
            """) + self.host_lines((0,), cpus=4) + "\n")
        self.tune("run", "exp.yaml", check=1, timeout=300)  # (some trials failed)
        with open(os.path.join(self.exp_dir("events"), "tune.log")) as f:
            log = f.read()
        trials = self.trials("events")
        self.assertEqual(len(trials), 24)
        for t in trials:
            failed = t["config"]["x"] % 3 == 0
            self.assertEqual(t["status"], "ERROR" if failed else "TERMINATED", t["trial_name"])
            rows = self.results("events", t)
            self.assertEqual(len(rows), 1, t["trial_name"])
            # the pid the driver gives the result is the trial's own
            self.assertEqual(rows[0]["pid"], rows[0]["proc"], t["trial_name"])
            if failed:
                self.assertIn("3", str(t.get("error", "")), t)
        stats = re.findall(r"(\d+) exit record files read; (\d+) trial pids asked", log)
        self.assertTrue(stats, log[-3000:])
        records, pids = map(int, stats[-1])
        print("\n%d exit record files read, %d trial pids asked for 24 trials" % (records, pids))
        self.assertEqual(records, 0, log[-3000:])
        # (a look that reads the first output before the start event reached the driver asks:
        # a race the agent nearly always wins; 0 or 1 of 50 in the benchmark's runs)
        self.assertLessEqual(pids, 4, log[-3000:])
        # Each trial's result came in its agent's output event, not from a read of its
        # stdout.log by the driver (a look): before, each trial was looked at at least once.
        looks, carried = map(int, re.findall(
            r"(\d+) looks at trials' output; (\d+) outputs carried", log)[-1])
        print("%d looks at trials' output, %d outputs carried by events" % (looks, carried))
        self.assertGreaterEqual(carried, 20, log[-3000:])
        self.assertLessEqual(looks, 4, log[-3000:])
        # and when it arrived, from its supervisor's notes
        for t in trials:
            row = self.results("events", t)[0]
            self.assertGreater(row["time_this_iter_s"], 0, t["trial_name"])

    def test_an_ended_trials_few_small_files_come_back_without_an_rsync(self):
        # 12 one-result trials, each writing a line to stderr and a small file in a dir of its
        # own; trial 0 writes 1 MB there too. An ended trial's last sync takes a few small files
        # from the answer to its look for changes (one command of the kept shell), not from an
        # rsync (several round trips more): the head has every file as the worker has it,
        # bytes and mtime, and the driver counts the syncs that needed no rsync.
        self.write("small.py", """
            import os, sys, tune_trial
            x = int(sys.argv[1])
            d = os.path.join(os.environ["TUNE_TRIAL_DIR"], "logs")
            os.makedirs(d)
            with open(os.path.join(d, "notes.txt"), "w") as f:
                f.write("trial %d\\n" % x)
            if x == 0:
                with open(os.path.join(d, "big.bin"), "wb") as f:
                    f.write(os.urandom(1 << 20))
            print("to stderr", file=sys.stderr)
            tune_trial.report({"x": x})
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: small
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'small.py')}", "{{x}}"]
            param_space: {{x: {{grid_search: {list(range(12))}}}}}
            hosts:
            """) + self.host_lines((0,), cpus=4) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=300)
        trials = self.trials("small")
        self.assertEqual(len(trials), 12)
        for t in trials:
            x = t["config"]["x"]
            self.assertEqual([r["x"] for r in self.results("small", t)], [x])
            head = os.path.join(self.exp_dir("small"), t["trial_name"])
            worker = self.worker_dir(0, "small", t["trial_name"])
            names = ["stdout.log", "stdout.times", "stderr.log", "params.json", "logs/notes.txt"]
            for name in names + (["logs/big.bin"] if x == 0 else []):
                with open(os.path.join(head, name), "rb") as a, \
                        open(os.path.join(worker, name), "rb") as b:
                    self.assertEqual(a.read(), b.read(), (t["trial_name"], name))
                self.assertEqual(os.stat(os.path.join(head, name)).st_mtime_ns,
                                 os.stat(os.path.join(worker, name)).st_mtime_ns, name)
            self.assertEqual(os.stat(os.path.join(head, "logs")).st_mtime_ns,
                             os.stat(os.path.join(worker, "logs")).st_mtime_ns)
            with open(os.path.join(head, "stderr.log")) as f:
                self.assertIn("to stderr", f.read())
        with open(os.path.join(self.exp_dir("small"), "tune.log")) as f:
            log = f.read()
        syncs = re.findall(r"(\d+) syncs, median [\d.]+ ms, (\d+) of them last syncs without "
                           r"rsync, (\d+) with the look their agent sent", log)
        # One sync per trial, its last (before, each start cost an rsync too); trial 0's 1 MB
        # went by rsync. Each took the look its agent sent with the trial's exit (no command).
        self.assertEqual(syncs, [("12", "11", "12")], log[-3000:])

    def test_a_dir_the_trial_replaces_by_a_file_is_replaced_on_the_head(self):
        # A periodic sync copies dir `out` (and file `was_file`); the trial then makes `out` a
        # file and `was_file` a dir, and ends. The head must hold what the worker holds (rsync
        # without --force cannot put a file where a dir with files is: exit 23, files missing).
        self.write("swap.py", """
            import json, os, shutil, time
            d = os.environ["TUNE_TRIAL_DIR"]
            os.makedirs(os.path.join(d, "out", "deeper"))
            for name in ("out/a.txt", "out/deeper/b.txt", "was_file"):
                with open(os.path.join(d, name), "w") as f:
                    f.write(name)
            print(json.dumps({"step": 1}), flush=True)
            time.sleep(2.5)  # (a periodic sync copies them)
            shutil.rmtree(os.path.join(d, "out"))
            with open(os.path.join(d, "out"), "w") as f:
                f.write("now a file")
            os.remove(os.path.join(d, "was_file"))
            os.makedirs(os.path.join(d, "was_file"))
            with open(os.path.join(d, "was_file", "inside"), "w") as f:
                f.write("inside")
            print(json.dumps({"step": 2}), flush=True)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: swap
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'swap.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            sync_config: {{sync_period: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=300)
        t = self.trials("swap")[0]
        self.assertEqual(t["status"], "TERMINATED")
        head = os.path.join(self.exp_dir("swap"), t["trial_name"])
        with open(os.path.join(head, "out")) as f:
            self.assertEqual(f.read(), "now a file")
        with open(os.path.join(head, "was_file", "inside")) as f:
            self.assertEqual(f.read(), "inside")
        with open(os.path.join(self.exp_dir("swap"), "tune.log")) as f:
            self.assertNotIn("warning", f.read())

    def test_checkpoints_reported_as_remote_trials_exit_are_kept(self):
        self.checkpoints_reported_as_trials_exit_are_kept(16)

    def test_checkpoints_reported_as_remote_trials_exit_are_kept_at_scale(self):
        # 60 such trials on two hosts, 12 at once: a checkpoint adopted while the trial's last
        # sync (planned without it) runs is copied by one more sync before the trial's end is
        # handed on. Before, the end could go first (the sync the registration asks for came
        # later) and the checkpoint was never copied: about 1 run in 20 of this test failed.
        self.checkpoints_reported_as_trials_exit_are_kept(60, hosts=(0, 1), cpus=6)

    def checkpoints_reported_as_trials_exit_are_kept(self, trials, hosts=(0,), cpus=4):
        # Each trial reports three checkpoints as fast as it can and exits at once: its last
        # lines and its exit reach the driver together. Every checkpoint is adopted on the
        # worker and brought to the head before the trial's end is handed on.
        self.write("burst.py", """
            import json, os, tempfile, tune_trial as tt
            for i in range(1, 4):
                d = tempfile.mkdtemp()
                json.dump({"i": i}, open(os.path.join(d, "s.json"), "w"))
                tt.report({"i": i}, checkpoint_dir=d)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: burst
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'burst.py')}"]
            param_space: {{x: {{grid_search: [{", ".join(str(i) for i in range(trials))}]}}}}
            hosts:
            """) + self.host_lines(hosts, cpus=cpus) + "\n")
        r = self.tune("run", "exp.yaml", check=0, timeout=120)
        with open(os.path.join(self.exp_dir("burst"), "tune.log")) as f:
            log = f.read()
        self.assertNotIn("no remote run", log)
        self.assertNotIn("has ended", log)
        for t in self.trials("burst"):
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            self.assertEqual([c["iteration"] for c in t["checkpoints"]], [1, 2, 3],
                             t["trial_name"] + "\n" + log[-2000:])
            head = os.path.join(self.exp_dir("burst"), t["trial_name"])
            for c in t["checkpoints"]:
                self.assertTrue(os.path.isfile(os.path.join(head, c["dir"], "s.json")),
                                t["trial_name"] + " " + c["dir"])

    def test_trials_a_killed_agent_started_are_watched_by_the_new_one(self):
        # Two trials print once, are quiet for 8 s, print again and end. The host's agent is
        # killed once both printed: the new agent is asked to watch the two supervisors it did
        # not start, so the quiet seconds cost a few looks, not one per poll (~5 a second).
        self.write("quiet.py", """
            import os, time, tune_trial
            tune_trial.report({"i": 1, "proc": os.getpid()})
            time.sleep(8)
            tune_trial.report({"i": 2, "proc": os.getpid()})
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: agwatch
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'quiet.py')}"]
            param_space: {{x: {{grid_search: [1, 2]}}}}
            hosts:
            """) + self.host_lines((0,), cpus=2) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.remote_supervisors("agwatch")) == 2 and sum(
            t.get("iteration", 0) >= 1 for t in self.trials("agwatch")) == 2, timeout=60,
            what="two trials running, both printed")
        os.kill(self.agent_of(self.remote_supervisors("agwatch")[0]), 9)
        out, err = run.communicate(timeout=120)
        self.assertEqual(run.returncode, 0, err)
        with open(os.path.join(self.exp_dir("agwatch"), "tune.log")) as f:
            log = f.read()
        self.assertIn("starting a new one", log)
        for t in self.trials("agwatch"):
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1), log)
            self.assertEqual([r["i"] for r in self.results("agwatch", t)], [1, 2])
        looks = [int(m) for m in re.findall(r"(\d+) looks at trials' output", log)]
        self.assertTrue(looks, log)
        # Unwatched after the kill, each trial is looked at every poll for ~7 s: 84 looks in
        # all when the new agent was not asked to watch them. Watched: the first looks, the
        # answer to the watch, the output, the end and a routine look every 5 s: 16. (The
        # limit leaves the new agent ~3 s to start and answer on a loaded machine.)
        self.assertLessEqual(looks[-1], 45, log)

    def test_a_launch_the_agent_never_answers_is_asked_again_of_a_new_agent(self):
        # The host's agent is stopped (SIGSTOP: as if stuck in a stalled filesystem) while the
        # first of two trials runs there one at a time. The second start gets no answer: after
        # 15 s that agent is killed, and the start goes to a new agent, as attempt 1.
        self.write("short.py", """
            import time, tune_trial
            for i in range(1, 4):
                tune_trial.report({"i": i})
                time.sleep(0.5)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: agstop
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'short.py')}"]
            param_space: {{x: {{grid_search: [1, 2]}}}}
            hosts:
            """) + self.host_lines((0,), cpus=1) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.remote_supervisors("agstop")) == 1, timeout=60,
                      what="the first trial")
        agent = self.agent_of(self.remote_supervisors("agstop")[0])
        os.kill(agent, signal.SIGSTOP)
        out, err = run.communicate(timeout=120)
        self.assertEqual(run.returncode, 0, err)
        with open(os.path.join(self.exp_dir("agstop"), "tune.log")) as f:
            log = f.read()
        for t in self.trials("agstop"):
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1), log)
            self.assertEqual([r["i"] for r in self.results("agstop", t)], [1, 2, 3])
        self.assertIn("did not answer a launch within 15 s", log)
        self.assertFalse(os.path.exists("/proc/%d" % agent) and
                         open("/proc/%d/stat" % agent).read().rsplit(")", 1)[1].split()[0] != "Z",
                         "the agent that never answered still runs")

    def test_quiet_remote_trials_are_looked_at_when_they_print_also_after_a_reattach(self):
        # Two trials print once, are quiet for 8 s, print again and end; two more print only at
        # the end (no stdout.log until then). The host's agent says
        # when a trial's output grows and when its supervisor ends; the driver looks at a trial's
        # files then (and every 5 s in case), not at every poll (~5 a second while quiet). The
        # driver is killed once all four have printed: the resumed driver's new agent watches
        # the four supervisors it did not start, their ends included.
        self.write("quiet.py", """
            import os, time, tune_trial
            if tune_trial.config()["x"] <= 2:
                tune_trial.report({"i": 1, "proc": os.getpid()})
            time.sleep(8)
            tune_trial.report({"i": 2, "proc": os.getpid()})
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: quiet
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'quiet.py')}"]
            param_space: {{x: {{grid_search: [1, 2, 3, 4]}}}}
            hosts:
            """) + self.host_lines((0,), cpus=4) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.remote_supervisors("quiet")) == 4 and sum(
            t.get("iteration", 0) >= 1 for t in self.trials("quiet")) == 2, timeout=60,
            what="four trials running, two that printed")
        run.kill()
        run.communicate()
        self.assertEqual(len(self.remote_supervisors("quiet")), 4)
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=120)
        with open(os.path.join(self.exp_dir("quiet"), "tune.log")) as f:
            log = f.read()
        for t in self.trials("quiet"):
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1), log)
            rows = self.results("quiet", t)
            self.assertEqual([r["i"] for r in rows], [1, 2] if t["config"]["x"] <= 2 else [2])
            self.assertEqual(len({r["proc"] for r in rows}), 1)
        self.assertIn("re-attached", log)
        looks = [int(m) for m in re.findall(r"(\d+) looks at trials' output", log)]
        self.assertTrue(looks, log)
        # The resumed driver watched for ~6-8 s: looked at every poll, that is ~30 looks per
        # trial (148 in one run of the code before); watched, a few per trial (first look, the
        # answer to the watch, the output, the end, one routine look): 20 in one run.
        self.assertLessEqual(looks[-1], 50, log)

    def test_output_its_host_will_not_let_be_read_is_named_and_the_trial_still_ends(self):
        # The trial prints two results, then takes read permission from its own stdout.log
        # and prints a third: the driver cannot read that one there. It must neither hand
        # the exit on at once as if all output were read (the third result lost without a
        # word, as before), nor wait for ever: after some tries it ends the attempt and says
        # why, as failed (output_lost): a result is missing.
        if os.geteuid() == 0:
            self.skipTest("root reads any file: run by integration.ssh_user as a user")
        self.write("unreadable.py", """
            import os, time, tune_trial
            tune_trial.report({"i": 1})
            tune_trial.report({"i": 2})
            time.sleep(1)
            os.chmod(os.path.join(os.environ["TUNE_TRIAL_DIR"], "stdout.log"), 0)
            tune_trial.report({"i": 3})
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: unread
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'unreadable.py')}"]
            param_space: {{x: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.tune("run", "exp.yaml", check=1, timeout=120)
        t = self.trials("unread")[0]
        self.assertEqual(t["status"], "ERROR")
        self.assertIn("cannot read the rest of its output", t["error"])
        self.assertEqual([r["i"] for r in self.results("unread", t)], [1, 2])
        with open(os.path.join(self.exp_dir("unread"), "tune.log")) as f:
            self.assertIn("cannot read the rest of its output", f.read())

    def test_a_trial_that_makes_its_stdout_times_a_fifo_does_not_hang_its_hosts_reading(self):
        # Lines of 100 KB are too big for the agent's events to carry: the driver reads them
        # itself, with the notes of when they arrived. Half way the trial puts a FIFO in place
        # of stdout.times. An SFTP open of it waited for a writer for ever, and every later
        # request on that connection with it: no result came, and Ctrl-C never ended the run.
        self.write("fifo.py", """
            import json, os
            d = os.environ["TUNE_TRIAL_DIR"]
            for i in range(1, 41):
                if i == 20:
                    os.rename(os.path.join(d, "stdout.times"), os.path.join(d, "away.times"))
                    os.mkfifo(os.path.join(d, "stdout.times"))
                print(json.dumps({"i": i, "pad": "x" * 100000}), flush=True)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: fifo
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'fifo.py')}"]
            param_space: {{x: {{grid_search: [1, 2]}}}}
            sync_config: {{syncer: none}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=120)
        for t in self.trials("fifo"):
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            self.assertEqual([r["i"] for r in self.results("fifo", t)], list(range(1, 41)))

    def test_a_stdout_log_removed_or_replaced_on_the_worker_fails_the_attempt(self):
        # The trial prints three results, then renames its stdout.log away (or deletes it)
        # and prints three more: its supervisor writes them into the file it holds, which the
        # driver, reading the path, cannot see. The attempt must not end TERMINATED
        # with three results and no word (as before): it fails as output_lost, saying why.
        self.write("hide.py", """
            import os, sys, time, tune_trial
            log = os.path.join(os.environ["TUNE_TRIAL_DIR"], "stdout.log")
            for i in range(1, 7):
                tune_trial.report({"i": i})
                if i == 3:
                    time.sleep(1)
                    if sys.argv[1] == "unlink":
                        os.unlink(log)
                    else:
                        os.rename(log, log + ".away")
                        os.mkdir(log)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: hide
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'hide.py')}", "{{how}}"]
            param_space: {{how: {{grid_search: [unlink, replace]}}}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.tune("run", "exp.yaml", check=1, timeout=120)
        for t in self.trials("hide"):
            self.assertEqual(t["status"], "ERROR", t["trial_name"])
            self.assertIn("was removed or replaced while it ran", t["error"])
            self.assertEqual([r["i"] for r in self.results("hide", t)], [1, 2, 3])

    def test_a_trial_that_cuts_its_own_stdout_log_is_retried_and_loses_no_result(self):
        # At step 5 of its first run the trial empties its own stdout.log (a logger opened on
        # it with "w"). Before, what the driver had not read went without a word, and it read
        # on from its old offset in what came after: rows 5-8 missing, and the attempt's
        # retry started from the checkpoint of step 9. Now the attempt fails as output_lost,
        # naming the cut, nothing after the cut is taken, and its retry from the checkpoint of
        # step 3 gives every result once.
        self.write("cut.py", """
            import os, tempfile, time, tune_trial
            log = os.path.join(os.environ["TUNE_TRIAL_DIR"], "stdout.log")
            ck = tune_trial.get_checkpoint()
            i = int(open(os.path.join(ck, "i")).read()) if ck else 0
            while i < 9:
                i += 1
                time.sleep(0.1)
                if i == 5 and not ck:
                    open(log, "w").close()
                if i % 3:
                    tune_trial.report({"step": i})
                    continue
                with tempfile.TemporaryDirectory() as d:
                    with open(os.path.join(d, "i"), "w") as f:
                        f.write(str(i))
                    tune_trial.report({"step": i}, checkpoint_dir=d)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: cut
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'cut.py')}"]
            param_space: {{x: 1}}
            failure_config: {{max_failures: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=120)
        t = self.trials("cut")[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 2))
        self.assertEqual([r["step"] for r in self.results("cut", t)], list(range(1, 10)))
        with open(os.path.join(self.exp_dir("cut"), "tune.log")) as f:
            self.assertRegex(f.read(), r"stdout.log in \S+ was cut from \d+ to 0 bytes by another "
                                       r"process; what the trial printed since is not kept")

    def test_a_worker_whose_disk_fills_up_ends_the_trial_with_the_reason(self):
        # The worker's experiment dir is a 4 MiB tmpfs (in its own mount namespace); the trial
        # prints 12 MB. The driver must not wait forever for an exit record that cannot be
        # written: it ends the attempt, says why, and finishes. The retries find the disk still
        # full: not the trial's fault, so they are retried per max_failures too (the first
        # retry ended the trial before: its params.json could not be placed over SFTP, a launch
        # error, never retried).
        if self.hosts["mode"] != "netns":
            self.skipTest("needs netns mode (root) to give a worker its own small disk")
        self.write("big.py", """
            import json, time
            for i in range(1, 241):
                print(json.dumps({"i": i, "pad": "x" * 50000}), flush=True)
                time.sleep(0.01)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: dfull
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'big.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            failure_config: {{max_failures: 2}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        subprocess.run([SCRIPT, "fill", self.hosts_dir, "1", "dfull", "4m"], check=True,
                       timeout=30)
        try:
            run = self.start_tune("run", "exp.yaml")
            out, err = run.communicate(timeout=120)
        finally:
            subprocess.run([SCRIPT, "unfill", self.hosts_dir, "1", "dfull"], timeout=30)
        t = self.trials("dfull")[0]
        self.assertEqual(t["status"], "ERROR", err)
        with open(os.path.join(self.exp_dir("dfull"), "tune.log")) as f:
            log = f.read()
        self.assertIn("No space left on device", log)
        self.assertEqual(t["attempt"], 3, log[-3000:])

    def test_a_checkpoint_in_the_workers_temp_dir_on_another_filesystem_is_moved_in(self):
        # The worker's experiment dir is a tmpfs of its own; the trial reports checkpoints it
        # wrote with tempfile.mkdtemp() (the worker's /tmp, another filesystem): each is copied
        # into the trial dir there and removed from /tmp, not refused as a rename across
        # filesystems was before.
        if self.hosts["mode"] != "netns":
            self.skipTest("needs netns mode (root) to give a worker a filesystem of its own")
        self.write("tmpck.py", """
            import json, os, tempfile
            for i in range(1, 4):
                d = tempfile.mkdtemp(prefix="PREFIX")
                os.makedirs(os.path.join(d, "sub"))
                with open(os.path.join(d, "sub", "state.json"), "w") as f:
                    json.dump({"i": i}, f)
                with open(os.path.join(d, "weights.bin"), "wb") as f:
                    f.write(bytes(range(256)) * 4096 * i)
                with open(os.path.join(d, "sparse.bin"), "wb") as f:  # 64 MiB, 4 KiB of data
                    f.truncate(64 << 20)
                    f.seek(32 << 20)
                    f.write(b"s" * 4096)
                print(json.dumps({"i": i, "checkpoint": d}), flush=True)
            """.replace("PREFIX", "tune-xfs-%s-" % os.path.basename(self.dir)))
        self.write("exp.yaml", textwrap.dedent(f"""
            name: xfs
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'tmpck.py')}"]
            param_space: {{x: {{grid_search: [1, 2]}}}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        prefix = "/tmp/tune-xfs-%s-" % os.path.basename(self.dir)
        with self.worker_tmpfs("xfs", "64m", prefix):
            self.tune("run", "exp.yaml", check=0, timeout=300)
            trials = self.trials("xfs")
            self.assertEqual(len(trials), 2)
            with open(os.path.join(self.exp_dir("xfs"), "tune.log")) as f:
                log = f.read()
            self.assertNotIn("refused", log)
            self.assertNotIn("cross-device", log)
            # (each moved in by the host's agent, none in its shell)
            self.assertIn("6 file operations by agents, 0 in hosts' shells", log)
            for t in trials:
                self.assertEqual(t["status"], "TERMINATED")
                # (the head's copies: the worker's tmpfs is seen in its own namespace only)
                head = os.path.join(self.exp_dir("xfs"), t["trial_name"])
                for i in range(1, 4):
                    name = "checkpoint_%06d" % i
                    with open(os.path.join(head, name, "sub", "state.json")) as f:
                        self.assertEqual(json.load(f), {"i": i}, name)
                    with open(os.path.join(head, name, "weights.bin"), "rb") as f:
                        self.assertEqual(f.read(), bytes(range(256)) * 4096 * i)
                    # (holes kept as holes by the host's copy and by the head's)
                    sparse = os.path.join(head, name, "sparse.bin")
                    self.assertEqual(os.path.getsize(sparse), 64 << 20)
                    self.assertLess(os.stat(sparse).st_blocks * 512, 1 << 20)
                    with open(sparse, "rb") as f:
                        f.seek(32 << 20)
                        self.assertEqual(f.read(4096), b"s" * 4096)
                self.assertEqual([r.get("checkpoint_dir_name") for r in
                                  self.results("xfs", t)],
                                 ["checkpoint_%06d" % i for i in range(1, 4)])
                self.assertEqual(sorted(n for n in os.listdir(head) if n.startswith("checkpoint")),
                                 ["checkpoint_%06d" % i for i in range(1, 4)])
        # (moved: none is left in the worker's temp dir, which is this machine's /tmp)
        self.assertFalse(glob.glob(prefix + "*"))

    def test_a_relative_checkpoint_path_is_the_trials_own_working_dir_on_the_worker(self):
        # The trial runs in the workdir's copy on the worker (trial.sync_workdir), and reports
        # its checkpoint relative to that: it is found there, not under the head's workdir.
        self.write("relck.py", """
            import json, os
            d = os.path.join(os.environ["TUNE_TRIAL_DIR"], "ck")
            os.makedirs(d)
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"i": 1}, f)
            rel = os.path.relpath(d, os.getcwd())
            assert not os.path.isabs(rel)
            print(json.dumps({"i": 1, "checkpoint": rel}), flush=True)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: relck
            trial:
              command: ["{PY}", "relck.py"]
            param_space: {{x: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.tune("run", "exp.yaml", timeout=120)
        (t,) = self.trials("relck")
        self.assertEqual(t["status"], "TERMINATED", t.get("error"))
        self.assertEqual([r.get("checkpoint_dir_name") for r in self.results("relck", t)],
                         ["checkpoint_000001"])
        with open(os.path.join(self.exp_dir("relck"), t["trial_name"], "checkpoint_000001",
                               "state.json")) as f:
            self.assertEqual(json.load(f), {"i": 1})

    def test_a_checkpoint_whose_agent_is_killed_while_it_copies_it_is_moved_in_all_the_same(self):
        # The trial kills the host's agent once its copy of the checkpoint is under way (its
        # child doing the copy dies with it): the driver starts a new agent and moves the
        # checkpoint in with the host's shell instead.
        log = self.agent_gone_while_it_copies("SIGKILL")
        self.assertNotIn("has said nothing", log)

    def test_a_checkpoint_whose_agent_is_stopped_while_it_copies_it_is_moved_in_all_the_same(self):
        # The same with the agent stopped (SIGSTOP): silent for 30 s with a request unanswered,
        # it is ended and the checkpoint moved in with the host's shell (nothing hangs).
        log = self.agent_gone_while_it_copies("SIGSTOP")
        self.assertIn("its agent has said nothing for 30 s: its 1 file operation(s) are done in "
                      "the host's shell", log)

    def agent_gone_while_it_copies(self, sig):
        # The worker's experiment dir is a tmpfs of its own: the host's agent copies the 512 MiB
        # checkpoint the trial wrote in /tmp. Once the copy is under way (its .partial dir is
        # there) the trial sends `sig` to the agent, then prints one more row and ends.
        if self.hosts["mode"] != "netns":
            self.skipTest("needs netns mode (root) to give a worker a filesystem of its own")
        self.write("agentgone.py", """
            import json, os, signal, tempfile, time
            d = tempfile.mkdtemp(prefix="PREFIX")
            block = bytes(range(256)) * 4096
            with open(os.path.join(d, "weights.bin"), "wb") as f:
                for _ in range(512):
                    f.write(block)
            print(json.dumps({"i": 1, "checkpoint": d}), flush=True)
            partial = os.path.join(os.environ["TUNE_TRIAL_DIR"], "checkpoint_000001.partial")
            until = time.time() + 20
            while not os.path.exists(partial) and time.time() < until:
                time.sleep(0.002)
            def parent(pid):
                with open("/proc/%d/stat" % pid) as f:
                    return int(f.read().rsplit(")", 1)[1].split()[1])
            agent = parent(os.getppid())  # (the supervisor's parent)
            with open("/proc/%d/cmdline" % agent, "rb") as f:
                assert b"tune-agent" in f.read()
            os.kill(agent, signal.SIG)
            print(json.dumps({"i": 2, "copying": os.path.exists(partial)}), flush=True)
            """.replace("PREFIX", "tune-agentgone-%s-" % os.path.basename(self.dir))
               .replace("SIG", sig))
        self.write("exp.yaml", textwrap.dedent(f"""
            name: agentgone
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'agentgone.py')}"]
            param_space: {{x: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        prefix = "/tmp/tune-agentgone-%s-" % os.path.basename(self.dir)
        with self.worker_tmpfs("agentgone", "1200m", prefix):
            self.tune("run", "exp.yaml", check=0, timeout=300)
            (t,) = self.trials("agentgone")
            self.assertEqual(t["status"], "TERMINATED")
            rows = self.results("agentgone", t)
            self.assertEqual([r.get("checkpoint_dir_name") for r in rows],
                             ["checkpoint_000001", None])
            self.assertTrue(rows[1]["copying"], "the agent was signalled after its copy ended")
            with open(os.path.join(self.exp_dir("agentgone"), "tune.log")) as f:
                log = f.read()
            self.assertIn("starting a new one", log)
            self.assertIn("1 file operations by agents, 1 in hosts' shells", log)
            head = os.path.join(self.exp_dir("agentgone"), t["trial_name"], "checkpoint_000001")
            self.assertEqual(os.path.getsize(os.path.join(head, "weights.bin")), 512 << 20)
            block = bytes(range(256)) * 4096
            with open(os.path.join(head, "weights.bin"), "rb") as f:
                for _ in range(512):
                    self.assertEqual(f.read(len(block)), block)
        self.assertFalse(glob.glob(prefix + "*"))
        return log

    def test_a_driver_killed_right_after_a_remote_launch_finds_the_attempt_on_resume(self):
        # kill -9 as soon as the remote supervisor runs (before any state write could name the
        # host): the resume must re-attach attempt 1 on the worker, not start attempt 2 beside it.
        self.write("exp.yaml", textwrap.dedent(f"""
            name: early
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space: {{x: {{grid_search: [1]}}, steps: 20, sleep: 0.1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        def supervisors():
            return self.remote_supervisors("early")
        deadline = time.time() + 60
        while not supervisors() and time.time() < deadline:
            time.sleep(0.005)
        run.kill()
        run.communicate()
        self.assertTrue(supervisors(), "the remote attempt runs on without its driver")
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        t = self.trials("early")[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1))
        self.assertEqual(self.iterations("early", t), list(range(1, 21)))
        with open(os.path.join(self.exp_dir("early"), "tune.log")) as f:
            self.assertIn("re-attached", f.read())

    def test_a_name_reused_where_the_worker_kept_the_trial_dirs_reads_only_new_output(self):
        # The head's experiment dir removed and the worker's kept: a new run of the same name
        # appends to the old trials' stdout.log there. A driver killed before its state said
        # where the new attempts' output starts has the head's size there, 0: on resume the old
        # rows must not be taken for new ones, nor the old start for the new attempt's.
        self.write("reused.py", """
            import time, tune_trial
            cfg = tune_trial.config()
            for i in range(1, 11):
                time.sleep(0.1 if cfg["x"] == 1 else 0.4)
                tune_trial.report({"step": i, "wall": time.time()})
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: reused
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'reused.py')}"]
            param_space: {{x: {{grid_search: [1, 2]}}}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.tune("run", "exp.yaml", check=0, timeout=300)
        shutil.rmtree(self.exp_dir("reused"))
        began = time.time()
        run = self.start_tune("run", "exp.yaml")
        deadline = time.time() + 60
        while len(self.remote_supervisors("reused", attempt=1)) < 2 and time.time() < deadline:
            time.sleep(0.005)
        run.kill()
        run.communicate()
        time.sleep(2)  # x=1 ends while no driver runs (found by its exit record); x=2 runs on
        # What a kill before the first state write after the launches leaves, made certain: the
        # offsets the state has for them are the head's sizes, 0.
        for f in (os.path.join(self.exp_dir("reused"), "experiment_state.json"),
                  os.path.join(self.exp_dir("reused"), ".tune", "state.journal")):
            if os.path.exists(f):
                with open(f) as fh:
                    text = fh.read()
                with open(f, "w") as fh:
                    fh.write(re.sub(r'"stdout_offset":\s*\d+', '"stdout_offset":0', text))
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        trials = self.trials("reused")
        self.assertEqual(len(trials), 2)
        for t in trials:
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1))
            rows = self.results("reused", t)
            self.assertEqual([r["step"] for r in rows], list(range(1, 11)), t["trial_name"])
            self.assertTrue(all(r["wall"] >= began and r["timestamp"] >= began - 1 for r in rows),
                            rows)
            self.assertLess(rows[0]["time_this_iter_s"], 2, rows[0])

    def test_an_attempt_the_hosts_log_lost_is_found_by_its_dir_lock_on_resume(self):
        # The host's attempt log emptied while no driver ran (or the attempt was started by an
        # older tune, whose supervisors wrote none): the supervisor still holds the trial dir's
        # lock there, and the resume re-attaches to it instead of starting attempt 2 beside it.
        self.write("exp.yaml", textwrap.dedent(f"""
            name: lostlog
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space: {{x: {{grid_search: [1]}}, steps: 30, sleep: 0.1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: [t.get("iteration", 0) >= 2 for t in self.trials("lostlog")] == [True],
                      timeout=60, what="the trial's second result")
        run.kill()
        run.communicate()
        sups = self.remote_supervisors("lostlog")
        self.assertEqual(len(sups), 1)
        for log in glob.glob(os.path.join(self.worker_dir(0, "lostlog", ".tune"), "attempts-*.log")):
            open(log, "w").close()
        self.assertEqual(self.remote_supervisors("lostlog"), [])
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        t = self.trials("lostlog")[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1))
        self.assertEqual(self.iterations("lostlog", t), list(range(1, 31)))
        with open(os.path.join(self.exp_dir("lostlog"), "tune.log")) as f:
            self.assertIn("is not in %s's attempt log, but supervisor %s holds its dir there"
                          % (self.name(0), sups[0]), f.read())

    def test_a_forged_log_line_naming_another_supervisor_is_not_believed_on_resume(self):
        # Anyone of the user can append to the host's attempt log: a line naming trial B's
        # attempt with trial A's live supervisor (its true start time) must not make the resume
        # attach B to A's supervisor (a later stop of B would stop A); B is found by its lock.
        self.write("exp.yaml", textwrap.dedent(f"""
            name: forged
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space: {{x: {{grid_search: [1, 2]}}, steps: 30, sleep: 0.1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: [t.get("iteration", 0) >= 2 for t in self.trials("forged")]
                      == [True, True], timeout=60, what="both trials' second results")
        run.kill()
        run.communicate()
        a, b = sorted(t["trial_name"] for t in self.trials("forged"))
        logs = glob.glob(os.path.join(self.worker_dir(0, "forged", ".tune"), "attempts-*.log"))
        self.assertEqual(len(logs), 1)
        with open(logs[0]) as f:
            lines = [json.loads(l) for l in f if '"supervising"' in l]
        line_a = [l for l in lines if l["trial"] == a][-1]
        with open(logs[0], "a") as f:
            f.write(json.dumps(dict(line_a, trial=b), separators=(",", ":")) + "\n")
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        for t in self.trials("forged"):
            self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1), t["trial_name"])
            self.assertEqual(self.iterations("forged", t), list(range(1, 31)))
        with open(os.path.join(self.exp_dir("forged"), "tune.log")) as f:
            log = f.read()
        self.assertIn("names supervisor %d for %s attempt 1, but another process holds the "
                      "trial dir: not believed" % (line_a["supervisor"], b), log)
        self.assertEqual(self.remote_supervisors("forged"), [])

    def test_a_forged_log_line_naming_another_experiments_dir_never_stops_its_supervisor(self):
        # A line in one experiment's host log naming a trial "../victim/<its trial>" and the
        # victim experiment's live supervisor: that supervisor does hold that dir, but it is no
        # dir of this experiment, so a resume must not stop it as a stray. (Before, it did: the
        # victim's trial was stopped.)
        self.write("victim.yaml", textwrap.dedent(f"""
            name: victim
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space: {{x: 1, steps: 150, sleep: 0.1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        self.write("forger.yaml", textwrap.dedent(f"""
            name: forger
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space: {{x: 1, steps: 30, sleep: 0.1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        victim = self.start_tune("run", "victim.yaml")
        forger = self.start_tune("run", "forger.yaml")
        self.wait_for(lambda: all(len(self.remote_supervisors(e)) == 1 and any(
            t.get("iteration", 0) >= 2 for t in self.trials(e)) for e in ("victim", "forger")),
            timeout=60, what="both experiments' trials running on the worker")
        forger.kill()
        forger.communicate()
        (sup,) = self.remote_supervisors("victim")
        trial = self.trials("victim")[0]["trial_name"]
        with open(os.path.join(self.worker_dir(0, "victim", ".tune"),
                               glob.glob(os.path.join(self.worker_dir(0, "victim", ".tune"),
                                                      "attempts-*.log"))[0])) as f:
            line = [json.loads(l) for l in f if '"supervising"' in l][-1]
        (log,) = glob.glob(os.path.join(self.worker_dir(0, "forger", ".tune"), "attempts-*.log"))
        with open(log, "a") as f:
            f.write(json.dumps(dict(line, trial="../victim/" + trial), separators=(",", ":"))
                    + "\n")
        self.tune("run", "forger.yaml", "--resume=auto", check=0, timeout=300)
        self.assertEqual(self.remote_supervisors("victim"), [sup])
        out, err = victim.communicate(timeout=120)
        self.assertEqual(victim.returncode, 0, err)
        t = self.trials("victim")[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1))
        self.assertEqual(self.iterations("victim", t), list(range(1, 151)))

    ADOPTING_TRIAL = """
        import json, os, time
        d = os.environ["TUNE_TRIAL_DIR"]
        ck = os.environ.get("TUNE_RESTORE_CHECKPOINT")
        start = json.load(open(os.path.join(ck, "state.json")))["i"] if ck else 0
        for i in range(start + 1, 11):
            result = {"i": i, "loss": 1.0 / i}
            if i == 2:
                os.makedirs(os.path.join(d, "ck"), exist_ok=True)
                with open(os.path.join(d, "ck", "state.json"), "w") as f:
                    json.dump({"i": i}, f)
                result["checkpoint"] = os.path.join(d, "ck")
            print(json.dumps(result), flush=True)
            if i == 4:  # the rest once the test has killed the driver
                while not os.path.exists(os.path.join(d, "go")):
                    time.sleep(0.05)
            time.sleep(0.05)
        """

    def kill_while_adopting(self, name):
        # The driver read the checkpoint's line and wrote the state (which names it as being
        # taken), but had not yet heard that the worker moved the dir in when it was killed (a
        # delay only tests can set holds the answer back).
        self.write("adopting_trial.py", self.ADOPTING_TRIAL)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: {name}
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'adopting_trial.py')}"]
            param_space: {{x: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        env = dict(self.env, TUNE_TEST_ADOPT_DELAY_S="60", TUNE_GLOBAL_CHECKPOINT_S="0.1")
        run = self.start_tune("run", "exp.yaml", env=env)
        self.wait_for(lambda: len(self.trials(name)) == 1 and
                      self.trials(name)[0]["checkpoint_seq"] == 1 and
                      self.trials(name)[0]["iteration"] >= 4, timeout=60,
                      what="the checkpoint counted")
        run.kill()
        run.communicate()
        t = self.trials(name)[0]
        self.assertEqual(t["checkpoints"], [])
        self.assertEqual([a["seq"] for a in t.get("adopting", [])], [1])
        return t

    def check_adopted(self, name, attempt, how):
        t = self.trials(name)[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", attempt))
        rows = self.results(name, t)
        self.assertEqual([r["training_iteration"] for r in rows], list(range(1, 11)))
        self.assertEqual([r["i"] for r in rows], list(range(1, 11)))
        self.assertEqual([(c["dir"], c["iteration"]) for c in t["checkpoints"]],
                         [("checkpoint_000001", 2)])
        with open(os.path.join(self.exp_dir(name), t["trial_name"], "checkpoint_000001",
                               "state.json")) as f:
            self.assertEqual(json.load(f), {"i": 2})
        with open(os.path.join(self.exp_dir(name), "tune.log")) as f:
            self.assertIn("checkpoint_000001 was being taken when the driver stopped: " + how,
                          f.read())

    def test_a_checkpoint_being_adopted_on_the_worker_when_the_driver_is_killed_is_kept(self):
        # The resume asks the worker again, which finds it taken, and it reaches the head.
        t = self.kill_while_adopting("adopting")
        open(os.path.join(self.worker_dir(0, "adopting", t["trial_name"]), "go"), "w").close()
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        self.check_adopted("adopting", 1, "taking it again from")

    def test_the_same_when_the_attempt_is_gone_too_brings_it_from_the_worker(self):
        # The attempt is killed with the driver: the resume brings the checkpoint from the
        # worker before the trial restarts, and the restart goes on from it.
        t = self.kill_while_adopting("adoptgone")
        for pid in self.remote_supervisors("adoptgone"):
            os.kill(int(pid), 9)
        subprocess.run(["pkill", "-9", "-f", os.path.join(self.dir, "adopting_trial.py")])
        open(os.path.join(self.worker_dir(0, "adoptgone", t["trial_name"]), "go"), "w").close()
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        self.check_adopted("adoptgone", 2, "brought from")

    def test_results_read_after_a_reattach_keep_the_times_the_worker_noted(self):
        self.write("exp.yaml", textwrap.dedent(f"""
            name: times
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space: {{x: 0.5, steps: 14, sleep: 0.3}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("times")) == 1 and len(
            self.results("times", self.trials("times")[0])) >= 2, timeout=60, what="2 results")
        run.kill()
        run.communicate()
        time.sleep(3)  # ~10 results are written on the worker while no driver runs
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        t = self.trials("times")[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 1))
        rows = self.results("times", t)
        self.assertEqual([r["step"] for r in rows], list(range(1, 15)))
        self.check_arrival_times(rows, gap=0.3, outage=3)

    def test_checkpoints_left_on_a_worker_by_a_killed_driver_are_brought_back_on_resume(self):
        # The driver and the attempt are both killed (-9) after checkpoints were saved on the
        # worker and before any sync brought them to the head: the resume brings them over
        # first and restarts from the latest, not from an earlier one (here: from scratch).
        trial = os.path.join(self.dir, "leftck_trial.py")  # its own name, for pkill
        shutil.copy(TRIAL, trial)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: leftck
            trial:
              command: ["{PY}", "{trial}"]
            param_space: {{x: 0.5, steps: 14, sleep: 0.2}}
            checkpoint_config: {{num_to_keep: 2}}
            sync_config: {{sync_period: 600, sync_on_checkpoint: false}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("leftck")) == 1 and len(
            self.trials("leftck")[0]["checkpoints"]) >= 2, timeout=60,
            what="2 checkpoints in the state")
        run.kill()
        run.communicate()
        for pid in self.remote_supervisors("leftck"):
            os.kill(int(pid), 9)
        subprocess.run(["pkill", "-9", "-f", trial])
        t = self.trials("leftck")[0]
        head = os.path.join(self.exp_dir("leftck"), t["trial_name"])
        latest = t["checkpoints"][-1]
        self.assertFalse(os.path.isdir(os.path.join(head, latest["dir"])),
                         "the checkpoint reached the head before the kill: nothing to test")
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        t = self.trials("leftck")[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 2))
        rows = self.results("leftck", t)
        self.assertEqual([r["step"] for r in rows], list(range(1, 15)))
        restarts = [r["training_iteration"] for r in rows if r["iterations_since_restore"] == 1]
        self.assertEqual(restarts, [1, latest["iteration"] + 1])
        with open(os.path.join(self.exp_dir("leftck"), "tune.log")) as f:
            self.assertIn("%s brought from" % latest["dir"], f.read())
        for c in t["checkpoints"]:
            self.assertTrue(os.path.isfile(os.path.join(head, c["dir"], "state.json")))

    def test_a_reattached_attempt_that_fails_restarts_from_the_checkpoints_left_on_its_worker(
            self):
        # The driver is killed (-9) after the trial's second checkpoint was saved on the worker
        # and before any sync brought it to the head; the attempt goes on and fails while no
        # driver runs. The resumed driver re-attaches to it: its end-of-trial sync must bring
        # the checkpoints the state names, so that the retry restarts from the latest (once
        # from scratch: those never reached the head and were forgotten).
        self.write("failck.py", """
            import json, os, sys, tempfile, time, tune_trial as tt
            ck = tt.get_checkpoint()
            i = json.load(open(os.path.join(ck, "s.json")))["i"] if ck else 0
            while i < 5:
                i += 1
                d = tempfile.mkdtemp()
                json.dump({"i": i}, open(os.path.join(d, "s.json"), "w"))
                tt.report({"i": i}, checkpoint_dir=d)
                if i == 2 and not ck:
                    while not os.path.exists(%r):  # the driver is killed meanwhile
                        time.sleep(0.05)
                    sys.exit(1)
            """ % os.path.join(self.dir, "go"))
        self.write("exp.yaml", textwrap.dedent(f"""
            name: failck
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'failck.py')}"]
            param_space: {{x: 1}}
            failure_config: {{max_failures: 1}}
            sync_config: {{sync_period: 600, sync_on_checkpoint: false}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("failck")) == 1 and len(
            self.trials("failck")[0]["checkpoints"]) == 2, timeout=60,
            what="2 checkpoints in the state")
        run.kill()
        run.communicate()
        t = self.trials("failck")[0]
        head = os.path.join(self.exp_dir("failck"), t["trial_name"])
        self.assertFalse(os.path.isdir(os.path.join(head, t["checkpoints"][-1]["dir"])),
                         "the checkpoint reached the head before the kill: nothing to test")
        with open(os.path.join(self.dir, "go"), "w"):
            pass
        self.wait_for(lambda: not self.remote_supervisors("failck"), timeout=30,
                      what="the attempt's end, recorded on the worker")
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=120)
        with open(os.path.join(self.exp_dir("failck"), "tune.log")) as f:
            log = f.read()
        t = self.trials("failck")[0]
        self.assertEqual((t["status"], t["attempt"], t["failures"]), ("TERMINATED", 2, 1), log)
        rows = self.results("failck", t)
        self.assertEqual([r["i"] for r in rows], [1, 2, 3, 4, 5], log)
        restarts = [r["training_iteration"] for r in rows if r["iterations_since_restore"] == 1]
        self.assertEqual(restarts, [1, 3], log)
        self.assertNotIn("never reached the head", log)

    def test_checkpoints_attempts_reported_while_no_driver_ran_are_kept_after_they_fail(self):
        # Two trials report their first checkpoint and fail only after the driver was killed
        # (-9). The resumed driver re-attaches to both ended attempts and handles them in launch
        # order: the second one's output waits until the first one's exit is handled (slow: a
        # 40 MB file to sync), by which time the second one's exit has come too. Its checkpoint
        # must still be adopted on the worker and brought to the head, so that its retry restarts
        # from it (before: "internal: no remote run", and a restart from scratch).
        self.write("late.py", """
            import json, os, sys, tempfile, time, tune_trial as tt
            ck = tt.get_checkpoint()
            i = json.load(open(os.path.join(ck, "s.json")))["i"] if ck else 0
            if not ck:
                while not os.path.exists(%r):  # the driver is killed meanwhile
                    time.sleep(0.05)
                if tt.config()["x"] == 1:
                    with open(os.path.join(os.environ["TUNE_TRIAL_DIR"], "big.bin"), "wb") as f:
                        f.write(os.urandom(40 << 20))
            while i < 3:
                i += 1
                d = tempfile.mkdtemp()
                json.dump({"i": i}, open(os.path.join(d, "s.json"), "w"))
                tt.report({"i": i}, checkpoint_dir=d)
                if i == 1 and not ck:
                    sys.exit(1)
            """ % os.path.join(self.dir, "go"))
        self.write("exp.yaml", textwrap.dedent(f"""
            name: late
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'late.py')}"]
            param_space: {{x: {{grid_search: [1, 2]}}}}
            failure_config: {{max_failures: 1}}
            hosts:
            """) + self.host_lines((0,), cpus=2) + "\n")
        run = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.remote_supervisors("late")) == 2, timeout=60,
                      what="both trials running on the worker")
        run.kill()
        run.communicate()
        with open(os.path.join(self.dir, "go"), "w"):
            pass
        # they report, and fail, while no driver runs
        self.wait_for(lambda: not self.remote_supervisors("late"), timeout=60,
                      what="the attempts' ends, recorded on the worker")
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=120)
        with open(os.path.join(self.exp_dir("late"), "tune.log")) as f:
            log = f.read()
        self.assertNotIn("no remote run", log)
        for t in self.trials("late"):
            self.assertEqual((t["status"], t["attempt"], t["failures"]), ("TERMINATED", 2, 1),
                             log)
            rows = self.results("late", t)
            self.assertEqual([r["i"] for r in rows], [1, 2, 3], log)
            restarts = [r["training_iteration"] for r in rows if r["iterations_since_restore"] == 1]
            self.assertEqual(restarts, [1, 2], log)

    def test_a_resume_ends_an_attempt_superseded_while_its_host_was_cut_off(self):
        # Attempt 1 runs on worker1; its link is cut past host_timeout_s, so the trial is
        # re-queued on worker2 (attempt 2); the driver is killed; the link heals. Attempt 1 still
        # runs (its orphan timeout is long) and the resumed driver's lease would keep it alive:
        # the resume must ask worker1 and end it before anything starts.
        self.write("slowfirst.py", """
            import json, os, tempfile, time, tune_trial as tt
            ck = tt.get_checkpoint()
            i = json.load(open(os.path.join(ck, "s.json")))["i"] if ck else 0
            while i < 200:
                time.sleep(0.01 if ck else 0.2)  # attempt 1 would run ~40 s, a restart ~2 s
                i += 1
                d = None
                if i % 5 == 0:
                    d = tempfile.mkdtemp()
                    json.dump({"i": i}, open(os.path.join(d, "s.json"), "w"))
                tt.report({"i": i}, checkpoint_dir=d)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: strays
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'slowfirst.py')}"]
            param_space: {{x: 1}}
            host_timeout_s: 3
            orphan_timeout_s: 600
            checkpoint_config: {{num_to_keep: 2}}
            sync_config: {{sync_period: 1}}
            hosts:
            """) + self.host_lines((0, 1), cpus=1) + "\n")
        w1, w2 = self.name(0), self.name(1)
        run = self.start_tune("run", "exp.yaml")

        def first_attempt():
            return self.remote_supervisors("strays", attempt=1)
        try:
            def on_head():
                t = self.trials("strays")
                return t and t[0]["host"] == w1 and t[0]["checkpoints"] and os.path.isdir(
                    os.path.join(self.exp_dir("strays"), t[0]["trial_name"],
                                 t[0]["checkpoints"][0]["dir"]))
            self.wait_for(on_head, timeout=60,
                          what="attempt 1 on worker1 with a checkpoint on the head")
            self.cut(1)
            self.wait_for(lambda: self.trials("strays")[0]["host"] == w2, timeout=60,
                          what="the trial re-queued on worker2")
            run.kill()
            run.communicate()
        finally:
            self.cut(1, "heal")
        self.assertTrue(first_attempt(), "attempt 1 runs on worker1 without its driver")
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        self.assertEqual(first_attempt(), [], "attempt 1 outlived the resumed run")
        with open(os.path.join(self.exp_dir("strays"), "tune.log")) as f:
            self.assertRegex(f.read(), r"attempt 1 still runs on %s but is not the trial's "
                             r"current attempt" % re.escape(w1))
        t = self.trials("strays")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual([r["i"] for r in self.results("strays", t)], list(range(1, 201)))

    def test_a_checkpoint_reaches_the_head_while_its_trial_prints_non_stop(self):
        # Output at every poll once starved the periodic syncs: a checkpoint reached the head
        # only when the trial ended. Here the trial prints every 20 ms for up to 60 s.
        self.write("chatty.py", """
            import os, tempfile, time, tune_trial as tt
            d = tempfile.mkdtemp()
            open(os.path.join(d, "w.bin"), "wb").write(b"x" * 1000)
            tt.report({"i": 1}, checkpoint_dir=d)
            for i in range(2, 3000):
                time.sleep(0.02)
                tt.report({"i": i})
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: chatty
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'chatty.py')}"]
            param_space: {{x: 1}}
            sync_config: {{sync_period: 1}}
            hosts:
            """) + self.host_lines((0,)) + "\n")
        run = self.start_tune("run", "exp.yaml")
        try:
            self.wait_for(lambda: self.trials("chatty") and os.path.isdir(os.path.join(
                self.exp_dir("chatty"), self.trials("chatty")[0]["trial_name"],
                "checkpoint_000001")), timeout=30, what="checkpoint_000001 on the head")
            self.assertEqual(run.poll(), None, "the run ended: the trial did not print non-stop")
        finally:
            run.send_signal(signal.SIGINT)
            run.communicate(timeout=120)

    def test_the_workdir_goes_to_the_worker_and_again_on_resume_only_if_changed(self):
        proj = os.path.join(self.dir, "proj")
        os.makedirs(os.path.join(proj, ".git"))
        self.write("proj/.git/HEAD", "ref: refs/heads/main\n")
        self.write("proj/helper.py", "VERSION = 1\n")
        with open(os.path.join(proj, "big.bin"), "wb") as f:
            f.truncate(101 << 20)  # sparse: over the 100 MiB limit, costs no disk
        self.write("proj/train.py", """
            import json, os, tempfile, time, tune_trial as tt
            import helper
            ck = tt.get_checkpoint()
            i = json.load(open(os.path.join(ck, "s.json")))["i"] if ck else 0
            while i < 40:
                time.sleep(0.2)
                i += 1
                d = None
                if i % 3 == 0:
                    d = tempfile.mkdtemp()
                    json.dump({"i": i}, open(os.path.join(d, "s.json"), "w"))
                tt.report({"i": i, "version": helper.VERSION, "cwd": os.getcwd(),
                           "git": os.path.exists(".git"), "big": os.path.exists("big.bin")},
                          checkpoint_dir=d)
            """)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: wdexp
            trial:
              command: ["{PY}", "train.py"]
              workdir: proj
            param_space: {{x: 1}}
            checkpoint_config: {{num_to_keep: 2}}
            hosts:
            """) + self.host_lines((0,)) + "\n")

        def kill_all_after(rows):
            run = self.start_tune(*args)
            self.wait_for(lambda: self.trials("wdexp") and len(
                self.results("wdexp", self.trials("wdexp")[0])) >= rows, timeout=60,
                what="%d results" % rows)
            run.kill()
            run.communicate()
            sup = self.remote_supervisors("wdexp")
            for pid in sup:  # the attempt's session: its supervisor and trial
                subprocess.run(["pkill", "-9", "-s", pid])
        args = ("run", "exp.yaml")
        kill_all_after(4)
        args = ("run", "exp.yaml", "--resume=auto")
        kill_all_after(10)
        self.write("proj/helper.py", "VERSION = 2\n")
        self.tune("run", "exp.yaml", "--resume=auto", check=0, timeout=300)
        t = self.trials("wdexp")[0]
        self.assertEqual((t["status"], t["attempt"]), ("TERMINATED", 3))
        rows = self.results("wdexp", t)
        self.assertEqual([r["i"] for r in rows], list(range(1, 41)))
        host = self.hosts["hosts"][0]
        self.assertEqual({r["cwd"] for r in rows},
                         {os.path.join(host["storage_path"], "wdexp", ".workdir")})
        self.assertEqual({(r["git"], r["big"]) for r in rows}, {(False, False)})
        # (an attempt restarted from scratch drops the rows before it: count from the last)
        last = max(k for k, r in enumerate(rows) if r["iterations_since_restore"] == 1)
        self.assertGreater(last, 0)
        self.assertEqual({r["version"] for r in rows[:last]}, {1})  # attempts 1 and 2
        self.assertEqual({r["version"] for r in rows[last:]}, {2})  # attempt 3, after the edit
        with open(os.path.join(self.exp_dir("wdexp"), "tune.log")) as f:
            log = f.read()
        copied = re.findall(r"copied \S*/proj to \S*/wdexp/\.workdir .*", log)
        self.assertEqual(len(copied), 2, log)  # the first run, and the resume after the change
        self.assertIn("left out: .git, big.bin (105.9 MB)", copied[0])
        self.assertEqual(log.count("is current: not copied again"), 1)


    # Pause and exploit with trials spread over the head and two workers: a trial goes on from
    # its own (pause) or its donor's (exploit) checkpoint on whichever host runs it next.
    def hosts_block(self):
        return "hosts:\n  - local: {cpus: 1}\n" + self.host_lines(cpus=1) + "\n"

    def test_pbt_exploits_donor_checkpoints_across_hosts(self):
        self.write("lineage.py", LINEAGE_TRIAL)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: pbtssh
            trial: {{command: ["{PY}", "lineage.py"], env: {{PYTHONUNBUFFERED: "1"}}}}
            param_space: {{q: {{grid_search: [0.4, 0.9, 0.1, 0.7, 0.3, 0.6]}}}}
            metric: val
            mode: max
            seed: 5
            checkpoint_config: {{num_to_keep: 2}}
            sync_config: {{sync_period: 1}}
            scheduler: {{type: pbt, perturbation_interval: 3, quantile_fraction: 0.34,
                        hyperparam_mutations: {{q: {{uniform: [0.05, 2.0]}}}}}}
            """) + self.hosts_block())
        self.tune("run", "exp.yaml", "--quiet", check=0, timeout=300)
        with open(os.path.join(self.exp_dir("pbtssh"), "pbt_policy.jsonl")) as f:
            policy = [json.loads(line) for line in f]
        self.assertTrue(policy, "no exploit happened")
        trials = {t["trial_id"]: t for t in self.trials("pbtssh")}
        last = {}  # each trial's last exploit
        for line in policy:
            last[line["trial"]] = line
        hosts = set()
        for tid, t in trials.items():
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(t["iteration"], 12, t["trial_name"])
            # Each iteration at most once, in order; an exploit from a donor that was ahead
            # jumps to the donor's iteration (as Ray), leaving a gap, and one from a donor's
            # last checkpoint (12) leaves nothing more to run.
            its = self.iterations("pbtssh", t)
            self.assertEqual(its, sorted(set(its)), t["trial_name"])
            if last.get(tid, {}).get("donor_iteration") != 12:
                self.assertEqual(its[-1], 12, t["trial_name"])
            hosts |= {r["hostname"] for r in self.results("pbtssh", t)}
        self.assertGreater(len(hosts), 1, "every result came from one host: %s" % hosts)
        # Each trial's last exploit: the row after it was computed from the donor's checkpoint
        # at the donor's iteration (it came to this trial's host, wherever both ran).
        checked = 0
        for tid, line in last.items():
            k = line["donor_iteration"]
            after = [r for r in self.results("pbtssh", trials[tid]) if r["training_iteration"] > k]
            if not after:
                continue  # the donor's last checkpoint: the trial had nothing left to run
            checked += 1
            row = after[0]
            self.assertEqual(row["training_iteration"], k + 1, row)
            self.assertEqual(row.get("restored_from"), line["donor"], row)
            self.assertEqual(row.get("restored_i"), k, row)
            self.assertAlmostEqual(row["val"] - row["restored_val"],
                                   line["new_config"]["q"], places=9)  # with its new config
        self.assertGreater(checked, 0, policy)

    def test_hyperband_pauses_step_mode_trials_and_resumes_them_on_any_host(self):
        self.write("counter.py", COUNTER_TRAINABLE)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: hbssh
            trial: {{command: ["{PY}", "counter.py"], mode: step}}
            param_space: {{q: {{uniform: [0.1, 1.0]}}}}
            num_samples: 9
            seed: 7
            metric: score
            mode: max
            sync_config: {{sync_period: 1}}
            scheduler: {{type: hyperband, max_t: 9, reduction_factor: 3}}
            """) + self.hosts_block())
        self.tune("run", "exp.yaml", "--quiet", check=0, timeout=300)
        trials = self.trials("hbssh")
        self.assertEqual(len(trials), 9)
        went_on = 0
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            rows = self.results("hbssh", t)
            self.assertEqual([r["training_iteration"] for r in rows],
                             list(range(1, t["iteration"] + 1)), t["trial_name"])
            # No work lost or repeated across a pause: the trial's own counter is the iteration.
            self.assertEqual([r["i"] for r in rows], list(range(1, t["iteration"] + 1)))
            went_on += t["iteration"] > 3
        self.assertGreater(went_on, 0, "no trial went past its first rung")
        log = open(os.path.join(self.exp_dir("hbssh"), "tune.log")).read()
        self.assertIn("paused", log)


if __name__ == "__main__":
    unittest.main()
