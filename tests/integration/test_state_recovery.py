"""State recovery as a property. A real run is interrupted (Ctrl-C), resumed with a long state
write period and SIGKILLed once launches are in the journal, so experiment_state.json holds
RUNNING trials and .tune/state.journal holds the launches after it. Then experiment_state.json
and the journal are each truncated at EVERY byte offset, and random bytes are flipped in them
(FLIP_SEEDS seeds, 1-3 bytes each), and every damaged copy is loaded by `tune_state_probe`,
which calls state::load, the loader of `tune run --resume` and `tune status`. Each load must
either recover or refuse with one line naming the file and the byte offset. Recovering after a
truncation keeps every trial recorded before the cut (a record is a state or journal line; the
records wholly before the cut must survive); after flipped bytes, every trial and only those.
The probe must never crash. One damaged copy also goes through
`tune status` to check the user sees that one line."""
import json
import os
import random
import shutil
import signal
import subprocess
import unittest

from harness import BUILD, PY, TuneTest

PROBE = os.path.join(BUILD, "tests", "tune_state_probe")
FLIP_SEEDS = 300
STATE = "experiment_state.json"
JOURNAL = os.path.join(".tune", "state.journal")

TRAIN = """
import time, tune_trial
for i in range(1, 31):
    tune_trial.report({"loss": 1.0 / i})
    time.sleep(0.05)
"""


def read(path):
    with open(path, "rb") as f:
        return f.read()


def records(data):
    """(start, end, trial_id) of each line of a state file or journal (end: after its newline)."""
    out, start = [], 0
    while start < len(data):
        nl = data.find(b"\n", start)
        end = len(data) if nl < 0 else nl + 1
        line = data[start:end]
        at = line.find(b'"trial_id":"')
        if at >= 0:
            out.append((start, end, line[at + 12:at + 17].decode()))
        start = end
    return out


