"""Bad input gets a one-line error naming the place, and nothing is lost or started."""
import json
import math
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

    def test_an_environment_variable_that_is_not_utf8_is_left_out_and_the_trials_run(self):
        # A Latin-1 path in the user's shell, nothing to do with tune, failed every trial
        # ("its command or environment is not valid UTF-8"): it is left out, named once.
        import subprocess
        from harness import TUNE
        self.write("t.py", """
            import json, os
            print(json.dumps({"seen": os.environ.get("OTHER"),
                              "latin": os.environb.get(b"LATIN1_PATH") is not None}))
            """)
        self.write("exp.yaml", """
            name: env8
            trial: {command: ["%s", "t.py"]}
            param_space: {x: {grid_search: [1, 2]}}
        """ % PY)
        env = {k.encode(): v.encode() for k, v in self.env.items()}
        env[b"LATIN1_PATH"] = b"/data/caf\xe9"
        env[b"OTHER"] = b"abc"
        p = subprocess.run([TUNE, "run", "exp.yaml"], cwd=self.dir, env=env,
                           capture_output=True, timeout=60)
        err = p.stderr.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("not passed to trials: environment variable(s) LATIN1_PATH (not valid UTF-8)",
                      err)
        for t in self.trials("env8"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual([(r["seen"], r["latin"]) for r in self.results("env8", t)],
                             [("abc", False)])

    def test_trial_env_may_not_set_what_tune_sets_per_trial_nor_exceed_linux_limit(self):
        # CUDA_VISIBLE_DEVICES or TUNE_CONFIG in trial.env were silently replaced (a trial
        # meant for GPU 0 ran on the CPU); a value over 128 KiB made every trial fail with
        # "Argument list too long". Both are refused when the file is read, naming the key.
        for key, value, said in (
                ("CUDA_VISIBLE_DEVICES", "0", "trial.env.CUDA_VISIBLE_DEVICES: tune sets it for "
                 "each trial from the GPUs it gives the trial (trial.resources.gpu): remove it "
                 "here"),
                ("TUNE_CONFIG", "{}", "trial.env.TUNE_CONFIG: tune sets it for each trial: "
                 "remove it here"),
                ("BIG", "x" * 140000, "trial.env.BIG: 140000 bytes; Linux passes at most 131070 "
                 "in one variable")):
            self.write("exp.yaml", """
                name: envk
                trial: {command: ["true"], env: {%s: "%s"}}
                param_space: {x: 1}
            """ % (key, value))
            for cmd in (("validate", "exp.yaml"), ("run", "exp.yaml")):
                r = self.tune(*cmd)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(said, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_a_config_over_128k_reaches_the_trial_through_its_params_json(self):
        # TUNE_CONFIG is one environment variable, which Linux caps at 128 KiB: every trial
        # with a bigger config failed with "Argument list too long". It is left out with a
        # warning, and the helpers read TUNE_CONFIG_FILE instead.
        self.write("t.py", """
            import os, tune_trial
            c = tune_trial.config()
            tune_trial.report({"n": len(c["big"]), "env": "TUNE_CONFIG" in os.environ})
            """)
        self.write("exp.yaml", """
            name: bigc
            trial: {command: ["%s", "t.py"]}
            param_space: {big: [%s], x: {grid_search: [1, 2]}}
        """ % (PY, ", ".join(["123456"] * 30000)))
        r = self.tune("run", "exp.yaml", check=0, timeout=120)
        self.assertIn("TUNE_CONFIG is not set, the config is in TUNE_CONFIG_FILE only", r.stderr)
        for t in self.trials("bigc"):
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual([(row["n"], row["env"]) for row in self.results("bigc", t)],
                             [(30000, False)])

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

    def test_a_long_non_ascii_error_is_cut_whole_and_still_read(self):
        # "command not found: " and a 1,200-byte name of two-byte characters: the supervisor
        # cuts the error to fit its exit record, never inside a character. Before, a cut at
        # byte 1,024 split one, the record was no JSON, and the trial was said to have lost
        # its supervisor ("gone without recording the trial's exit").
        name = "/nonexistent/a" + "\u00e9" * 600
        self.write("exp.yaml", """
            name: longerr
            trial: {command: ["%s"]}
            param_space: {x: 1}
        """ % name)
        self.tune("run", "exp.yaml", check=1)
        t = self.trials("longerr")[0]
        self.assertEqual(t["status"], "ERROR")
        self.assertTrue(t["error"].startswith("command not found: /nonexistent/a\u00e9"), t["error"])
        self.assertLessEqual(len(t["error"].encode()), 512)

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


class UntrustedInputTest(TuneTest):
    """Hostile or broken bytes in the experiment file, --set and trial output: an error naming
    the place, or a warning, never a crash or a wrong trial count."""

    def config_error_bytes(self, yaml_bytes, *extra, timeout=20):
        with open(os.path.join(self.dir, "exp.yaml"), "wb") as f:
            f.write(yaml_bytes)
        t0 = time.time()
        p = self.tune("run", "exp.yaml", *extra, check=2, timeout=timeout)
        self.assertLess(time.time() - t0, 10)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertTrue(p.stderr.startswith("tune: error: "), p.stderr)
        self.assertFalse(os.path.exists(self.storage), "a config error must start nothing")
        return p.stderr

    def test_recursive_alias_is_an_error_not_a_crash(self):
        err = self.config_error_bytes(b"trial: {command: [a]}\nparam_space: {a: &x [*x]}\n")
        self.assertIn("exp.yaml:2:22: recursive alias '*x'", err)

    def bomb(self, levels):
        """A "billion laughs" param_space: `levels` levels of 10 aliases (10^levels nodes)."""
        lines = [b"trial: {command: [a]}", b"param_space:",
                 b"  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
        for i in range(1, levels + 1):
            lines.append(b"  a%d: &a%d [%s]" % (i, i, b", ".join([b"*a%d" % (i - 1)] * 10)))
        return b"\n".join(lines) + b"\n"

    def test_alias_bomb_is_refused_fast(self):
        # 9 levels expand to ~17 GB in memory unchecked; 6 levels (just over 1 M nodes) too.
        for levels in (9, 6):
            err = self.config_error_bytes(self.bomb(levels))
            self.assertRegex(err, r"exp\.yaml:\d+:\d+: the document expands to more than 1,000,000 nodes")

    def test_non_utf8_yaml_and_set_values_are_config_errors(self):
        err = self.config_error_bytes(b'trial: {command: [a]}\nparam_space: {a: "x\xffy"}\n')
        self.assertIn("exp.yaml:2:20: not valid UTF-8", err)
        # A --set value: argv bytes (surrogateescape turns \udcff into the byte 0xff).
        err = self.config_error_bytes(b"trial: {command: [a]}\nparam_space: {a: 1}\n",
                                      "--set", "param_space.a=x\udcffy")
        self.assertIn("--set param_space.a: not valid UTF-8", err)

    def test_nul_in_a_yaml_string_is_a_config_error(self):
        err = self.config_error_bytes(b'trial: {command: [a, "--v={a}"]}\nparam_space: {a: "a\\0b"}\n')
        self.assertIn("exp.yaml:2:18: a string holds a NUL byte", err)

    def test_num_samples_times_grid_does_not_wrap(self):
        err = self.config_error_bytes(b"trial: {command: [a]}\n"
                                      b"param_space: {g: {grid_search: [1, 2, 3, 4, 5]}}\n"
                                      b"num_samples: 3689348814741910324\n")
        self.assertIn("exp.yaml:3:14: num_samples x grid sizes yields more than 2^64 trials", err)

    def test_nan_and_infinity_results_are_kept_and_rank_last(self):
        # What a diverged PyTorch loss looks like through json.dumps, plus junk in between.
        self.write("diverge.py", r"""
            import json, os, sys
            out = sys.stdout.buffer
            def result(loss, i):
                d = os.path.join(os.environ["TUNE_TRIAL_DIR"], "ck_%d" % i)
                os.makedirs(d)
                open(os.path.join(d, "w"), "w").write(str(i))
                out.write(json.dumps({"loss": loss, "checkpoint": d}).encode() + b"\n")
            result(0.5, 1)
            out.write(b"epoch 1 done\n")                      # print debugging
            result(float("nan"), 2)
            out.write(b'{"loss": "caf\xe9"}\n')                # not UTF-8: line 4
            out.write(b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}\n")   # far too deep
            result(0.3, 3)
            result(float("inf"), 4)
            result(0.4, 5)
            result(float("nan"), 6)
            out.flush()
        """)
        self.write("exp.yaml", """
            name: nan
            trial: {command: ["%s", "diverge.py"]}
            param_space: {x: 1}
            metric: loss
            mode: max
            checkpoint_config: {num_to_keep: 3, checkpoint_score_attribute: loss,
                                checkpoint_score_order: max}
        """ % PY)
        self.tune("run", "exp.yaml", "--quiet", check=0)

        def check_state():
            t = self.trials("nan")[0]
            self.assertEqual(t["status"], "TERMINATED")
            self.assertEqual(t["iteration"], 6)
            self.assertTrue(math.isnan(t["last_result"]["loss"]))
            self.assertTrue(math.isnan(t["metrics"]["loss"]["last"]))
            # Retention by max: 0.5, 0.4, 0.3 kept; NaN and Infinity rank last (Infinity too,
            # though it is the largest number).
            self.assertEqual([c["seq"] for c in t["checkpoints"]], [1, 3, 5])
            return t

        t = check_state()
        self.assertEqual(self.iterations("nan", t), [1, 2, 3, 4, 5, 6])   # nothing shifted
        tdir = os.path.join(self.exp_dir("nan"), t["trial_name"])
        with open(os.path.join(tdir, "result.json")) as f:
            text = f.read()
        self.assertIn('"loss":NaN', text)
        self.assertIn('"loss":Infinity', text)
        losses = [r["loss"] for r in self.results("nan", t)]
        self.assertTrue(math.isnan(losses[1]) and math.isinf(losses[3]) and math.isnan(losses[5]))
        with open(os.path.join(tdir, "progress.csv")) as f:
            rows = f.read().splitlines()
        col = rows[0].split(",").index("loss")
        self.assertEqual([r.split(",")[col] for r in rows[1:]], ["0.5", "", "0.3", "", "0.4", ""])
        with open(os.path.join(self.exp_dir("nan"), "tune.log")) as f:
            log = f.read()
        self.assertEqual(log.count("holds NaN or Infinity"), 1, log)
        self.assertIn("output line 4 of this attempt starts like a result but is not valid UTF-8", log)
        self.assertIn("output line 5 of this attempt starts like a result but nests deeper than 256 "
                      "levels", log)

        # checkpoints ls/best rank a non-finite score last, whichever the order.
        p = self.tune("checkpoints", "ls", "nan", "--format", "json", check=0)
        self.assertEqual([r["checkpoint"] for r in json.loads(p.stdout)],
                         ["checkpoint_000001", "checkpoint_000005", "checkpoint_000003"])
        p = self.tune("checkpoints", "ls", "nan", "--mode", "min", "--format", "json", check=0)
        self.assertEqual([r["checkpoint"] for r in json.loads(p.stdout)],
                         ["checkpoint_000003", "checkpoint_000005", "checkpoint_000001"])
        p = self.tune("checkpoints", "best", "nan", check=0)
        self.assertTrue(p.stdout.strip().endswith("checkpoint_000001"), p.stdout)

        # The state keeps NaN (not null) through a resume that reads and rewrites it.
        self.tune("run", "exp.yaml", "--resume=auto", "--quiet", check=0)
        check_state()
        with open(os.path.join(self.exp_dir("nan"), "experiment_state.json")) as f:
            self.assertIn('"loss":NaN', f.read())

    def test_a_spec_json_nested_too_deep_is_named_as_corrupt_on_resume(self):
        # .tune/spec.json (what a resume compares the experiment file with) nested 100,000
        # deep: read depth-limited, it is refused as corrupt; it used to be taken for a changed
        # 'scheduler', which sent the user looking in the wrong place.
        self.write("exp.yaml", """
            name: deep
            trial: {command: ["true"]}
            param_space: {x: 1}
            """)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        with open(os.path.join(self.exp_dir("deep"), ".tune", "spec.json"), "w") as f:
            f.write('{"scheduler": ' + "[" * 100000 + "]" * 100000 + "}")
        p = self.tune("run", "exp.yaml", "--resume=auto", "--quiet")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("spec.json: not valid JSON", p.stderr)
        self.assertNotIn("scheduler", p.stderr)

    def test_an_unexpected_exception_is_one_line_and_exit_1_not_an_abort(self):
        # A symlink loop under the storage path made `tune ls` die of an uncaught
        # std::filesystem error (abort, rc 134). Whatever `ls` makes of it, tune never aborts.
        os.makedirs(self.storage)
        os.symlink("loop", os.path.join(self.storage, "loop"))
        p = self.tune("ls")
        self.assertIn(p.returncode, (0, 1), p.stderr)
        self.assertNotIn("terminate called", p.stderr)
        if p.returncode == 1:
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            self.assertTrue(p.stderr.startswith("tune: error: "), p.stderr)


if __name__ == "__main__":
    unittest.main()
