"""The driver's lease, with a driver whose clock is not the host's: supervisors stop an orphaned
trial after orphan_timeout_s of lease silence measured on their own clock, whatever time the
driver's clock says (TUNE_TEST_LEASE_SKEW_S shifts the mtimes the driver writes, as a host clock
10 minutes ahead or behind the driver's would)."""
import os
import textwrap
import time
import unittest

from harness import PY, TuneTest

TRIAL = """
import json, time
for i in range(int(__import__("sys").argv[1])):
    print(json.dumps({"i": i}), flush=True)
    time.sleep(0.5)
"""


class LeaseTest(TuneTest):
    def exp(self, name, steps):
        self.write("trial.py", TRIAL)
        self.write("exp.yaml", textwrap.dedent(f"""
            name: {name}
            trial: {{command: [{PY}, trial.py, "{steps}"]}}
            param_space: {{x: {{grid_search: [1, 2]}}}}
            orphan_timeout_s: 3
            """))

    def test_a_driver_clock_ten_minutes_behind_does_not_orphan_live_trials(self):
        # Each renewal sets the lease mtime 600 s in the past: compared with the host's clock
        # it always looks 10 minutes stale.
        self.exp("behind", 12)  # 6 s, twice orphan_timeout_s
        env = dict(self.env, TUNE_TEST_LEASE_SKEW_S="-600")
        self.tune("run", "exp.yaml", env=env)
        for t in self.trials("behind"):
            self.assertEqual(t["status"], "TERMINATED", t.get("error"))
            self.assertEqual(len(self.results("behind", t)), 12)
            err = os.path.join(self.exp_dir("behind"), t["trial_name"], "stderr.log")
            self.assertFalse(os.path.exists(err) and "lease expired" in open(err).read())

    def test_a_driver_clock_ten_minutes_ahead_still_orphans_after_its_death(self):
        # The lease mtime is 10 minutes in the future: compared with the host's clock it never
        # ages. The driver is killed: its trials must stop after orphan_timeout_s anyway.
        self.exp("ahead", 200)  # 100 s unless stopped
        env = dict(self.env, TUNE_TEST_LEASE_SKEW_S="600")
        p = self.start_tune("run", "exp.yaml", env=env)
        self.wait_for(lambda: all(t["status"] == "RUNNING" for t in self.trials("ahead"))
                      and len(self.trials("ahead")) == 2, what="both trials running")
        time.sleep(0.5)
        p.kill()
        p.communicate()
        t0 = time.time()
        names = [t["trial_name"] for t in self.trials("ahead")]
        for n in names:
            self.wait_for(lambda: self.exit_record("ahead", n) is not None, timeout=20,
                          what="the orphaned trial %s to stop" % n)
            self.assertEqual(self.exit_record("ahead", n)["reason"], "orphaned")
        self.assertLess(time.time() - t0, 15)


if __name__ == "__main__":
    unittest.main()