class StateRecoveryTest(TuneTest):
    def make_damaged_run(self):
        """A real run's state + journal: trials RUNNING in the state, launches in the journal."""
        self.write("train.py", TRAIN)
        self.write("exp.yaml", """
            name: rec
            trial: {command: ["%s", "train.py"]}
            param_space: {x: {grid_search: [1, 2, 3, 4, 5, 6]}}
            max_concurrent_trials: 2
        """ % PY)
        exp = self.exp_dir("rec")
        p = self.start_tune("run", "exp.yaml")
        self.wait_for(lambda: len(self.trials("rec")) >= 2 and all(
            len(self.results("rec", t)) >= 2 for t in self.trials("rec")), what="2 trials running")
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        # Resume with a long state-write period: the restarts are written to the state first;
        # the trials launched when they end go to the journal only.
        env = dict(self.env, TUNE_GLOBAL_CHECKPOINT_S="1000")
        p = self.start_tune("run", "exp.yaml", "--resume=must", env=env)
        journal = os.path.join(exp, JOURNAL)
        self.wait_for(lambda: read(journal).count(b"\n") >= 2, what="2 journal lines")
        p.send_signal(signal.SIGKILL)
        p.communicate()
        kept = os.path.join(self.dir, "kept")
        os.makedirs(os.path.join(kept, ".tune"))
        for name in (STATE, JOURNAL):
            shutil.copyfile(os.path.join(exp, name), os.path.join(kept, name))
        for pid in self.processes_under(self.dir):  # the orphaned trials: not needed any more
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return kept

    def probe(self, dirs):
        p = subprocess.run([PROBE], input="".join(d + "\n" for d in dirs), capture_output=True,
                           text=True, timeout=300)
        lines = p.stdout.splitlines()
        if p.returncode != 0 or len(lines) != len(dirs):
            crashed = dirs[len(lines)] if len(lines) < len(dirs) else "?"
            self.fail("the state loader ended with %d on %s:\n%s"
                      % (p.returncode, crashed, p.stderr[-3000:]))
        return [json.loads(line) for line in lines]

    def test_an_attempt_log_that_is_not_a_regular_file_is_refused_naming_it(self):
        # .tune/attempts.log made a FIFO (every open of it would block: the resume hung, deaf
        # to Ctrl-C), a symlink (the agent appended attempt records, nonces included, to its
        # target) or a directory (every trial failed as "supervisor exited without recording
        # the trial's exit"): the run or resume stops at once with one line naming the file.
        self.write("exp.yaml", """
            name: alog
            trial: {command: ["true"]}
            param_space: {x: 1}
        """)
        self.tune("run", "exp.yaml", "--quiet", check=0)
        log = os.path.join(self.exp_dir("alog"), ".tune", "attempts.log")
        outside = os.path.join(self.dir, "outside.txt")
        with open(outside, "w") as f:
            f.write("mine\n")
        for make in (lambda: os.mkfifo(log), lambda: os.symlink(outside, log),
                     lambda: os.mkdir(log)):
            if os.path.isdir(log) and not os.path.islink(log):
                os.rmdir(log)
            elif os.path.lexists(log):
                os.unlink(log)
            make()
            r = self.tune("run", "exp.yaml", "--resume=must", "--quiet", check=None, timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("'%s' is not a regular file" % log, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        with open(outside) as f:
            self.assertEqual(f.read(), "mine\n")

    def test_truncation_and_flips_never_drop_a_trial_silently(self):
        kept = self.make_damaged_run()
        files = {name: read(os.path.join(kept, name)) for name in (STATE, JOURNAL)}
        recs = {name: records(data) for name, data in files.items()}
        (whole,) = self.probe([kept])
        self.assertTrue(whole["ok"], whole)
        every = set(whole["trials"])
        self.assertGreaterEqual(len(every), 3)
        self.assertTrue(recs[JOURNAL], "no launch in the journal")
        statuses = {t["status"] for t in json.loads(files[STATE])["trials"]}
        self.assertIn("RUNNING", statuses)

        # Every damage case: (file, first damaged byte, new bytes of that file).
        cases = []
        for name, data in files.items():
            for k in range(len(data)):
                cases.append((name, k, data[:k], "truncated at %d" % k))
        for seed in range(FLIP_SEEDS):
            rng = random.Random(seed)
            name = (STATE, JOURNAL)[seed % 2]
            data = bytearray(files[name])
            offsets = sorted(rng.sample(range(len(data)), rng.randint(1, 3)))
            for at in offsets:
                data[at] ^= rng.randint(1, 255)
            cases.append((name, offsets[0], bytes(data), "seed %d flipped %s" % (seed, offsets)))

        root = os.path.join(self.dir, "damaged")
        dirs = []
        for i, (name, _, data, _) in enumerate(cases):
            d = os.path.join(root, str(i))
            os.makedirs(os.path.join(d, ".tune"))
            for other, content in files.items():
                with open(os.path.join(d, other), "wb") as f:
                    f.write(data if other == name else content)
            dirs.append(d)
        outcomes = self.probe(dirs)

        refusals = 0
        for (name, first, _, what), out in zip(cases, outcomes):
            label = "%s %s" % (name, what)
            if not out["ok"]:
                refusals += 1
                msg = out["error"]
                self.assertNotIn("\n", msg, label)
                self.assertIn(os.path.basename(name), msg, label)
                self.assertRegex(msg, r"byte \d+", label)
                continue
            # Recovered. After flipped bytes: every trial, and only those. After a truncation:
            # every trial with a record wholly before the cut, and no trial never recorded.
            got = set(out["trials"])
            if what.startswith("seed"):
                self.assertEqual(got, every, "%s: trials dropped or made up silently" % label)
                continue
            need = {tid for start, end, tid in recs[name] if end <= first}
            other = STATE if name == JOURNAL else JOURNAL
            need |= {tid for _, _, tid in recs[other]}
            self.assertLessEqual(need, got, "%s: trials dropped silently: %s" % (label, need - got))
            self.assertLessEqual(got, every, "%s: trials that were never recorded" % label)
        self.assertGreater(refusals, 0)

        # What the user sees: one line naming the file and the byte.
        shutil.copytree(kept, os.path.join(self.storage, "broken"))
        with open(os.path.join(self.storage, "broken", STATE), "r+b") as f:
            f.truncate(len(files[STATE]) // 2)
        p = self.tune("status", "broken", check=2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertRegex(p.stderr, r"experiment_state\.json: .*byte \d+")


if __name__ == "__main__":
    unittest.main()
