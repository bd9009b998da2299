"""Two experiments on one machine share it through the host-wide ledger: CPUs are split
between them, a GPU is never handed to both, and `tune status` shows who holds what."""
import json
import os
import unittest

from harness import PY, TuneTest

# Records when it ran and with which GPUs, then sleeps.
GPU_TRIAL = """
import json, os, sys, time
start = time.time()
time.sleep(1.0)
with open(os.path.join(%r, "%%s-%%s.json" %% (os.environ["TUNE_EXPERIMENT_NAME"],
                                            os.environ["TUNE_TRIAL_ID"])), "w") as f:
    json.dump({"start": start, "end": time.time(),
               "gpus": os.environ["CUDA_VISIBLE_DEVICES"]}, f)
print(json.dumps({"gpus": os.environ["CUDA_VISIBLE_DEVICES"]}))
"""


class SharingTest(TuneTest):
    def test_two_experiments_never_hold_one_gpu_and_split_the_cpus(self):
        spans = os.path.join(self.dir, "spans")
        os.makedirs(spans)
        self.write("gpu.py", GPU_TRIAL % spans)
        for name in ("a", "b"):
            self.write(name + ".yaml", """
                name: %s
                trial: {command: ["%s", "gpu.py"], resources: {cpu: 1, gpu: 1}}
                param_space: {x: {grid_search: [1, 2, 3, 4]}}
                hosts: [{local: {cpus: 2, gpus: 2}}]
            """ % (name, PY))
        a = self.start_tune("run", "a.yaml", "--quiet")
        self.wait_for(lambda: any(t["status"] == "RUNNING" for t in self.trials("a")), what="a to start")
        b = self.start_tune("run", "b.yaml", "--quiet")
        # While both run, `tune status` names both holders.
        def both_hold():
            st = json.loads(self.tune("status", "a", "--format", "json", check=0).stdout)
            return {os.path.basename(h["experiment"]) for h in st["machine_resources"] if h["gpus"]} == {"a", "b"}
        self.wait_for(both_hold, timeout=60, what="both experiments holding a GPU")
        text = self.tune("status", "b", check=0).stdout
        self.assertIn("held on this machine by this user's experiments:", text)
        self.assertRegex(text, r"/b \(pid %d\): 1 CPU, GPU \d(, waiting for more)?  <- this experiment\n" % b.pid)
        self.assertRegex(text, r"/a \(pid %d\): 1 CPU, GPU \d(, waiting for more)?\n" % a.pid)
        self.assertEqual(a.wait(timeout=120), 0, a.stderr.read())
        self.assertEqual(b.wait(timeout=120), 0, b.stderr.read())
        runs = []
        for f in os.listdir(spans):
            with open(os.path.join(spans, f)) as fh:
                runs.append(dict(json.load(fh), exp=f[0]))
        self.assertEqual(len(runs), 8)
        for r in runs:
            self.assertIn(r["gpus"], ("0", "1"))
        for i, r in enumerate(runs):
            for s in runs[i + 1:]:
                overlap = r["start"] < s["end"] and s["start"] < r["end"]
                if overlap:
                    self.assertNotEqual(r["gpus"], s["gpus"], (r, s))
        # The machine's 2 CPUs: never more than 2 trials of the two experiments at once.
        for r in runs:
            at_once = [s for s in runs if s["start"] <= r["start"] < s["end"]]
            self.assertLessEqual(len(at_once), 2, at_once)
        # Both ran side by side at some point (a fair share, not one after the other).
        self.assertTrue(any(r["exp"] != s["exp"] and r["start"] < s["end"] and s["start"] < r["end"]
                            for r in runs for s in runs))
        # Both drivers left the ledger when they ended.
        st = json.loads(self.tune("status", "a", "--format", "json", check=0).stdout)
        self.assertEqual(st["machine_resources"], [])

    def test_a_crashed_drivers_entry_frees_its_resources(self):
        ledger = os.path.join(self.env["XDG_RUNTIME_DIR"], "tune")
        os.makedirs(ledger, mode=0o700)
        # pid 1's start time is not 12345: a stale entry, as a kill -9'ed driver leaves.
        with open(os.path.join(ledger, "ledger.json"), "w") as f:
            f.write(json.dumps({"pid": 1, "start": 12345, "exp": "/gone", "cpus": 2,
                                "gpus": {"0": 1, "1": 1}, "waiting_until": 0}) + "\n")
        self.write("g.py", """
            import json, os
            print(json.dumps({"g": os.environ["CUDA_VISIBLE_DEVICES"]}))
        """)
        self.write("exp.yaml", """
            name: after
            trial: {command: ["%s", "g.py"], resources: {cpu: 1, gpu: 1}}
            param_space: {x: 1}
            hosts: [{local: {cpus: 2, gpus: 2}}]
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0, timeout=30)
        self.assertEqual(self.trials("after")[0]["last_result"]["g"], "0")


if __name__ == "__main__":
    unittest.main()
