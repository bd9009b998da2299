"""Bad input gets a one-line error naming the place, and nothing is lost or started."""
import os
import time
import unittest

from harness import PY, TuneTest


class ConfigErrorTest(TuneTest):
    def config_error(self, yaml, *extra):
        self.write("exp.yaml", yaml)
        p = self.tune("run", "exp.yaml", *extra, check=2)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertTrue(p.stderr.startswith("tune: error: "), p.stderr)
        self.assertFalse(os.path.exists(self.storage), "a config error must start nothing")
        return p.stderr

    def test_malformed_yaml(self):
        err = self.config_error("trial: {command: [a\nparam_space: {x: 1}\n")
        self.assertRegex(err, r"exp\.yaml:\d+:\d+: invalid YAML")

    def test_unknown_key_with_suggestion(self):
        err = self.config_error("""
            trial: {command: [a]}
            param_space: {x: 1}
            checkpoint_config:
              num_to_kep: 2
        """)
        self.assertEqual(err, "tune: error: exp.yaml:4:3: unknown key 'num_to_kep' in checkpoint_config "
                              "(did you mean 'num_to_keep'?)\n")

    def test_wrong_type(self):
        self.assertIn("exp.yaml:3:14: num_samples: expected an integer, got 'lots'",
                      self.config_error("trial: {command: [a]}\nparam_space: {x: 1}\nnum_samples: lots\n"))

    def test_empty_param_space(self):
        self.assertIn("param_space is empty", self.config_error("trial: {command: [a]}\nparam_space: {}\n"))

    def test_lo_greater_than_hi(self):
        self.assertIn("lo > hi", self.config_error("trial: {command: [a]}\nparam_space: {lr: {uniform: [1, 0]}}\n"))

    def test_loguniform_non_positive(self):
        self.assertIn("lo must be > 0",
                      self.config_error("trial: {command: [a]}\nparam_space: {lr: {loguniform: [0, 1]}}\n"))

    def test_placeholder_naming_no_key(self):
        self.assertIn("placeholder '{learning_rate}' names no key",
                      self.config_error("trial: {command: [a, '{learning_rate}']}\nparam_space: {lr: 1}\n"))

    def test_bad_set_value(self):
        err = self.config_error("trial: {command: [a]}\nparam_space: {x: 1}\n", "--set", "max_concurrent_trials=-3")
        self.assertIn("--set max_concurrent_trials", err)

    def test_bad_flag(self):
        self.write("exp.yaml", "trial: {command: [a]}\nparam_space: {x: 1}\n")
        p = self.tune("run", "exp.yaml", "--resume=sometimes", check=2)
        self.assertIn("--resume", p.stderr)

    def test_missing_file(self):
        p = self.tune("run", "nope.yaml", check=2)
        self.assertIn("nope.yaml", p.stderr)


