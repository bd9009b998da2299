"""External searchers end to end: the driver SIGKILLed at random instants with the toy
searcher (tests/fixtures/toy_searcher.py) and tpe resumes to the configs of an uninterrupted
run; tune_optuna (Debian's python3-optuna) runs a small experiment and survives a kill."""
import json
import os
import random
import signal
import subprocess
import time
import unittest

from harness import PY, SOURCE, TuneTest

TOY = os.path.join(SOURCE, "tests", "fixtures", "toy_searcher.py")
SYSTEM_PY = "/usr/bin/python3"


def have_optuna():
    return subprocess.run([SYSTEM_PY, "-c", "import optuna"], capture_output=True).returncode == 0


class ExternalSearchTest(TuneTest):
    def experiment(self, name, search_alg, samples=10, concurrency=1):
        self.write("trial.py", """
            import json, os, time
            x = json.loads(os.environ["TUNE_CONFIG"])["x"]
            time.sleep(0.3)
            print(json.dumps({"loss": (x - 0.3) ** 2, "done": True}), flush=True)
            """)
        return self.write(name + ".yaml", f"""
            trial:
              command: ["{PY}", "trial.py"]
            param_space:
              x: {{uniform: [-5, 5]}}
            num_samples: {samples}
            seed: 11
            metric: loss
            mode: min
            max_concurrent_trials: {concurrency}
            search_alg: {search_alg}
            """)

    def configs(self, name):
        trials = sorted(self.trials(name), key=lambda t: t["trial_id"])
        for t in trials:
            self.assertEqual(t["status"], "TERMINATED", t["trial_name"])
        return [t["config"]["x"] for t in trials]

    def kill_and_resume(self, name, seed, min_kills):
        rng = random.Random(seed)
        kills = 0
        for _ in range(40):
            p = self.start_tune("run", name + ".yaml", "--resume=auto")
            time.sleep(rng.uniform(0.2, 1.2))
            if p.poll() is not None:
                out, err = p.communicate()
                self.assertEqual(p.returncode, 0, err)
                break
            p.send_signal(signal.SIGKILL)
            p.communicate()
            kills += 1
        self.assertGreaterEqual(kills, min_kills, "the experiment ended too soon")
        self.tune("run", name + ".yaml", "--resume=auto", check=0, timeout=300)

    def check_sigkilled_equals_whole(self, search_alg, seed):
        self.experiment("whole", search_alg)
        self.tune("run", "whole.yaml", check=0, timeout=300)
        whole = self.configs("whole")
        self.assertEqual(len(whole), 10)
        self.experiment("crashed", search_alg)
        self.kill_and_resume("crashed", seed, 3)
        self.assertEqual(self.configs("crashed"), whole)

    def test_sigkilled_external_search_suggests_what_an_uninterrupted_one_does(self):
        self.check_sigkilled_equals_whole(
            f'{{type: external, command: ["{SYSTEM_PY}", "{TOY}"]}}', 20261125)
        with open(os.path.join(self.exp_dir("crashed"), "searcher.log")) as f:
            self.assertNotIn("Traceback", f.read())

    def test_sigkilled_external_search_at_concurrency_3_replays_exactly(self):
        # With several trials running, which completes before which suggestion depends on
        # timing, so even two uninterrupted runs differ. What a resume must keep is the
        # searcher's history: replayed in the order it was first sent, nothing lost or doubled.
        # The toy's answer to a replayed suggest depends on everything before it, so it gives
        # each trial the config the trial already has only if the history came back exact.
        self.experiment("conc", f'{{type: external, command: ["{SYSTEM_PY}", "{TOY}"]}}',
                        samples=14, concurrency=3)
        self.kill_and_resume("conc", 20261127, 3)
        trials = self.trials("conc")
        self.assertEqual(len(trials), 14)
        state = self.state("conc")["search_alg"]
        with open(os.path.join(self.exp_dir("conc"), state["dir"], "toy.json")) as f:
            toy = json.load(f)
        self.assertEqual({t["trial_id"]: t["config"]["x"] for t in trials},
                         {tid: c["x"] for tid, c in toy["given"].items()})
        self.assertEqual(sorted(toy["completed"]), sorted(t["trial_id"] for t in trials))
        with open(os.path.join(self.exp_dir("conc"), "searcher_state", "ops.jsonl")) as f:
            head = json.loads(f.readline())
        self.assertEqual(head["op"], "base")  # the journal was compacted
        self.assertGreater(head["ops"], 0)
        with open(os.path.join(self.exp_dir("conc"), "searcher.log")) as f:
            self.assertNotIn("Traceback", f.read())

    def test_sigkilled_tpe_suggests_what_an_uninterrupted_one_does(self):
        self.check_sigkilled_equals_whole("{type: tpe, n_startup_trials: 4}", 20261126)

    def test_a_searcher_that_dies_ends_the_run_with_one_line_and_resume_continues(self):
        marker = os.path.join(self.dir, "died")
        self.experiment("dies", f'{{type: external, command: ["{SYSTEM_PY}", "{TOY}", '
                                f'"--misbehave", "die", "--after", "2", "--once", "{marker}"]}}',
                        samples=4)
        p = self.tune("run", "dies.yaml", check=1, timeout=120)
        errors = [l for l in p.stderr.splitlines() if "error" in l]
        self.assertEqual(len(errors), 1, p.stderr)
        self.assertIn("it exited (exit code 3) while answering suggest (trial 00002)", errors[0])
        self.assertIn("dying on purpose", errors[0])
        self.assertEqual(len(self.trials("dies")), 2)
        # It died once only: the same experiment resumes and ends.
        p = self.tune("run", "dies.yaml", "--resume=auto", timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(self.configs("dies")), 4)

    def test_a_searcher_that_waits_while_nothing_runs_ends_the_run_and_resume_continues(self):
        # Waiting for results while no trial runs: none can come. After search_alg.timeout_s the
        # run ends as after a hang (exit 1, one line, state saved) instead of idling for ever.
        marker = os.path.join(self.dir, "waited")
        self.experiment("waits", f'{{type: external, timeout_s: 2, command: ["{SYSTEM_PY}", '
                                 f'"{TOY}", "--misbehave", "wait-forever", "--after", "2", '
                                 f'"--once", "{marker}"]}}', samples=4)
        p = self.tune("run", "waits.yaml", check=1, timeout=120)
        errors = [l for l in p.stderr.splitlines() if "error" in l]
        self.assertEqual(len(errors), 1, p.stderr)
        self.assertIn("has given no config for 2 s while no trial runs", errors[0])
        self.assertEqual(len(self.trials("waits")), 2)
        p = self.tune("run", "waits.yaml", "--resume=auto", timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(self.configs("waits")), 4)

    def test_validate_says_which_configs_are_known_in_advance(self):
        self.experiment("tpe", "{type: tpe, n_startup_trials: 3, points_to_evaluate: [{x: 0.5}]}")
        out = self.tune("validate", "tpe.yaml", check=0).stdout
        self.assertIn("tpe: the first 3 trial(s) are known in advance", out)
        self.assertIn("the other 7 are chosen from the results", out)
        listed = [l for l in out.splitlines() if l.startswith("0000")]
        self.assertEqual(len(listed), 3)
        self.assertIn('{"x":0.5}', listed[0])
        self.experiment("ext", f'{{type: external, command: ["{SYSTEM_PY}", "{TOY}"]}}')
        out = self.tune("validate", "ext.yaml", check=0).stdout
        self.assertIn("10 trial(s) are chosen by the searcher process during the run", out)
        self.assertFalse([l for l in out.splitlines() if l.startswith("0000")])
        js = json.loads(self.tune("validate", "ext.yaml", "--format", "json", check=0).stdout)
        self.assertEqual((js["search_alg"], js["trials"]), ("external", []))

    @unittest.skipUnless(have_optuna(), "needs Debian's python3-optuna (scripts/setup.sh --test)")
    def test_tune_optuna_runs_an_experiment_and_resumes_its_study(self):
        search = (f'{{type: external, command: ["{SYSTEM_PY}", "-m", "tune_optuna", "--sampler", '
                  f'"TPESampler", "--sampler-kwargs", \'{{"n_startup_trials": 4}}\']}}')
        self.experiment("opt", search, samples=12, concurrency=2)
        p = self.start_tune("run", "opt.yaml")
        self.wait_for(lambda: os.path.exists(os.path.join(self.exp_dir("opt"), "searcher_state")),
                      timeout=60, what="a first snapshot")
        time.sleep(0.5)
        p.send_signal(signal.SIGKILL)
        p.communicate()
        self.tune("run", "opt.yaml", "--resume=auto", check=0, timeout=300)
        xs = self.configs("opt")
        self.assertEqual(len(xs), 12)
        self.assertTrue(all(-5 <= x <= 5 for x in xs))
        state = self.state("opt")["search_alg"]
        self.assertEqual(sorted(state["completed"]), sorted(t["trial_id"] for t in self.trials("opt")))
        self.assertTrue(os.path.exists(os.path.join(self.exp_dir("opt"), state["dir"], "study.pkl")))
        # The study saw every trial: the last snapshot holds 12 finished Optuna trials.
        probe = subprocess.run(
            [SYSTEM_PY, "-c", "import pickle,sys; s=pickle.load(open(sys.argv[1],'rb'))['study'];"
             "print(sum(t.state.name == 'COMPLETE' for t in s.trials))",
             os.path.join(self.exp_dir("opt"), state["dir"], "study.pkl")],
            capture_output=True, text=True, env=dict(self.env, PYTHONPATH=os.path.join(
                SOURCE, "lib", "helpers", "python")))
        self.assertEqual(probe.stdout.strip(), "12", probe.stderr)
        self.assertEqual(len(set(xs)), 12)

    @unittest.skipUnless(have_optuna(), "needs Debian's python3-optuna (scripts/setup.sh --test)")
    def test_tune_optuna_maps_every_bounded_kind_for_each_sampler(self):
        space = {"u": {"uniform": [-1, 1]}, "lu": {"loguniform": [1e-4, 1e-1]},
                 "qu": {"quniform": [0, 1, 0.25]}, "qlu": {"qloguniform": [1, 100, 5]},
                 "ri": {"randint": [0, 3]}, "lri": {"lograndint": [1, 50]},
                 "qri": {"qrandint": [3, 20, 5]}, "qlri": {"qlograndint": [1, 64, 4]},
                 "n": {"randn": [10, 2]}, "qn": {"qrandn": [0, 1, 0.25]},
                 "pin": {"randn": [3, 0]}, "nested": {"c": {"choice": ["a", [1, 2], {"k": 1}]}, "const": 9}}
        env = dict(self.env, PYTHONPATH=os.path.join(SOURCE, "lib", "helpers", "python"))

        def session(sampler, space, n):
            lines = [json.dumps({"op": "init", "space": space, "metric": "loss", "mode": "min",
                                 "seed": 3, "state": None})]
            for i in range(n):
                lines.append(json.dumps({"op": "suggest", "trial_id": "%05d" % i}))
                lines.append(json.dumps({"op": "complete", "trial_id": "%05d" % i,
                                         "result": {"loss": float(i % 3)},
                                         "status": "TERMINATED"}))
            p = subprocess.run([SYSTEM_PY, "-m", "tune_optuna", "--sampler", sampler],
                               input="\n".join(lines) + "\n", capture_output=True, text=True,
                               env=env, timeout=120)
            return [json.loads(l) for l in p.stdout.splitlines()]

        for sampler in ["TPESampler", "CmaEsSampler", "NSGAIISampler", "QMCSampler", "random"]:
            answers = session(sampler, space, 6)
            self.assertEqual(answers[0], {"ok": True}, sampler)
            self.assertEqual(len(answers), 7, sampler)
            for a in answers[1:]:
                c = a["config"]
                self.assertTrue(-1 <= c["u"] <= 1 and 1e-4 <= c["lu"] <= 1e-1, c)
                self.assertIn(c["qu"], [0, 0.25, 0.5, 0.75, 1.0])
                self.assertEqual(c["qlu"] % 5, 0)
                self.assertIn(c["ri"], [0, 1, 2])
                self.assertTrue(1 <= c["lri"] < 50 and isinstance(c["lri"], int), c)
                self.assertIn(c["qri"], [5, 10, 15, 20])  # multiples of q, as random search
                self.assertTrue(4 <= c["qlri"] <= 64 and c["qlri"] % 4 == 0, c)
                self.assertTrue(2 <= c["n"] <= 18, c)  # mean +- 4 sd
                self.assertTrue(-4 <= c["qn"] <= 4 and c["qn"] * 4 == round(c["qn"] * 4), c)
                self.assertEqual(c["pin"], 3)
                self.assertIn(c["nested"]["c"], ["a", [1, 2], {"k": 1}])
                self.assertEqual(c["nested"]["const"], 9)
        # A trial it did not suggest (a point_to_evaluate) joins the study from its config.
        save = os.path.join(self.dir, "snap")
        os.makedirs(save)
        init = {"op": "init", "space": {"x": {"uniform": [0, 1]}, "c": {"choice": [[1], [2]]}},
                "metric": "loss", "mode": "min", "seed": 1, "state": None}
        lines = [init, {"op": "complete", "trial_id": "00000", "result": {"loss": 0.5},
                        "status": "TERMINATED", "config": {"x": 0.25, "c": [2]}},
                 {"op": "save", "path": save}]
        p = subprocess.run([SYSTEM_PY, "-m", "tune_optuna"], env=env, text=True, timeout=120,
                           input="".join(json.dumps(l) + "\n" for l in lines),
                           capture_output=True)
        self.assertEqual(p.stdout.splitlines()[-1], json.dumps({"saved": save}), p.stderr)
        probe = subprocess.run(
            [SYSTEM_PY, "-c", "import pickle,sys; t=pickle.load(open(sys.argv[1],'rb'))"
             "['study'].trials; print([(x.params, x.value, x.state.name) for x in t])",
             os.path.join(save, "study.pkl")], capture_output=True, text=True, env=env)
        self.assertEqual(probe.stdout.strip(), "[({'x': 0.25, 'c': 1}, 0.5, 'COMPLETE')]",
                         probe.stderr)
        refused = session("TPESampler", {"x": {"grid_search": [0, 1]}}, 1)
        self.assertEqual(refused[0]["ok"], False)
        self.assertIn("grid_search parameter 'x'", refused[0]["error"])


    @unittest.skipUnless(have_optuna(), "needs Debian's python3-optuna (scripts/setup.sh --test)")
    def test_tune_optuna_tells_optuna_every_failed_trial_as_fail(self):
        # status ERROR (even with a metric in its last result), a NaN or infinite metric, and no
        # metric at all are FAIL; a failed trial it did not suggest joins the study as FAIL too.
        env = dict(self.env, PYTHONPATH=os.path.join(SOURCE, "lib", "helpers", "python"))
        save = os.path.join(self.dir, "snap-fail")
        os.makedirs(save)
        ops = [{"op": "init", "space": {"x": {"uniform": [0, 1]}}, "metric": "loss",
                "mode": "min", "seed": 5, "state": None}]
        ops += [{"op": "suggest", "trial_id": "%05d" % i} for i in range(5)]
        ends = [({"loss": 1.0}, "TERMINATED"), ({"loss": 0.5}, "ERROR"), (None, "ERROR"),
                ({"loss": float("nan")}, "TERMINATED"), ({"acc": 1.0}, "TERMINATED")]
        ops += [{"op": "complete", "trial_id": "%05d" % i, "result": r, "status": st}
                for i, (r, st) in enumerate(ends)]
        ops += [{"op": "complete", "trial_id": "restored-00009", "result": {"loss": 0.1},
                 "status": "ERROR", "config": {"x": 0.5}},
                {"op": "save", "path": save}]
        p = subprocess.run([SYSTEM_PY, "-m", "tune_optuna"], env=env, text=True, timeout=120,
                           input="".join(json.dumps(o) + "\n" for o in ops),  # NaN as Python writes it
                           capture_output=True)
        self.assertEqual(p.stdout.splitlines()[-1], json.dumps({"saved": save}), p.stderr)
        probe = subprocess.run(
            [SYSTEM_PY, "-c", "import pickle,sys; t=pickle.load(open(sys.argv[1],'rb'))"
             "['study'].trials; print([(x.state.name, x.value) for x in t])",
             os.path.join(save, "study.pkl")], capture_output=True, text=True, env=env)
        self.assertEqual(probe.stdout.strip(), str([("COMPLETE", 1.0)] + [("FAIL", None)] * 5),
                         probe.stderr)


if __name__ == "__main__":
    unittest.main()
