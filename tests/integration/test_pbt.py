"""PBT on real trial processes: a synthetic population evolves with one slot (exploits copy the
donor's checkpoint, set the trial's rows aside, log one policy line each), and a driver
SIGKILLed at random instants of the run resumes to the same exploits and final trials as an
uninterrupted run."""
import json
import os
import random
import signal
import time
import unittest

from harness import TuneTest

# val grows by q each iteration from the value in its checkpoint (one per iteration); ~30 ms an
# iteration. An exploited trial goes on from its donor's val with its own new q.
GROWER = """
import json, os, tempfile, time
import tune_trial
cfg = tune_trial.config()
i, val = 0, 0.0
ck = tune_trial.get_checkpoint()
if ck:
    with open(os.path.join(ck, "state")) as f:
        i, val = json.load(f)
while i < 12:
    i += 1
    val += cfg["q"]
    time.sleep(0.03)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state"), "w") as f:
            json.dump([i, val], f)
        tune_trial.report({"val": val}, checkpoint_dir=d)
"""

YAML = """
name: %s
trial: {command: ["python3", "grower.py"], env: {PYTHONUNBUFFERED: "1"}}
param_space: {q: {grid_search: [0.4, 0.9, 0.1, 0.7]}}
metric: val
mode: max
max_concurrent_trials: 1
seed: 5
checkpoint_config: {num_to_keep: 2}
scheduler: {type: pbt, perturbation_interval: 3, quantile_fraction: 0.25,
            resample_probability: 0.25, hyperparam_mutations: {q: {uniform: [0.05, 2.0]}}}
"""


class PbtTest(TuneTest):
    def policy(self, name):
        path = os.path.join(self.exp_dir(name), "pbt_policy.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        for line in lines:
            del line["time"]  # when it was decided: not a decision
        return lines

    def run_pbt(self, name, kills):
        self.write("grower.py", GROWER)
        path = self.write(name + ".yaml", YAML % name)
        for delay in kills:
            p = self.start_tune("run", path, "--resume=auto", "--quiet")
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            p.communicate()
        self.tune("run", path, "--resume=auto", "--quiet", check=0, timeout=300)
        for t in self.trials(name):
            self.assertEqual(self.iterations(name, t), list(range(1, t["iteration"] + 1)), t["trial_name"])
        trials = {t["trial_id"]: (t["status"], t["iteration"], t["config"], t["exploits"])
                  for t in self.trials(name)}
        return self.policy(name), trials

    def test_a_population_evolves_with_one_slot(self):
        policy, trials = self.run_pbt("straight", [])
        self.assertGreater(len(policy), 0)
        for tid, (status, iteration, config, exploits) in trials.items():
            self.assertEqual(status, "TERMINATED")
            self.assertEqual(iteration, 12)
            mine = [p for p in policy if p["trial"] == tid]
            self.assertEqual(exploits, len(mine))
            if mine:
                self.assertEqual(config, mine[-1]["new_config"])
        first = policy[0]
        self.assertNotEqual(first["donor"], first["trial"])
        # Relative to the experiment dir: the donor's dir and its checkpoint.
        self.assertRegex(first["donor_checkpoint"], r"^trial_%s_[^/]+/checkpoint_\d{6}$" % first["donor"])
        self.assertTrue(0.05 <= first["new_config"]["q"] <= 2.0)
        exploited = [t for t in self.trials("straight") if t["exploits"] > 0]
        # tune status shows each exploited trial's last exploit.
        status = self.tune("status", "straight", check=0).stdout
        for tid, (_, _, _, exploits) in trials.items():
            if exploits:
                last = [p for p in policy if p["trial"] == tid][-1]
                row = [line for line in status.splitlines() if line.startswith("trial_" + tid)][0]
                self.assertIn("exploited %s @ %d" % (last["donor"], last["at"]), row)
        # The rows past the donor's checkpoint were set aside, if there were any.
        for t in exploited:
            d = os.path.join(self.exp_dir("straight"), t["trial_name"])
            aside = [f for f in os.listdir(d) if f.startswith("result.before_exploit_")]
            for f in aside:
                with open(os.path.join(d, f)) as fh:
                    self.assertTrue(all(json.loads(line)["training_iteration"] >= 1 for line in fh))

    def test_a_driver_killed_at_random_instants_resumes_to_the_same_exploits(self):
        straight = self.run_pbt("straight", [])
        rng = random.Random(int(os.environ.get("TUNE_TEST_SEED", time.time())))
        kills = [rng.uniform(0.3, 2.0) for _ in range(3)]
        self.assertEqual(self.run_pbt("killed", kills), straight, "kills %s" % kills)


if __name__ == "__main__":
    unittest.main()