class TrialMisbehaviourTest(TuneTest):
    def test_command_not_found_is_a_trial_error_and_the_others_go_on(self):
        self.write("ok.sh", "#!/bin/sh\necho '{\"loss\": 1}'\n", 0o755)
        self.write("exp.yaml", """
            name: nf
            trial: {command: ["{prog}"]}
            param_space: {prog: {grid_search: ["./ok.sh", "no-such-program-xyz", "./ok.sh"]}}
            failure_config: {max_failures: 3}
        """)
        p = self.tune("run", "exp.yaml", check=1)
        trials = self.trials("nf")
        self.assertEqual([t["status"] for t in trials], ["TERMINATED", "ERROR", "TERMINATED"])
        self.assertEqual(trials[1]["error"], "command not found: no-such-program-xyz")
        self.assertEqual(trials[1]["attempt"], 1)
        self.assertIn("command not found: no-such-program-xyz", p.stdout)

    def test_a_trial_that_forges_its_exit_record_is_not_believed(self):
        # A trial can write anything in its own dir, e.g. junk named like an exit record (the
        # supervisor's record is elsewhere and checked: test_supervisor.py).
        self.write("forge.py", """
            import json, os, sys, time
            bad = [{"attempt": "1", "reason": 5}, {"attempt": 1, "reason": ["x"], "error": 7},
                   "not json {", [1, 2]]
            path = os.path.join(os.environ["TUNE_TRIAL_DIR"], "exit.json")
            for i, b in enumerate(bad):
                with open(path, "w") as f:
                    f.write(b if isinstance(b, str) else json.dumps(b))
                print(json.dumps({"i": i}), flush=True)
                time.sleep(1.2)  # past the driver's 1 s rescan
            print(json.dumps({"i": 9}), flush=True)
        """)
        self.write("exp.yaml", """
            name: forged
            trial: {command: ["%s", "forge.py"]}
            param_space: {x: 1}
        """ % PY)
        self.tune("run", "exp.yaml", check=0)
        t = self.trials("forged")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual([r["i"] for r in self.results("forged", t)], [0, 1, 2, 3, 9])

    def test_junk_huge_lines_and_silence(self):
        self.write("junk.py", """
            import sys, os
            out = sys.stdout.buffer
            mode = sys.argv[1]
            if mode == "binary":
                out.write(os.urandom(4096).replace(b"\\n", b"x") + b"\\n")
                out.write(b'{"loss": 0.5}\\n')
            elif mode == "huge":
                chunk = b"y" * (1 << 20)
                out.write(b'{"big": "')
                for _ in range(100):
                    out.write(chunk)
                out.write(b'"}\\n')
                out.write(b'{"loss": 0.25}\\n')
            elif mode == "partial":
                out.write(b'{"loss": 0.75}')   # no final newline
            out.flush()
        """)
        self.write("exp.yaml", """
            name: junk
            trial: {command: ["%s", "junk.py", "{mode}"]}
            param_space: {mode: {grid_search: [binary, huge, silent, partial]}}
        """ % PY)
        t0 = time.time()
        self.tune("run", "exp.yaml", "--quiet", check=0, timeout=120)
        trials = {t["config"]["mode"]: t for t in self.trials("junk")}
        for t in trials.values():
            self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual(trials["binary"]["last_result"]["loss"], 0.5)
        self.assertEqual(trials["huge"]["iteration"], 1)   # the 100 MiB line was not parsed
        self.assertEqual(trials["huge"]["last_result"]["loss"], 0.25)
        self.assertEqual(trials["silent"]["iteration"], 0)
        self.assertEqual(trials["partial"]["last_result"]["loss"], 0.75)
        with open(os.path.join(self.exp_dir("junk"), "tune.log")) as f:
            self.assertIn("exceeds the 16 MiB limit", f.read())
        self.assertLess(time.time() - t0, 60)

    def test_trial_ignoring_sigterm_is_killed_after_the_grace_period(self):
        self.write("stubborn.py", """
            import signal, time, tune_trial
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            i = 0
            while True:
                i += 1
                tune_trial.report({"i": i})
                time.sleep(0.05)
        """)
        self.write("exp.yaml", """
            name: stubborn
            trial: {command: ["%s", "stubborn.py"]}
            param_space: {x: 1}
            stop: {training_iteration: 3}
        """ % PY)
        env = dict(self.env, TUNE_STOP_GRACE_S="1")
        t0 = time.time()
        self.tune("run", "exp.yaml", "--quiet", check=0, env=env, timeout=60)
        self.assertLess(time.time() - t0, 15)
        t = self.trials("stubborn")[0]
        self.assertEqual(t["status"], "TERMINATED")
        self.assertEqual(self.iterations("stubborn", t), [1, 2, 3])

    def test_shell_metacharacters_reach_the_trial_as_literal_words(self):
        marker = os.path.join(self.dir, "pwned")
        self.write("argv.py", """
            import json, os, sys
            with open(os.path.join(os.environ["TUNE_TRIAL_DIR"], "argv.json"), "w") as f:
                json.dump(sys.argv[1:], f)
        """)
        values = ["$(touch %s)" % marker, "; touch %s" % marker, "`touch %s`" % marker, "a 'b' \"c\" d", "| cat"]
        import json as _json
        self.write("exp.yaml", """
            name: meta
            trial: {command: ["%s", "argv.py", "--v={v}", "{v}"]}
            param_space: {v: {grid_search: %s}}
        """ % (PY, _json.dumps(values)))
        self.tune("run", "exp.yaml", "--quiet", check=0)
        self.assertFalse(os.path.exists(marker))
        for t in self.trials("meta"):
            with open(os.path.join(self.exp_dir("meta"), t["trial_name"], "argv.json")) as f:
                argv = _json.load(f)
            v = t["config"]["v"]
            self.assertEqual(argv, ["--v=" + v, v])


if __name__ == "__main__":
    unittest.main()
