"""Trials as Slurm jobs on a real one-machine Slurm cluster (scripts/test-slurm.sh brings it up
under a scratch dir and down again). Skipped (exit 77 from ctest's view) when Slurm is not
installed or the runner is not root.

TUNE_SLURM_SLOW=1 also runs the slow cases: 1-minute time limits and a job requeued by
`scontrol requeue` in one experiment, and a job requeued while no driver runs. (Slurm holds a
requeued job ~2 minutes in BeginTime; the tests let it start at once with `scontrol update
StartTime=now` once the state they check has been reached.)"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

from harness import PY, SOURCE, TUNE, TuneTest

TRIAL = os.path.join(SOURCE, "tests", "fixtures", "slurm_trial.py")
SCRIPT = os.path.join(SOURCE, "scripts", "test-slurm.sh")
CLUSTER = None  # the scratch dir of the cluster this run brought up


def slurm(*args, check=True):
    env = dict(os.environ, SLURM_CONF=os.path.join(CLUSTER, "slurm.conf"))
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60,
                          check=check).stdout


def jobs_named(prefix):
    """(id, state) of every job in the cluster whose name starts with `prefix`."""
    out = slurm("squeue", "-h", "-o", "%i|%T|%j")
    return [tuple(line.split("|")[:2]) for line in out.splitlines()
            if line.split("|")[2].startswith(prefix)]


def available():
    return os.geteuid() == 0 and subprocess.run(
        ["sh", "-c", "command -v sbatch && PATH=$PATH:/usr/sbin command -v slurmctld munged"],
        capture_output=True).returncode == 0


def setUpModule():
    global CLUSTER
    if not available():
        raise unittest.SkipTest("needs root and slurm-wlm + munge (scripts/setup.sh --test)")
    import tempfile
    CLUSTER = tempfile.mkdtemp(prefix="tune-slurm-")
    p = subprocess.run([SCRIPT, "up", CLUSTER], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError("scripts/test-slurm.sh up failed:\n" + p.stdout + p.stderr)


def tearDownModule():
    if CLUSTER:
        subprocess.run([SCRIPT, "down", CLUSTER], capture_output=True, timeout=120)
        subprocess.run(["rm", "-rf", CLUSTER])


class SlurmTest(TuneTest):
    def setUp(self):
        super().setUp()
        self.env["SLURM_CONF"] = os.path.join(CLUSTER, "slurm.conf")
        self.env["TUNE_SLURM_POLL_S"] = "1"
        # Every squeue the driver runs is logged (one per poll, never one per trial).
        shim = os.path.join(self.dir, "bin")
        os.makedirs(shim)
        self.squeue_log = os.path.join(self.dir, "squeue.calls")
        with open(os.path.join(shim, "squeue"), "w") as f:
            f.write('#!/bin/sh\necho "$(date +%%s.%%N) $*" >> %s\nexec /usr/bin/squeue "$@"\n'
                    % self.squeue_log)
        os.chmod(os.path.join(shim, "squeue"), 0o755)
        self.env["PATH"] = shim + ":" + self.env["PATH"]

    def tearDown(self):
        # No job of this test's experiments is left in the cluster (a job whose batch shell
        # ended is COMPLETING for a moment).
        deadline = time.time() + 20
        while jobs_named("tune-sl") and time.time() < deadline:
            time.sleep(0.5)
        left = jobs_named("tune-sl")
        for job, _ in left:
            slurm("scancel", job, check=False)
        super().tearDown()
        self.assertEqual(left, [], "jobs were left in Slurm")

    def experiment(self, name, trials, steps, sleep, extra="", slurm_opts="", partition="tune",
                   resources="{}"):
        xs = ", ".join(str(0.5 + i) for i in range(trials))
        self.write(name + ".yaml", f"""
            name: {name}
            trial:
              command: ["{PY}", "{TRIAL}"]
              resources: {resources}
            param_space:
              x: {{grid_search: [{xs}]}}
              steps: {steps}
              sleep: {sleep}
            hosts:
              - slurm: {{{"partition: %s, " % partition if partition else ""}max_jobs: 4{slurm_opts}}}
            {extra}
            """)

    def log(self, name):
        with open(os.path.join(self.exp_dir(name), "tune.log")) as f:
            return f.read()

    def check_complete(self, name, steps):
        for t in self.trials(name):
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            self.assertEqual(self.iterations(name, t), list(range(1, steps + 1)), t["trial_name"])
            steps_seen = [r["step"] for r in self.results(name, t)]
            self.assertEqual(steps_seen, list(range(1, steps + 1)), t["trial_name"])

    def job_of(self, name, trial):
        with open(os.path.join(self.exp_dir(name), ".tune", "slurm",
                               trial["trial_name"] + ".job")) as f:
            job, attempt = f.read().split()[:2]
        return job, int(attempt)

    def test_twenty_trials(self):
        self.experiment("sl20", 20, 4, 0.2, slurm_opts=", signal_grace_s: 10")
        started = time.time()
        self.tune("run", "sl20.yaml", check=0, timeout=300)
        took = time.time() - started
        self.check_complete("sl20", 4)
        jobs = set()
        for t in self.trials("sl20"):
            self.assertEqual(t["attempt"], 1)
            job, attempt = self.job_of("sl20", t)
            self.assertEqual(attempt, 1)
            jobs.add(job)
            # The trial ran inside its own job: the job id it saw is the one tune recorded.
            self.assertEqual({r["job"] for r in self.results("sl20", t)}, {job})
            self.assertTrue(os.path.exists(os.path.join(
                self.exp_dir("sl20"), t["trial_name"], "slurm-%s.out" % job)))
        self.assertEqual(len(jobs), 20)
        # max_jobs 4: never more than 4 of them submitted at once, as the log's order shows.
        live, most = set(), 0
        for line in self.log("sl20").splitlines():
            m = re.search(r"trial (\S+) attempt 1: slurm job", line)
            if m:
                live.add(m.group(1))
                most = max(most, len(live))
            m = re.search(r"trial (\S+) (terminated|TERMINATED)", line)
            if m:
                live.discard(m.group(1))
        self.assertLessEqual(most, 4)
        # One squeue per poll (1 s here) for all 20 trials, not one per trial.
        with open(self.squeue_log) as f:
            calls = len(f.readlines())
        self.assertGreater(calls, 0)
        self.assertLessEqual(calls, took / 1.0 + 3, "more than one squeue per poll")

    def test_status_shows_job_and_state(self):
        self.experiment("slst", 2, 300, 0.1)
        p = self.start_tune("run", "slst.yaml")
        try:
            self.wait_for(lambda: len(jobs_named("tune-slst-")) == 2 and all(
                s == "RUNNING" for _, s in jobs_named("tune-slst-")), what="jobs running")
            out = self.tune("status", "slst", check=0).stdout
            for job, _ in jobs_named("tune-slst-"):
                self.assertRegex(out, r"%s\s+RUNNING" % job)
        finally:
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=60)

    def test_ctrl_c_leaves_no_job(self):
        self.experiment("slint", 6, 300, 0.1)
        p = self.start_tune("run", "slint.yaml")
        self.wait_for(lambda: sum(1 for _, s in jobs_named("tune-slint-") if s == "RUNNING") >= 2,
                      what="jobs running")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.wait_for(lambda: jobs_named("tune-slint-") == [], timeout=30, what="jobs gone")
        for t in self.trials("slint"):
            self.assertEqual(t["status"], "PENDING")
            self.assertEqual(t["failures"], 0)

    def test_sigkill_driver_then_resume_reattaches_by_job_id(self):
        self.experiment("slkill", 2, 40, 0.2)
        p = self.start_tune("run", "slkill.yaml")
        self.wait_for(lambda: len(self.trials("slkill")) == 2 and all(
            os.path.getsize(os.path.join(self.exp_dir("slkill"), t["trial_name"], "result.json"))
            > 0 for t in self.trials("slkill")), what="both trials reporting")
        jobs_before = {t["trial_name"]: self.job_of("slkill", t) for t in self.trials("slkill")}
        p.kill()
        p.communicate()
        # The jobs run on without a driver.
        self.assertEqual(sorted(j for j, s in jobs_named("tune-slkill-") if s == "RUNNING"),
                         sorted(j for j, _ in jobs_before.values()))
        time.sleep(2)
        self.tune("run", "slkill.yaml", "--resume=auto", check=0, timeout=120)
        self.check_complete("slkill", 40)
        log = self.log("slkill")
        for t in self.trials("slkill"):
            self.assertEqual(t["attempt"], 1, "restarted rather than re-attached")
            job, _ = jobs_before[t["trial_name"]]
            self.assertIn("re-attached to slurm job " + job, log)
            self.assertEqual({r["job"] for r in self.results("slkill", t)}, {job})

    def test_forged_job_file_never_cancels_a_foreign_job(self):
        # A job of the same user that tune did not submit (another name), running.
        foreign = slurm("sbatch", "--parsable", "--job-name=not-tune-sleep", "--output=/dev/null",
                        "--wrap", "sleep 300").strip().split(";")[0]
        try:
            self.experiment("slforge", 1, 300, 0.1)
            p = self.start_tune("run", "slforge.yaml")
            self.addCleanup(lambda: p.poll() is None and (p.kill(), p.communicate()))
            # The job id reaches the experiment state, not only .tune/slurm.
            self.wait_for(lambda: any(t.get("job_id") for t in self.trials("slforge")),
                          what="the job id in the state")
            t = self.trials("slforge")[0]
            job, _ = self.job_of("slforge", t)
            self.assertEqual(t["job_id"], job)
            p.kill()
            p.communicate()
            # Job files forged to name the foreign job: the trial's own and an unknown trial's
            # (which a resume would end as a stray).
            sdir = os.path.join(self.exp_dir("slforge"), ".tune", "slurm")
            for trial in (t["trial_name"], "trial_99999_x=1"):
                with open(os.path.join(sdir, trial + ".job"), "w") as f:
                    f.write("%s 1\n" % foreign)
            p = self.start_tune("run", "slforge.yaml", "--resume=auto")
            self.wait_for(lambda: "re-attached to slurm job " + job in self.log("slforge"),
                          what="re-attached")
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 130, err)
            self.wait_for(lambda: jobs_named("tune-slforge-") == [], what="tune's job gone")
            states = dict(jobs_named("not-tune-sleep"))
            self.assertIn(states.get(foreign), ("RUNNING", "PENDING"), "the foreign job was touched")
            self.assertIn("names slurm job %s, but squeue lists it as 'not-tune-sleep'" % foreign,
                          self.log("slforge"))
        finally:
            slurm("scancel", foreign, check=False)

    def test_use_allocation_runs_trials_as_steps(self):
        # Outside an allocation: a config error at start, nothing submitted.
        self.experiment("slalloc", 3, 3, 0.3, partition=None,
                        slurm_opts=", use_allocation: true, cpus: 1")
        p = self.tune("run", "slalloc.yaml")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("not running inside a Slurm allocation", p.stderr)
        self.assertEqual(jobs_named("tune-slalloc-"), [])
        # The driver itself in an allocation of 2 CPUs (sbatch --wrap): each trial is a job step
        # of it, on a CPU of its own, two at a time.
        driver, out = self.sbatch_driver("slalloc")
        steps_seen = set()

        def driver_done():
            time.sleep(0.5)
            q = slurm("squeue", "-h", "-s", "-j", driver, "-o", "%i|%j", check=False)
            for line in q.splitlines():
                step, name = line.split("|", 1)
                if name.startswith("tune-slalloc-"):
                    steps_seen.add(step)
            return not slurm("squeue", "-h", "-j", driver, check=False).strip()
        try:
            self.wait_for(driver_done, timeout=120, what="the driver's allocation to end")
        finally:
            slurm("scancel", driver, check=False)
        with open(out) as f:
            log = f.read()
        self.assertNotIn("error", log.lower(), log)
        trials = self.trials("slalloc")
        self.assertEqual(len(trials), 3)
        step_ids = set()
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            self.assertEqual(t["failures"], 0, t["trial_name"])
            rows = self.results("slalloc", t)
            self.assertEqual([r["step"] for r in rows], [1, 2, 3], t["trial_name"])
            # It ran in the driver's allocation, as a numbered step of it (not the batch step).
            self.assertEqual({r["job"] for r in rows}, {driver}, t["trial_name"])
            step = {r["slurm_step"] for r in rows}
            self.assertEqual(len(step), 1, t["trial_name"])
            step = step.pop()
            self.assertTrue(step.isdigit(), step)
            step_ids.add(step)
        self.assertEqual(len(step_ids), 3, step_ids)  # one step per trial
        # squeue --steps listed them under the trial's job name while they ran.
        self.assertTrue(steps_seen, "no step of the driver's allocation was seen")
        self.assertTrue(all(s.startswith(driver + ".") for s in steps_seen), steps_seen)

        # Ctrl-C (SIGINT to the driver, which the batch shell exec'd) ends the steps, not the
        # allocation: the driver exits 130 on its own, no trial failed.
        self.experiment("slalint", 2, 300, 0.1, partition=None,
                        slurm_opts=", use_allocation: true, cpus: 1")
        driver, out = self.sbatch_driver("slalint")
        try:
            self.wait_for(lambda: len(self.trials("slalint")) == 2 and all(
                self.results("slalint", t) for t in self.trials("slalint")), timeout=60,
                what="both trials reporting")
            slurm("scancel", "--batch", "--signal=INT", driver)
            info = []

            def ended():
                time.sleep(0.3)
                text = slurm("scontrol", "show", "job", driver, check=False)
                info[:] = [text]
                return re.search(r"JobState=(FAILED|COMPLETED|CANCELLED)", text)
            self.wait_for(ended, timeout=60, what="the driver's allocation to end")
        finally:
            slurm("scancel", driver, check=False)
        self.assertIn("JobState=FAILED", info[0])  # not CANCELLED: nobody cancelled it
        self.assertIn("ExitCode=130:0", info[0])
        for t in self.trials("slalint"):
            self.assertEqual(t["status"], "PENDING", t["trial_name"])
            self.assertEqual(t["failures"], 0, t["trial_name"])
            self.assertLess(len(self.results("slalint", t)), 300, t["trial_name"])

    def test_use_allocation_steps_outlive_a_killed_driver(self):
        # The driver's batch script runs it, and after it dies runs `--resume=auto` in the same
        # allocation: the steps the first driver started run on and are re-attached.
        self.experiment("slastep", 2, 40, 0.3, partition=None,
                        slurm_opts=", use_allocation: true, cpus: 1")
        pidfile = os.path.join(self.dir, "driver.pid")
        driver, out = self.sbatch_driver(
            "slastep", "'%s' run slastep.yaml & echo $! > %s; wait; sleep 1; "
            "exec '%s' run slastep.yaml --resume=auto" % (TUNE, pidfile, TUNE))
        try:
            self.wait_for(lambda: len(self.trials("slastep")) == 2 and all(
                len(self.results("slastep", t)) >= 3 for t in self.trials("slastep")),
                timeout=60, what="both trials reporting")

            def steps():
                q = slurm("squeue", "-h", "-s", "-j", driver, "-o", "%i|%j", check=False)
                return sorted(line.split("|")[0] for line in q.splitlines()
                              if line.split("|", 1)[-1].startswith("tune-slastep-"))
            before = steps()
            self.assertEqual(len(before), 2, before)
            with open(pidfile) as f:
                os.kill(int(f.read()), signal.SIGKILL)
            # The steps run on without their driver (an srun that dies ends its step at once).
            time.sleep(1.5)
            self.assertEqual(steps(), before)
            # The resumed driver shows each trial's step id and its state.
            self.wait_for(lambda: "re-attached to slurm job step" in self.log("slastep"),
                          timeout=30, what="the resume")
            status = self.tune("status", "slastep", check=0).stdout
            for step in before:
                self.assertRegex(status, r"slurm job %s\s+RUNNING" % re.escape(step))
            self.wait_for(lambda: not slurm("squeue", "-h", "-j", driver, check=False).strip(),
                          timeout=120, what="the driver's allocation to end")
        finally:
            slurm("scancel", driver, check=False)
        self.check_complete("slastep", 40)
        log = self.log("slastep")
        for t in self.trials("slastep"):
            self.assertEqual(t["attempt"], 1, "restarted rather than re-attached: " + log)
            self.assertEqual(t["failures"], 0, t["trial_name"])
            self.assertIn(t["job_id"], before)
            # One step ran it from start to end.
            self.assertEqual({"%s.%s" % (r["job"], r["slurm_step"])
                              for r in self.results("slastep", t)}, {t["job_id"]})

    def wait_allocation(self, driver, timeout=120):
        try:
            self.wait_for(lambda: not slurm("squeue", "-h", "-j", driver, check=False).strip(),
                          timeout=timeout, what="the driver's allocation to end")
        finally:
            slurm("scancel", driver, check=False)

    def check_one_attempt_at_a_time(self, name, steps):
        """Every trial complete, its second attempt after the first, never beside it."""
        self.check_complete(name, steps)
        for t in self.trials(name):
            self.assertEqual(t["attempt"], 2, t["trial_name"])
            self.assertEqual(t["failures"], 0, t["trial_name"])
            overlap = os.path.join(self.exp_dir(name), t["trial_name"], "OVERLAP")
            self.assertFalse(os.path.exists(overlap), "two attempts of %s ran at once: %s" % (
                t["trial_name"], open(overlap).read() if os.path.exists(overlap) else ""))

    def test_use_allocation_driver_killed_right_after_srun_starts(self):
        # The driver dies between starting a step's srun and writing its .step file (a test
        # hook: SIGKILL to itself there); the batch script then resumes it. The resume does not
        # know the step from the .step file: it finds it by the step's own files and squeue
        # --steps, and ends it before the trial's next attempt starts (never two at once).
        self.experiment("slwin", 1, 20, 0.2, partition=None,
                        slurm_opts=", use_allocation: true, cpus: 1")
        driver, out = self.sbatch_driver(
            "slwin", "TUNE_TEST_KILL_AFTER_SRUN=1 '%s' run slwin.yaml; sleep 3; "
            "exec '%s' run slwin.yaml --resume=auto" % (TUNE, TUNE))
        self.wait_allocation(driver)
        log = self.log("slwin")
        self.check_one_attempt_at_a_time("slwin", 20)
        # Its step had started (3 s is ample) and was ended by its id; had its srun still been
        # waiting, the attempt would have been given up instead (its step then starts nothing).
        if "its step had not started; given up" not in log:
            self.assertIn("its step started, and no srun of this machine watches it", log)
            self.assertIn("attempt 1 still runs on slurm but is not the trial's current attempt",
                          log)

    def test_use_allocation_resume_on_another_machine_ends_the_old_steps(self):
        # A resume that cannot watch the first driver's sruns (they run on another machine: here
        # the resume is told it runs on one, TUNE_TEST_SLURM_HOST) ends their steps by their ids
        # before it restarts the trials.
        self.experiment("slhost", 2, 25, 0.2, partition=None,
                        slurm_opts=", use_allocation: true, cpus: 1")
        pidfile = os.path.join(self.dir, "driver.pid")
        driver, out = self.sbatch_driver(
            "slhost", "'%s' run slhost.yaml & echo $! > %s; wait; sleep 1; "
            "TUNE_TEST_SLURM_HOST=elsewhere exec '%s' run slhost.yaml --resume=auto"
            % (TUNE, pidfile, TUNE))
        try:
            self.wait_for(lambda: len(self.trials("slhost")) == 2 and all(
                len(self.results("slhost", t)) >= 2 for t in self.trials("slhost")),
                timeout=60, what="both trials reporting")
            with open(pidfile) as f:
                os.kill(int(f.read()), signal.SIGKILL)
        finally:
            self.wait_allocation(driver)
        self.check_one_attempt_at_a_time("slhost", 25)
        log = self.log("slhost")
        self.assertEqual(log.count("its step started, and no srun of this machine watches it"), 2,
                         log)

    def test_gpus_go_to_jobs_and_steps(self):
        # The cluster's node has 4 CPUs and 2 (fake) GPUs. Three trials of one GPU each: as
        # sbatch jobs, and as steps of a driver's allocation of 2 GPUs, at most two run at once,
        # each with a GPU of its own as Slurm sets it (CUDA_VISIBLE_DEVICES, SLURM_*_GPUS), and
        # the third waits for one although tune started it (max_jobs 4) and a CPU is free.
        def watch(listed, until):
            """Sets of ids `listed()` showed running together, until `until()`."""
            together = []
            while not until():
                now = listed()
                self.assertLessEqual(len(now), 2, now)
                if len(now) == 2:
                    together.append(frozenset(now))
                time.sleep(0.3)
            return set(together)

        def gpus(name, key):
            """Each trial's GPU as Slurm set it, by its job (or JOB.STEP)."""
            out = {}
            for t in self.trials(name):
                rows = self.results(name, t)
                self.assertEqual({r["cuda"] for r in rows}, {r[key] for r in rows}, t["trial_name"])
                self.assertEqual(len({r["cuda"] for r in rows}), 1, t["trial_name"])
                self.assertIn(rows[0]["cuda"], ("0", "1"), t["trial_name"])
                ran_in = {r["job"] + ("." + r["slurm_step"] if key == "step_gpus" else "")
                          for r in rows}
                self.assertEqual(len(ran_in), 1, t["trial_name"])
                out[ran_in.pop()] = rows[0]["cuda"]
            return out

        self.experiment("slgpu", 3, 12, 0.5, slurm_opts=", cpus: 1", resources="{gpu: 1}")
        p = self.start_tune("run", "slgpu.yaml")
        waited = []

        def running_jobs():
            lines = slurm("squeue", "-h", "-o", "%i|%T|%r|%j").splitlines()
            mine = [x.split("|") for x in lines if x.split("|")[3].startswith("tune-slgpu-")]
            if sum(1 for x in mine if x[1] == "RUNNING") == 2:
                waited.extend(x[2] for x in mine if x[1] == "PENDING")
            return {x[0] for x in mine if x[1] == "RUNNING"}
        together = watch(running_jobs, lambda: p.poll() is not None)
        p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0)
        self.check_complete("slgpu", 12)
        self.assertIn("Resources", waited)  # the third job waited for a GPU
        by_job = gpus("slgpu", "job_gpus")
        self.assertEqual(len(by_job), 3)
        self.assertTrue(together)
        for pair in together:
            self.assertEqual(len({by_job[j] for j in pair}), 2, (pair, by_job))

        # Steps of the driver's allocation (3 tasks, 2 GPUs).
        self.experiment("slgpus", 3, 12, 0.5, partition=None, resources="{gpu: 1}",
                        slurm_opts=", use_allocation: true, cpus: 1")
        driver, out = self.sbatch_driver("slgpus", tasks=3, extra=["--gpus=2"])
        try:
            def running_steps():
                q = slurm("squeue", "-h", "-s", "-j", driver, "-o", "%i|%j", check=False)
                return {x.split("|")[0] for x in q.splitlines()
                        if x.split("|", 1)[-1].startswith("tune-slgpus-")}
            together = watch(running_steps, lambda: not slurm(
                "squeue", "-h", "-j", driver, check=False).strip())
        finally:
            slurm("scancel", driver, check=False)
        self.check_complete("slgpus", 12)
        by_step = gpus("slgpus", "step_gpus")
        self.assertEqual(len(by_step), 3)
        self.assertTrue(together)
        for pair in together:
            self.assertEqual(len({by_step[s] for s in pair}), 2, (pair, by_step))
        # tune had started all three steps' sruns before the first trial ended: the third step
        # waited for a GPU in Slurm, not in tune.
        log = self.log("slgpus")
        third = [m.start() for m in re.finditer(r"slurm job step started", log)][2]
        first_end = re.search(r"trial \S+ (terminated|TERMINATED)", log)
        self.assertTrue(first_end and third < first_end.start(), log)

    def sbatch_driver(self, name, script=None, tasks=2, extra=()):
        """Submits `tune run NAME.yaml` (or `script`) as a batch job of 2 (`tasks`) one-CPU
        tasks: (job id, its output)."""
        out = os.path.join(self.dir, name + "-driver.out")
        env = dict(self.env)
        env.pop("SLURM_JOB_ID", None)
        driver = subprocess.run(
            ["sbatch", "--parsable", "--job-name=%s-driver" % name, "--ntasks=%d" % tasks,
             "--cpus-per-task=1", "--output=" + out, "--chdir=" + self.dir, *extra,
             "--wrap", script or "exec '%s' run %s.yaml" % (TUNE, name)],
            env=env, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        return driver.split(";")[0], out

    def test_bad_partition_is_a_config_error(self):
        self.experiment("slbad", 2, 3, 0.1, partition="nosuch")
        p = self.tune("run", "slbad.yaml")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("invalid partition", p.stderr.lower())
        self.assertEqual(p.stderr.lower().count("invalid partition"), 1, p.stderr)
        self.assertEqual(jobs_named("tune-slbad-"), [])

    def test_missing_sbatch_is_a_config_error(self):
        self.experiment("slnone", 2, 3, 0.1)
        env = dict(self.env, PATH=os.path.join(self.dir, "empty"))
        p = self.tune("run", "slnone.yaml", env=env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("sbatch: not found on PATH", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_failing_sbatch_is_logged_once_not_per_trial(self):
        # sbatch answers --test-only but refuses every real submission.
        shim = os.path.join(self.dir, "bin", "sbatch")
        with open(shim, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do [ "$a" = --test-only ] && exec /usr/bin/sbatch "$@"; '
                    'done\necho "sbatch: error: Batch job submission failed: Slurm temporarily '
                    'unable to accept job, sleeping and retrying" >&2\nexit 1\n')
        os.chmod(shim, 0o755)
        self.experiment("slfail", 4, 3, 0.1)
        p = self.start_tune("run", "slfail.yaml")
        self.wait_for(lambda: "temporarily unable" in self.log("slfail"), what="the message")
        time.sleep(2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertEqual(self.log("slfail").count("temporarily unable"), 1, self.log("slfail"))
        for t in self.trials("slfail"):
            self.assertEqual(t["failures"], 0)

    def release(self, job):
        """Lets a job Slurm requeued run again now: Slurm holds it in BeginTime for ~2 minutes
        after a requeue, which is Slurm's policy, not part of what the tests check."""
        self.wait_for(lambda: "BeginTime" in slurm("squeue", "-h", "-j", job, "-o", "%r",
                                                   check=False), timeout=30,
                      what="the requeued job held")
        slurm("scontrol", "update", "JobId=" + job, "StartTime=now")

    @unittest.skipUnless(os.environ.get("TUNE_SLURM_SLOW"), "slow: set TUNE_SLURM_SLOW=1")
    def test_requeue_and_time_limit_count_no_failure(self):
        # Both trials have a 1-minute limit with SIGTERM 30 s before it, so each attempt runs
        # ~30 s and checkpoints on SIGTERM. Trial 0's first job is also requeued by hand after
        # its first checkpoint: that same job runs its next attempt when Slurm restarts it.
        self.experiment("slslow", 2, 50, 1.0, slurm_opts=", time_limit: '1', signal_grace_s: 30",
                        extra="failure_config: {max_failures: 0}")
        p = self.start_tune("run", "slslow.yaml")
        self.wait_for(lambda: any(t["checkpoints"] for t in self.trials("slslow")
                                  if t["trial_id"] == "00000"), timeout=60, what="a checkpoint")
        t0 = [t for t in self.trials("slslow") if t["trial_id"] == "00000"][0]
        job, _ = self.job_of("slslow", t0)
        slurm("scontrol", "requeue", job)
        # Slurm holds a requeued job ~2 minutes (BeginTime); once tune has prepared the job's
        # next run, the test lets it start at once rather than wait.
        self.wait_for(lambda: "runs when Slurm restarts its requeued job " + job in
                      self.log("slslow"), timeout=60, what="the rerun prepared")
        self.release(job)
        out, err = p.communicate(timeout=600)
        self.assertEqual(p.returncode, 0, err)
        log = self.log("slslow")
        # Its supervisor recorded Slurm's SIGTERM, or (killed first) squeue showed the requeue.
        self.assertTrue("slurm job %s was requeued by Slurm" % job in log or
                        "slurm job %s was signalled by Slurm" % job in log, log)
        self.assertIn("runs when Slurm restarts its requeued job " + job, log)
        # Slurm's rerun of that job (SLURM_RESTART_COUNT=1) claimed the attempt tune prepared.
        self.assertTrue(os.path.exists(os.path.join(
            self.exp_dir("slslow"), ".tune", "slurm", "%s.job%s.run1" % (t0["trial_name"], job))))
        self.check_complete("slslow", 50)
        for t in self.trials("slslow"):
            self.assertEqual(t["failures"], 0, t["trial_name"])
            self.assertGreaterEqual(t["attempt"], 2, t["trial_name"])
        self.assertIn("signalled by Slurm", log)


    @unittest.skipUnless(os.environ.get("TUNE_SLURM_SLOW"), "slow: set TUNE_SLURM_SLOW=1")
    def test_requeue_with_no_driver_runs_the_next_attempt_on_its_own(self):
        # The driver dies; then Slurm requeues the job (scontrol requeue: SIGTERM, on which the
        # trial checkpoints, unseen by any driver). Its rerun (let out of BeginTime at once)
        # starts the next attempt by itself from the latest checkpoint in the trial dir; the
        # resumed driver adopts it: every iteration once, no failure.
        self.experiment("slnod", 1, 70, 0.5)
        p = self.start_tune("run", "slnod.yaml")
        self.wait_for(lambda: any(t["checkpoints"] for t in self.trials("slnod")), timeout=60,
                      what="a checkpoint")
        t = self.trials("slnod")[0]
        job, _ = self.job_of("slnod", t)
        p.kill()
        p.communicate()
        slurm("scontrol", "requeue", job)
        self.release(job)  # rather than wait ~2 minutes in BeginTime
        sdir = os.path.join(self.exp_dir("slnod"), ".tune", "slurm")
        note = os.path.join(sdir, "%s.job%s.claim1" % (t["trial_name"], job), "self")
        self.wait_for(lambda: os.path.exists(note), timeout=60, what="Slurm's rerun of the job")
        with open(note) as f:
            size, restored = f.read().split()
        self.assertRegex(restored, r"^checkpoint_\d{6}$")
        self.tune("run", "slnod.yaml", "--resume=auto", check=0, timeout=180)
        self.check_complete("slnod", 70)
        log = self.log("slnod")
        self.assertIn("slurm job %s was requeued by Slurm and reran on its own as attempt 2" % job,
                      log)
        self.assertIn("runs in slurm job %s, which Slurm requeued and reran on its own" % job, log)
        t = self.trials("slnod")[0]
        self.assertEqual(t["failures"], 0)
        self.assertEqual(t["attempt"], 2)
        # Everything after the restore came from the rerun (the same job, run 1), not a new job.
        self.assertEqual(self.job_of("slnod", t)[0], job)
        self.assertEqual({r["job"] for r in self.results("slnod", t)}, {job})
        self.assertFalse(os.path.exists(os.path.join(sdir, "%s.job%s.next1" % (
            t["trial_name"], job))))

if __name__ == "__main__":
    if not available():
        print("test_slurm: skipped: needs root and slurm-wlm + munge (scripts/setup.sh --test)")
        sys.exit(77)  # ctest's SKIP_RETURN_CODE: shown as skipped, never as passed
    unittest.main()
