"""The live table on a terminal: redrawn in place, colored, and plain with NO_COLOR (SPEC §1)."""
import os
import pty
import select
import subprocess
import time
import unittest

from harness import PY, TUNE, TuneTest


class LiveTableTest(TuneTest):
    def run_on_pty(self, extra_env):
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
        p = subprocess.Popen([TUNE, "run", "exp.yaml", "--name", "pty-%d" % len(extra_env)], cwd=self.dir, env=env,
                             stdin=slave, stdout=subprocess.DEVNULL, stderr=slave)
        os.close(slave)
        out = b""
        deadline = time.time() + 60
        while time.time() < deadline:
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


if __name__ == "__main__":
    unittest.main()
