"""Disk full (issue: state on a small tmpfs that fills up): the previous experiment state stays
intact, the driver says clearly what failed, and the experiment, copied to a roomier disk,
resumes and finishes with every iteration recorded once.

Needs root to mount a tmpfs: without it this module exits 77, which ctest reports as Skipped."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

from harness import PY, SOURCE, TuneTest

TRIAL = os.path.join(SOURCE, "tests", "fixtures", "chaos_trial.py")


class DiskFullTest(TuneTest):
    def setUp(self):
        super().setUp()
        self.small = os.path.join(self.dir, "small")
        os.makedirs(self.small)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tune-test", self.small],
                       check=True)

    def tearDown(self):
        self.unmount()
        super().tearDown()

    def unmount(self):
        if os.path.ismount(self.small):
            subprocess.run(["umount", "-l", self.small], check=False)

    def checkpointed(self, state_file):
        with open(state_file) as f:
            return any(t["checkpoints"] for t in json.load(f)["trials"])

    def test_state_survives_a_full_disk_and_resumes_elsewhere(self):
        self.write("full.yaml", f"""
            trial:
              command: ["{PY}", "{TRIAL}"]
            param_space:
              x: {{uniform: [0.1, 3.0]}}
              steps: 30
              sleep: 0.05
            num_samples: 4
            seed: 5
            max_concurrent_trials: 2
            failure_config: {{max_failures: -1}}
            checkpoint_config: {{num_to_keep: 2}}
            """)
        env = dict(self.env, TUNE_GLOBAL_CHECKPOINT_S="0.2")
        p = self.start_tune("run", "full.yaml", "--storage-path", self.small, env=env)
        exp = os.path.join(self.small, "full")
        state_file = os.path.join(exp, "experiment_state.json")
        self.wait_for(lambda: self.checkpointed(state_file), what="a checkpoint in the state")
        # Fill the disk.
        with open(os.path.join(self.small, "filler"), "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        time.sleep(2)
        # The state on the full disk is whole, and a valid tune state.
        with open(state_file) as f:
            before = json.load(f)
        self.assertEqual(before["version"], 1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("cannot save experiment state", err)
        self.assertIn("No space left on device", err)
        self.assertIn("the previous state is intact", err)
        print("\n--- the driver's stderr on the full disk ---\n" + err[-3000:])
        with open(state_file) as f:
            json.load(f)

        # A roomier disk: copy the experiment there and resume it.
        roomy = os.path.join(self.dir, "roomy")
        os.makedirs(roomy)
        subprocess.run(["cp", "-a", exp, roomy], check=True)
        self.unmount()
        r = self.tune("run", "full.yaml", "--storage-path", roomy, "--resume=auto", check=0,
                      timeout=300)
        self.storage = roomy
        trials = self.trials("full")
        self.assertEqual(len(trials), 4)
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
            self.assertEqual(self.iterations("full", t), list(range(1, 31)), t["trial_name"])
            rows = self.results("full", t)
            self.assertEqual([row["step"] for row in rows], list(range(1, 31)))

    def test_a_trial_whose_output_fills_its_disk_fails_and_says_so(self):
        # The trial's dir is the small tmpfs (the rest of the experiment on the roomy disk); the
        # trial prints 3 MB into its 4 MiB and exits 0. Its supervisor cannot keep the output:
        # the attempt fails (output_lost), naming the full disk, and is retried; the trial ends
        # ERROR, not TERMINATED with most of its results silently missing (as it did before).
        self.write("big.py", """
            import json
            for i in range(1, 61):
                print(json.dumps({"i": i, "pad": "x" * 50000}), flush=True)
            """)
        self.write("lost.yaml", f"""
            trial:
              command: ["{PY}", "{os.path.join(self.dir, 'big.py')}"]
            param_space: {{x: {{grid_search: [1]}}}}
            failure_config: {{max_failures: 1}}
            """)
        trial_dir = os.path.join(self.storage, "lost", "trial_00000_x=1")
        os.makedirs(trial_dir)
        subprocess.run(["mount", "--bind", self.small, trial_dir], check=True)
        try:  # (unmounted before tearDown removes the test's dir)
            with open(os.path.join(self.small, "filler"), "wb") as f:
                f.write(b"\0" * (2 << 20))
            r = self.tune("run", "lost.yaml", check=1, timeout=120)
        finally:
            subprocess.run(["umount", "-l", trial_dir], check=False)
        t = self.trials("lost")[0]
        self.assertEqual((t["status"], t["attempt"]), ("ERROR", 2), r.stderr[-2000:])
        self.assertIn("cannot write stdout.log", t["error"])
        self.assertIn("No space left on device", t["error"])
        self.assertIn("No space left on device", r.stderr)


def can_mount():
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    import tempfile
    d = tempfile.mkdtemp(prefix="tune-mount-probe-")
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tune-probe", d],
                            capture_output=True).returncode == 0
        if ok:
            subprocess.run(["umount", d], check=False)
        return ok
    finally:
        os.rmdir(d)


if __name__ == "__main__":
    if not can_mount():
        print("SKIPPED: mounting a tmpfs needs root (and a mount namespace that allows it)")
        sys.exit(77)
    unittest.main()
