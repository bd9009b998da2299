"""The bash completion (apps/tune/completion/tune.bash), run by bash itself as the shell would
run it: COMP_WORDS/COMP_CWORD set, _tune called, COMPREPLY read back. Its flags are checked
against each subcommand's --help, so the two cannot drift apart. The zsh one runs in an
interactive zsh on a pseudo-terminal (tests/tools/zsh_complete.zsh)."""
import os
import re
import shutil
import subprocess
import time
import unittest

from harness import SOURCE, TUNE, TuneTest

BASH_COMPLETION = os.path.join(SOURCE, "apps", "tune", "completion", "tune.bash")
ZSH_COMPLETION = os.path.join(SOURCE, "apps", "tune", "completion", "_tune")
ZSH_DRIVER = os.path.join(SOURCE, "tests", "tools", "zsh_complete.zsh")
SUBCOMMANDS = ["run", "validate", "status", "ls", "checkpoints ls", "checkpoints best", "report",
               "export", "stop"]


class CompletionTest(TuneTest):
    def complete(self, *words, env=None, cwd=None, cword=None):
        """What _tune offers for the command line `words` (the word being completed is the last
        one, or words[cword - 1]: `tune` is word 0), sorted."""
        script = ('source "$1"; cword=$2; shift 2; COMP_WORDS=("$@"); '
                  'COMP_CWORD=${cword:-$(($# - 1))}; _tune; printf "%s\\n" "${COMPREPLY[@]}"')
        p = subprocess.run(["bash", "--norc", "-c", script, "bash", BASH_COMPLETION,
                            "" if cword is None else str(cword), "tune", *words],
                           capture_output=True, text=True, env=env or self.env,
                           cwd=cwd or self.dir, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        return sorted(w for w in p.stdout.split("\n") if w)

    def make_experiment(self, root, name, trial_ids=(), age_s=0):
        d = os.path.join(root, name)
        os.makedirs(d)
        state = os.path.join(d, "experiment_state.json")
        with open(state, "w") as f:
            f.write("{}")
        t = time.time() - age_s
        os.utime(state, (t, t))
        for tid in trial_ids:
            os.makedirs(os.path.join(d, "trial_%s_lr=0.1,layers=2" % tid))
        return d

    @staticmethod
    def help_flags(sub):
        """Every flag spelling the subcommand's --help lists under Options."""
        p = subprocess.run([TUNE, *sub.split(), "--help"], capture_output=True, text=True, timeout=30)
        flags = set()
        for line in p.stdout.split("\n"):
            m = re.match(r"^  (-[^\s]+)", line)
            if m:
                flags.update(m.group(1).split(","))
        return flags

    def test_subcommands(self):
        self.assertEqual(self.complete(""), sorted(
            ["run", "validate", "status", "ls", "checkpoints", "report", "export", "stop"]))
        self.assertEqual(self.complete("r"), ["report", "run"])
        self.assertEqual(self.complete("checkpoints", ""), ["best", "ls"])
        self.assertEqual(self.complete("checkpoints", "b"), ["best"])
        self.assertEqual(self.complete("-"), sorted(self.help_flags("")))

    def test_flags_of_each_subcommand_are_those_of_its_help(self):
        for sub in SUBCOMMANDS:
            with self.subTest(sub=sub):
                want = self.help_flags(sub)
                self.assertIn("--help", want)
                self.assertEqual(self.complete(*sub.split(), "-"), sorted(want))
        self.assertEqual(self.complete("checkpoints", "ls", "--t"), ["--top", "--trial"])
        self.assertEqual(self.complete("run", "x.yaml", "--re"), ["--restore-from", "--resume"])

    def test_option_values(self):
        self.assertEqual(self.complete("export", "--format", ""), ["csv", "json", "jsonl"])
        self.assertEqual(self.complete("checkpoints", "ls", "--format", ""), ["csv", "json", "table"])
        self.assertEqual(self.complete("status", "--format", "j"), ["json"])
        self.assertEqual(self.complete("checkpoints", "best", "--mode", ""), ["max", "min"])
        # --resume=au: bash splits the word at '=' (COMP_WORDBREAKS).
        self.assertEqual(self.complete("run", "x.yaml", "--resume", "=", "au"), ["auto", "auto+errored"])
        self.assertEqual(self.complete("run", "x.yaml", "--resume", "="),
                         sorted(["never", "auto", "must", "errored", "auto+errored", "restart-errored"]))
        self.assertEqual(self.complete("run", "x.yaml", "--name", ""), [])

    def test_experiment_names_under_the_storage_path(self):
        self.make_experiment(self.storage, "mnist")
        self.make_experiment(self.storage, "mnist two")
        self.make_experiment(self.storage, "cifar")
        os.makedirs(os.path.join(self.storage, "not_an_experiment"))
        with open(os.path.join(self.storage, "mlp"), "w") as f:  # a file, not an experiment
            f.write("x")
        self.assertEqual(self.complete("status", ""), ["cifar", "mnist", "mnist two"])
        self.assertEqual(self.complete("checkpoints", "best", "mn"), ["mnist", "mnist two"])
        self.assertEqual(self.complete("ls", ""), [])  # ls takes no experiment
        self.assertEqual(self.complete("status", "cifar", ""), [])  # one experiment per command
        self.assertEqual(self.complete("stop", "--trial", "00001", "c"), ["cifar"])
        # --storage-path on the line wins over $TUNE_STORAGE_PATH; without either, ~/tune_results.
        other = os.path.join(self.dir, "other")
        self.make_experiment(other, "elsewhere")
        self.assertEqual(self.complete("report", "--storage-path", other, ""), ["elsewhere"])
        self.assertEqual(self.complete("report", "--storage-path=" + other, ""), ["elsewhere"])
        home = os.path.join(self.dir, "home")
        self.make_experiment(os.path.join(home, "tune_results"), "at_home")
        env = dict(self.env, HOME=home)
        env.pop("TUNE_STORAGE_PATH")
        self.assertEqual(self.complete("export", "", env=env), ["at_home"])

    def test_trial_ids_of_the_experiment_on_the_line_else_the_latest(self):
        self.make_experiment(self.storage, "older", ["00000", "00001", "00012"], age_s=100)
        self.make_experiment(self.storage, "newer", ["00003"])
        os.makedirs(os.path.join(self.storage, "older", "checkpoint_000001"))
        os.makedirs(os.path.join(self.storage, "older", "trial_x_not_an_id"))
        self.assertEqual(self.complete("checkpoints", "ls", "older", "--trial", ""),
                         ["00000", "00001", "00012"])
        self.assertEqual(self.complete("checkpoints", "ls", "older", "--trial", "0000"),
                         ["00000", "00001"])
        self.assertEqual(self.complete("stop", "--trial", "", "older", cword=3), ["00000", "00001", "00012"])
        self.assertEqual(self.complete("stop", "--trial", ""), ["00003"])  # the latest
        self.assertEqual(self.complete("stop", "--trial", "=", ""), ["00003"])
        # An experiment named by its directory.
        self.assertEqual(self.complete("stop", os.path.join(self.storage, "older"), "--trial", "1"), [])
        self.assertEqual(self.complete("stop", os.path.join(self.storage, "older"), "--trial", "0001"),
                         ["00012"])
        # No experiment at all: nothing, and no error.
        self.assertEqual(self.complete("stop", "--storage-path", os.path.join(self.dir, "none"),
                                       "--trial", ""), [])

    def test_run_completes_yaml_files_and_directories(self):
        self.write("work/exp.yaml", "name: a\n")
        self.write("work/other.yml", "name: b\n")
        self.write("work/notes.txt", "x\n")
        self.write("work/configs/c.yaml", "name: c\n")
        work = os.path.join(self.dir, "work")
        self.assertEqual(self.complete("run", "", cwd=work), ["configs", "exp.yaml", "other.yml"])
        self.assertEqual(self.complete("validate", "e", cwd=work), ["exp.yaml"])
        self.assertEqual(self.complete("run", "configs/", cwd=work), ["configs/c.yaml"])
        self.assertEqual(self.complete("run", "exp.yaml", "--storage-path", "", cwd=work), ["configs"])

    def zsh_complete(self, line, cwd=None):
        """The set of matches zsh's completion (with _tune) offers for `line` (ending where TAB
        is pressed), computed by an interactive zsh on a pseudo-terminal."""
        d = os.path.join(self.dir, "zfunc")
        if not os.path.isdir(d):
            os.makedirs(d)
            shutil.copy(ZSH_COMPLETION, d)
        p = subprocess.run(["zsh", "-f", ZSH_DRIVER, d, line], capture_output=True, text=True,
                           env=self.env, cwd=cwd or self.dir, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return set(re.findall(r"\{([^{}]*)\}", p.stdout))

    def test_zsh_completion(self):
        p = subprocess.run(["zsh", "-n", ZSH_COMPLETION], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.make_experiment(self.storage, "older", ["00000", "00012"], age_s=100)
        self.make_experiment(self.storage, "newer", ["00003"])
        self.assertEqual(self.zsh_complete("tune "), {"run", "validate", "status", "ls", "checkpoints",
                                                      "report", "export", "stop"})
        self.assertEqual(self.zsh_complete("tune checkpoints "), {"ls", "best"})
        long_flags = {f for f in self.help_flags("run") if f.startswith("--")}
        self.assertEqual(self.zsh_complete("tune run x.yaml --"), long_flags)
        self.assertEqual(self.zsh_complete("tune ls --"),
                         {f for f in self.help_flags("ls") if f.startswith("--")})
        self.assertEqual(self.zsh_complete("tune export --format "), {"csv", "json", "jsonl"})
        self.assertEqual(self.zsh_complete("tune run x.yaml --resume="),
                         {"never", "auto", "must", "errored", "auto+errored", "restart-errored"})
        # Experiment names (and directories, which also name an experiment).
        names = self.zsh_complete("tune status ", cwd=self.storage)
        self.assertEqual(names, {"older", "newer"})
        self.assertEqual(self.zsh_complete("tune checkpoints ls older --trial "), {"00000", "00012"})
        self.assertEqual(self.zsh_complete("tune stop --trial "), {"00003"})  # the latest

if __name__ == "__main__":
    unittest.main()
