"""The live table on a terminal (redrawn in place, colored, plain with NO_COLOR) and off one (plain
lines in a log file, no escape codes)."""
import fcntl
import os
import pty
import re
import signal
import struct
import termios
import select
import subprocess
import time
import unittest

from harness import PY, TUNE, TuneTest


class LiveTableTest(TuneTest):
    def run_on_pty(self, extra_env, cols=None, resize_to=None, args=()):
        self.write("slow.py", """
            import time, tune_trial
            for i in range(8):
                tune_trial.report({"loss": 1.0 / (i + 1)})
                time.sleep(0.1)
        """)
        self.write("exp.yaml", """
            name: pty
            trial: {command: ["%s", "slow.py"]}
            param_space: {x: {grid_search: [1, 2]}}
            metric: loss
            mode: min
        """ % PY)
        env = dict(self.env, TUNE_PROGRESS_PERIOD_S="0.1", **extra_env)
        master, slave = pty.openpty()
        if cols:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
        p = subprocess.Popen([TUNE, "run", "exp.yaml", "--name", "pty-%d-%s" % (len(extra_env), cols)] + list(args),
                             cwd=self.dir, env=env, stdin=slave, stdout=subprocess.DEVNULL, stderr=slave)
        out = b""
        deadline = time.time() + 60
        resized_at = None
        while time.time() < deadline:
            if resize_to and resized_at is None and b"RUNNING" in out:
                fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, resize_to, 0, 0))
                p.send_signal(signal.SIGWINCH)
                resized_at = len(out)
                self.resized_at = resized_at
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
        p.wait(timeout=30)
        os.close(slave)
        os.close(master)
        self.assertEqual(p.returncode, 0)
        return out.decode(errors="replace")

    def test_redrawn_in_place_with_colors(self):
        out = self.run_on_pty({})
        self.assertIn("\x1b[J", out)                 # erase-below before each redraw
        self.assertRegex(out, r"\x1b\[\d+A")         # cursor up over the previous table
        self.assertIn("\x1b[32m", out)               # TERMINATED in green
        self.assertIn("2 TERMINATED", out)

    def test_no_color_keeps_redraw_but_drops_colors(self):
        out = self.run_on_pty({"NO_COLOR": "1"})
        self.assertRegex(out, r"\x1b\[\d+A")
        self.assertNotRegex(out, r"\x1b\[(3\d|2)m")

    def frames(self, out):
        """The screens drawn: text between erase sequences, colors removed."""
        plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
        return [f for f in re.split(r"\x1b\[\d+A\x1b\[J", plain) if f.strip()]

    def test_fits_80_columns_and_redraws_narrower_on_resize(self):
        # Names far wider than the terminal: every line still fits, shortened in the middle.
        out = self.run_on_pty({"NO_COLOR": "1"}, cols=100, resize_to=60,
                              args=["--set", "param_space.a_rather_long_parameter_name_for_a_test="
                                    "{grid_search: [%s]}" % ("x" * 70)])
        frames = self.frames(out)
        self.assertGreater(len(frames), 2, out)
        # Frames drawn before the resize fit 100 columns (and use them); the last one, drawn
        # after it, fits 60. (A frame in flight at the resize may be either.)
        cut = len(self.frames(out[:self.resized_at]))
        lines = lambda f: f.replace("\r", "").split("\n")
        for i, frame in enumerate(frames):
            for line in lines(frame):
                self.assertLessEqual(len(line), 100 if i < cut else 60 if i > cut else 100, (i, line))
        for line in lines(frames[-1]):
            self.assertLessEqual(len(line), 60, line)
        self.assertIn("\u2026", out)                 # names shortened with an ellipsis
        self.assertTrue(any(len(l) > 60 for f in frames[:cut - 1] for l in lines(f)))

    def test_columns_flag_is_checked(self):
        self.write("exp.yaml", """
            trial: {command: ["true"]}
            param_space: {x: 1}
        """)
        p = self.tune("run", "exp.yaml", "--columns", "loss,,acc", check=2)
        self.assertIn("--columns: empty column name", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1)


class PlainLinesTest(TuneTest):
    def test_stderr_to_a_file_gets_plain_periodic_lines(self):
        # stderr and stdout are files, TERM says a color terminal: the file decides. The
        # period comes from progress_reporter.max_report_frequency (no TUNE_PROGRESS_PERIOD_S).
        self.write("slow.py", """
            import time, tune_trial
            for i in range(8):
                tune_trial.report({"loss": 1.0 / (i + 1), "name": "\u65e5\u672c"})
                time.sleep(0.15)
        """)
        self.write("exp.yaml", """
            name: plain
            trial: {command: ["%s", "slow.py"]}
            param_space: {x: {grid_search: [1, 2]}}
            metric: loss
            mode: min
            max_concurrent_trials: 1
            progress_reporter: {max_report_frequency: 0.5}
        """ % PY)
        env = dict(self.env, TERM="xterm-256color")
        env.pop("TUNE_PROGRESS_PERIOD_S", None)
        err_path, out_path = os.path.join(self.dir, "err.log"), os.path.join(self.dir, "out.log")
        with open(err_path, "wb") as err, open(out_path, "wb") as out:
            p = subprocess.run([TUNE, "run", "exp.yaml"], cwd=self.dir, env=env, stdout=out,
                               stderr=err, timeout=120)
        self.assertEqual(p.returncode, 0)
        err = open(err_path, "rb").read()
        out = open(out_path, "rb").read()
        self.assertNotIn(b"\x1b", err)
        self.assertNotIn(b"\x1b", out)
        text = err.decode()
        # Each trial's start and end, once each.
        for x in (1, 2):
            self.assertEqual(len(re.findall(r"^trial trial_0000%d_x=%d: RUNNING at iter \d+$" % (x - 1, x), text, re.M)), 1, text)
            self.assertEqual(len(re.findall(r"^trial trial_0000%d_x=%d: TERMINATED at iter 8$" % (x - 1, x), text, re.M)), 1, text)
        # Periodic summaries while it ran (about 2.5 s at one every 0.5 s), and the last one.
        summaries = re.findall(r"^== plain == .*\| elapsed .*$", text, re.M)
        self.assertGreaterEqual(len(summaries), 3, text)
        self.assertTrue(summaries[-1].startswith("== plain == 2 TERMINATED | best loss=0.125"), summaries[-1])
        # A summary while a trial ran is followed by its row.
        self.assertRegex(text, r"== plain == 1 RUNNING.*\ntrial +status.*\ntrial_0000\d_x=\d +RUNNING")
        self.assertIn(b"best trial: trial_0000", out)


if __name__ == "__main__":
    unittest.main()
