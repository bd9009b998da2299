"""TensorBoard event files: one per trial, made at its first result, decoded here with Debian's
python3-protobuf from message definitions written in the decoder (tests/tools/tfevents_decode.py),
every CRC checked, every scalar equal (as float32) to the value in result.json."""
import glob
import json
import os
import struct
import subprocess
import sys

from harness import PY, SOURCE, TuneTest

TRAIN = """
import sys, time, tune_trial
x = tune_trial.config()["x"]
if x == 0:
    sys.exit(0)  # reports nothing
for i in range(1, 6):
    tune_trial.report({"loss": 1.0 / (i + x), "nested": {"acc": i * 0.1}, "flag": True})
"""


def protobuf_python():
    """A Python that imports google.protobuf (Debian's python3-protobuf is in /usr/bin/python3)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(exe) and subprocess.run([exe, "-c", "import google.protobuf"],
                                                  capture_output=True).returncode == 0:
            return exe
    raise AssertionError("no python3 with google.protobuf (scripts/setup.sh --test installs it)")


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


class TensorBoardTest(TuneTest):
    def run_exp(self, name, extra=""):
        self.write("train.py", TRAIN)
        self.write("exp.yaml", """
            name: %s
            trial: {command: ["%s", "train.py"]}
            param_space: {x: {grid_search: [0, 1, 2]}}
            report_period_s: 0
            %s
        """ % (name, PY, extra))
        self.tune("run", "exp.yaml", "--quiet", check=0)
        return {t["config"]["x"]: t for t in self.trials(name)}

    def test_every_reporting_trial_gets_one_decodable_event_file(self):
        trials = self.run_exp("tb")
        exe = protobuf_python()
        silent = os.path.join(self.exp_dir("tb"), trials[0]["trial_name"])
        self.assertEqual(glob.glob(os.path.join(silent, "events.out.tfevents.*")), [],
                         "a trial that reported nothing got an event file")
        for x in (1, 2):
            tdir = os.path.join(self.exp_dir("tb"), trials[x]["trial_name"])
            files = glob.glob(os.path.join(tdir, "events.out.tfevents.*"))
            self.assertEqual(len(files), 1, files)
            p = subprocess.run([exe, os.path.join(SOURCE, "tests", "tools", "tfevents_decode.py"),
                                files[0]], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            events = json.loads(p.stdout)[files[0]]
            self.assertEqual(events[0]["file_version"], "brain.Event:2")
            rows = self.results("tb", trials[x])
            self.assertEqual([e["step"] for e in events[1:]], [r["training_iteration"] for r in rows])
            for e, r in zip(events[1:], rows):
                values = dict(e["values"])
                self.assertEqual(len(values), len(e["values"]), "a tag twice in one event")
                self.assertEqual(values["loss"], f32(r["loss"]))
                self.assertEqual(values["nested/acc"], f32(r["nested"]["acc"]))
                self.assertEqual(values["time_total_s"], f32(r["time_total_s"]))
                self.assertNotIn("flag", values)  # booleans are not scalars
                self.assertNotIn("training_iteration", values)  # it is the step
                self.assertEqual(e["wall_time"], r["timestamp"])

    def test_tensorboard_false_writes_no_event_files(self):
        self.run_exp("notb", "tensorboard: false")
        self.assertEqual(glob.glob(os.path.join(self.exp_dir("notb"), "*", "events.out.tfevents.*")), [])
