"""upload_dir: the experiment mirrored to file:// and to a real S3-compatible server
(s3rver, started by scripts/s3-server.sh, driven through Debian's awscli); a run interrupted,
its local dir deleted, and `--resume=auto` restoring it from the mirror and finishing."""
import json
import os
import shutil
import signal
import subprocess
import time
import unittest

from harness import PY, SOURCE, TuneTest

TRIAL = os.path.join(SOURCE, "tests", "fixtures", "chaos_trial.py")
S3_SCRIPT = os.path.join(SOURCE, "scripts", "s3-server.sh")
AWS = shutil.which("aws", path="/usr/bin:/usr/local/bin") or "aws"


class UploadTest(TuneTest):
    def experiment(self, upload_dir, syncer=None):
        syncer_line = ", upload_syncer: %s" % json.dumps(syncer) if syncer else ""
        return self.write("up.yaml", f"""
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space:
              x: {{uniform: [0.1, 3.0]}}
              steps: 24
              sleep: 0.05
            num_samples: 4
            seed: 11
            max_concurrent_trials: 2
            checkpoint_config: {{num_to_keep: 1}}
            sync_config: {{upload_dir: "{upload_dir}", sync_period: 0.5, sync_timeout: 60{syncer_line}}}
            """)

    def interrupt_midway(self):
        p = self.start_tune("run", "up.yaml")
        self.wait_for(lambda: any(
            os.path.exists(os.path.join(self.exp_dir("up"), t["trial_name"], "checkpoint_000002"))
            for t in self.trials("up")), what="a second checkpoint")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 130, err)
        with open(os.path.join(self.exp_dir("up"), "tune.log")) as f:
            self.assertIn("mirroring the experiment to", f.read())

    def finish_from_mirror(self, listing):
        """Deletes the local experiment, resumes it from the mirror, and checks the result and
        the mirror (`listing()` returns the mirror's relative file paths)."""
        mirrored = json.loads(self.read_mirror_state())
        self.assertEqual(mirrored["phase"], "interrupted")
        shutil.rmtree(self.exp_dir("up"))
        # aws s3 sync is known to hang now and then (aws-cli#6164): a stalled download or
        # mirror is killed at sync_timeout (60 s here) and tried again, so this ends in time.
        p = self.tune("run", "up.yaml", "--resume=auto", check=0, timeout=480)
        self.assertIn("downloading experiment 'up'", p.stderr)
        trials = self.trials("up")
        self.assertEqual(len(trials), 4)
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(self.iterations("up", t), list(range(1, 25)), t["trial_name"])
        self.assertEqual(json.loads(self.read_mirror_state())["phase"], "finished")
        # The mirror holds what the experiment holds: pruned checkpoints are gone there too, and
        # nothing of the driver's private files went up.
        files = listing()
        local = set()
        for root, _, names in os.walk(self.exp_dir("up")):
            for n in names:
                local.add(os.path.relpath(os.path.join(root, n), self.exp_dir("up")))
        ckpt = lambda paths: sorted(p for p in paths if "/checkpoint_" in p)
        self.assertEqual(ckpt(files), ckpt(local))
        self.assertEqual(len(ckpt(files)), 4)  # num_to_keep 1, one state.json each
        for private in (".tune/lock", ".tune/lease", ".tune/state.journal"):
            self.assertNotIn(private, files)
        self.assertFalse([p for p in files if p.endswith("stdin.fifo") or ".tmp." in p])

    def test_file_mirror_round_trip(self):
        mirror = os.path.join(self.dir, "mirror")
        self.experiment("file://" + mirror)
        def read_state():
            with open(os.path.join(mirror, "up", "experiment_state.json")) as f:
                return f.read()
        self.read_mirror_state = read_state
        self.interrupt_midway()

        def listing():
            out = set()
            for root, _, names in os.walk(os.path.join(mirror, "up")):
                for n in names:
                    out.add(os.path.relpath(os.path.join(root, n), os.path.join(mirror, "up")))
            return out
        self.finish_from_mirror(listing)

    def test_custom_upload_syncer_both_ways(self):
        # A syncer of one's own: copies a tree, one argument each, URLs as given.
        self.write("mysync.py", """
            import shutil, sys
            strip = lambda p: p[len("file://"):] if p.startswith("file://") else p
            src, dst = strip(sys.argv[1]), strip(sys.argv[2])
            shutil.copytree(src, dst, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("stdin.fifo", "lock"))
            open(sys.argv[3], "a").write("%s -> %s\\n" % (sys.argv[1], sys.argv[2]))
            """)
        mirror = os.path.join(self.dir, "mirror")
        calls = os.path.join(self.dir, "calls.txt")
        self.experiment("file://" + mirror,
                        syncer="%s mysync.py {source} {target} '%s'" % (PY, calls))
        self.tune("run", "up.yaml", check=0, timeout=300)
        with open(calls) as f:
            lines = f.read().splitlines()
        self.assertTrue(lines)
        self.assertEqual(lines[-1], "%s/ -> file://%s/up" % (self.exp_dir("up"), mirror))
        with open(os.path.join(mirror, "up", "experiment_state.json")) as f:
            self.assertEqual(json.load(f)["phase"], "finished")
        shutil.rmtree(self.exp_dir("up"))
        self.tune("run", "up.yaml", "--resume=auto", check=0, timeout=300)
        with open(calls) as f:
            self.assertIn("file://%s/up/ -> %s/" % (mirror, self.exp_dir("up")), f.read())
        self.assertTrue(all(t["status"] == "TERMINATED" for t in self.trials("up")))

    def test_a_hung_mirror_is_killed_after_sync_timeout_and_retried(self):
        # Its first call hangs; later ones copy the tree.
        marker = self.hang_when("True", steps=40, sleep=0.1)
        started = time.time()
        p = self.tune("run", "up.yaml", check=0, timeout=100)
        self.assertLess(time.time() - started, 60)  # the hung call did not hold the run
        self.assertIn("ran longer than sync_timeout (1 s): killed; retried at the next sync "
                      "period", p.stderr)
        self.assertTrue(os.path.exists(marker))
        self.assertEqual(self.mirrored_phase(), "finished")  # a later mirror went through

    def hang_when(self, condition, times=1, steps=4, sleep=0.05):
        """A file:// syncer whose first `times` calls for which `condition` (Python, over src
        and dst) holds hang; every other call copies the tree."""
        self.write("hang_when.py", f"""
            import json, os, shutil, sys, time
            strip = lambda p: p[len("file://"):] if p.startswith("file://") else p
            src, dst, marker = strip(sys.argv[1]), strip(sys.argv[2]), sys.argv[3]
            if ({condition}) and not os.path.exists(marker + ".{times}"):
                n = 1
                while os.path.exists(marker + ".%d" % n):
                    n += 1
                open(marker + ".%d" % n, "w").close()
                time.sleep(120)
            shutil.copytree(src, dst, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("stdin.fifo", "lock"))
            """)
        marker = os.path.join(self.dir, "hung")
        self.write("up.yaml", f"""
            trial: {{command: ["{PY}", "{TRIAL}"]}}
            param_space: {{x: 1.0, steps: {steps}, sleep: {sleep}}}
            sync_config:
              upload_dir: "file://{os.path.join(self.dir, 'mirror')}"
              upload_syncer: "{PY} hang_when.py {{source}} {{target}} {marker}"
              sync_period: 0.5
              sync_timeout: 1
            """)
        return marker + ".1"

    def mirrored_phase(self):
        with open(os.path.join(self.dir, "mirror", "up", "experiment_state.json")) as f:
            return json.load(f)["phase"]

    def test_a_last_mirror_that_hangs_is_killed_and_tried_again(self):
        # Two calls with the final state hang: a mirror started before the last one may be the
        # first, so the last mirror itself hangs at least once and is tried again.
        marker = self.hang_when(
            "json.load(open(os.path.join(src, 'experiment_state.json')))['phase'] == 'finished'",
            times=2)
        p = self.tune("run", "up.yaml", check=0, timeout=100)
        self.assertTrue(os.path.exists(marker[:-2] + ".2"), p.stderr)
        self.assertIn("trying again (2 of 3)", p.stderr)
        self.assertEqual(self.mirrored_phase(), "finished")

    def test_a_download_that_hangs_is_killed_and_tried_again(self):
        marker = self.hang_when("src.startswith(%r)" % os.path.join(self.dir, "mirror"))
        self.tune("run", "up.yaml", check=0, timeout=100)
        self.assertFalse(os.path.exists(marker))
        shutil.rmtree(self.exp_dir("up"))
        started = time.time()
        p = self.tune("run", "up.yaml", "--resume=auto", check=0, timeout=100)
        self.assertLess(time.time() - started, 60)
        self.assertTrue(os.path.exists(marker))  # the download's first call hung
        self.assertIn("download from file://", p.stderr)
        self.assertIn("ran longer than 1 s: killed (sync_config.sync_timeout); trying again "
                      "(2 of 3)", p.stderr)
        self.assertTrue(all(t["status"] == "TERMINATED" for t in self.trials("up")))

    def test_a_sync_timeout_that_is_not_positive_is_refused(self):
        self.write("up.yaml", """
            trial: {command: [true]}
            param_space: {x: 1}
            sync_config: {sync_timeout: 0}
            """)
        p = self.tune("run", "up.yaml", check=2)
        self.assertIn("up.yaml:3:29: sync_config.sync_timeout must be positive", p.stderr)

    def test_a_mirror_overlapping_the_experiment_is_refused(self):
        storage = os.path.join(self.dir, "up", "store")  # the experiment: <dir>/up/store/up
        for url in ("file://" + storage,                  # the mirror is the experiment dir
                    "file://" + os.path.join(storage, "up", "inside"),  # inside it
                    "file://" + self.dir):                # <dir>/up: contains it
            self.experiment(url)
            p = self.tune("run", "up.yaml", "--storage-path", storage, check=2)
            self.assertIn("overlaps the experiment dir", p.stderr)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertFalse(os.path.exists(storage))

    def test_never_refuses_an_experiment_that_only_the_mirror_holds(self):
        mirror = os.path.join(self.dir, "mirror")
        os.makedirs(os.path.join(mirror, "up"))
        with open(os.path.join(mirror, "up", "experiment_state.json"), "w") as f:
            f.write("{}")
        self.experiment("file://" + mirror)
        p = self.tune("run", "up.yaml", check=2)
        self.assertIn("already holds this experiment", p.stderr)
        self.assertIn("--resume=auto", p.stderr)
        self.assertFalse(os.path.exists(self.exp_dir("up")), "a refused run left files behind")

    def test_s3_round_trip(self):
        s3dir = os.path.join(self.dir, "s3")
        os.makedirs(s3dir)
        start = subprocess.run([S3_SCRIPT, "start", s3dir], capture_output=True, text=True,
                               timeout=300)
        self.assertEqual(start.returncode, 0, start.stderr)
        try:
            self.s3_round_trip(start.stdout.strip())
        finally:
            subprocess.run([S3_SCRIPT, "stop", s3dir], timeout=30)

    def s3_round_trip(self, endpoint):
        self.env.update(AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
                        AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint)
        aws = [AWS, "--endpoint-url", endpoint, "s3"]
        self.experiment("s3://tune-bucket/runs")

        def read_state():
            return subprocess.run(aws + ["cp", "s3://tune-bucket/runs/up/experiment_state.json", "-"],
                                  env=self.env, capture_output=True, text=True, check=True).stdout
        self.read_mirror_state = read_state
        self.interrupt_midway()

        def listing():
            out = subprocess.run(aws + ["ls", "--recursive", "s3://tune-bucket/runs/up/"],
                                 env=self.env, capture_output=True, text=True, check=True).stdout
            return {line.split(None, 3)[3][len("runs/up/"):] for line in out.splitlines() if line}
        self.finish_from_mirror(listing)

    def test_a_cloud_storage_path_is_staged_locally_and_mirrored(self):
        s3dir = os.path.join(self.dir, "s3")
        os.makedirs(s3dir)
        start = subprocess.run([S3_SCRIPT, "start", s3dir], capture_output=True, text=True,
                               timeout=300)
        self.assertEqual(start.returncode, 0, start.stderr)
        try:
            endpoint = start.stdout.strip()
            self.env.update(AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
                            AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint)
            self.write("one.py", "import tune_trial\ntune_trial.report({'a': 1})\n")
            self.write("cloud.yaml", """
                trial: {command: ["%s", "one.py"]}
                param_space: {x: 1}
                storage_path: s3://tune-bucket/ray
            """ % PY)
            self.tune("run", "cloud.yaml", "--quiet", check=0, timeout=300)
            # Staged under the local storage path (TUNE_STORAGE_PATH), never a dir named "s3:".
            self.assertEqual(self.trials("cloud")[0]["status"], "TERMINATED")
            self.assertFalse(os.path.exists(os.path.join(self.dir, "s3:")))
            got = subprocess.run([AWS, "--endpoint-url", endpoint, "s3", "cp",
                                  "s3://tune-bucket/ray/cloud/experiment_state.json", "-"],
                                 env=self.env, capture_output=True, text=True, check=True).stdout
            self.assertEqual(json.loads(got)["phase"], "finished")
            # Deleted locally, it comes back from there.
            shutil.rmtree(self.exp_dir("cloud"))
            p = self.tune("run", "cloud.yaml", "--resume=auto", check=0, timeout=300)
            self.assertIn("downloading experiment 'cloud'", p.stderr)
        finally:
            subprocess.run([S3_SCRIPT, "stop", s3dir], timeout=30)


if __name__ == "__main__":
    unittest.main()
