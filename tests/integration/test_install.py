"""tune installed like a real tool: the .deb that `cpack -G DEB` makes, unpacked into a scratch
root with `dpkg -x`, runs the quickstart with nothing of the build tree on its paths; `cmake
--install` into a temporary prefix lays out the same files; `tune --version` names the commit."""
import glob
import gzip
import os
import re
import shutil
import subprocess
import sys
import textwrap
import unittest

from harness import BUILD, SOURCE, TUNE, TuneTest

# What `cmake --install` (and so the .deb, under /usr) puts where, relative to the prefix.
INSTALLED = [
    "bin/tune",
    "libexec/tune/tune-agent",
    "libexec/tune/tune-supervisor",
    "share/tune/python/tune_trial.py",
    "share/tune/python/tune_optuna/__init__.py",
    "share/tune/python/tune_optuna/searcher.py",
    "lib/python3/dist-packages/tune.pth",
    "include/tune/trial.hpp",
    "share/man/man1/tune.1.gz",
    "share/bash-completion/completions/tune",
    "share/zsh/vendor-completions/_tune",
    "share/doc/tune/README.md",
    "share/doc/tune/docs/CLI.md",
    "share/doc/tune/docs/EXPERIMENT.md",
    "share/doc/tune/copyright",
    "share/doc/tune/changelog.Debian.gz",
    "share/lintian/overrides/tune",
]
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: its dist-packages is where tune.pth goes


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)


class InstallTest(TuneTest):
    def installed_env(self, prefix):
        """The test's environment with only `prefix` for tune: its bin first on PATH, its Python
        helper on PYTHONPATH, and no override pointing back into the build tree."""
        env = dict(self.env)
        for var in ("TUNE_AGENT", "TUNE_SUPERVISOR", "TUNE_HELPERS_DIR"):
            env.pop(var, None)
        env["PATH"] = os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", "")
        env["PYTHONPATH"] = os.path.join(prefix, "share", "tune", "python")
        return env

    def check_layout(self, prefix):
        missing = [p for p in INSTALLED if not os.path.isfile(os.path.join(prefix, p))]
        self.assertEqual(missing, [], "not installed under " + prefix)
        for exe in INSTALLED[:3]:
            self.assertTrue(os.access(os.path.join(prefix, exe), os.X_OK), exe)
        # Nothing of the build tree leaks into the install (test programs, benches, examples).
        self.assertEqual(sorted(os.listdir(os.path.join(prefix, "bin"))), ["tune"])

    def check_python_helper(self, prefix):
        """import tune_trial / tune_optuna finds the installed copies: through PYTHONPATH, and
        through tune.pth when its directory is a site dir (as /usr/lib/python3/dist-packages is
        for Debian's python3)."""
        want = os.path.join(prefix, "share", "tune", "python") + os.sep
        code = "import tune_trial, tune_optuna; print(tune_trial.__file__); print(tune_optuna.__file__)"
        env = self.installed_env(prefix)
        p = run([sys.executable, "-c", code], env=env, cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(all(line.startswith(want) for line in p.stdout.split()), p.stdout)
        env.pop("PYTHONPATH")
        site = os.path.join(prefix, "lib", "python3", "dist-packages")
        p = run([SYSTEM_PYTHON, "-c", "import site; site.addsitedir(%r); %s" % (site, code)],
                env=env, cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(all(line.startswith(want) for line in p.stdout.split()), p.stdout)

    def check_man_page(self, prefix):
        """The page is gzipped as Debian wants (-9, no name or time stamp in the header), names
        every subcommand, and man-db renders it."""
        path = os.path.join(prefix, "share", "man", "man1", "tune.1.gz")
        with open(path, "rb") as f:
            header = f.read(10)
        self.assertEqual(header[:2], b"\x1f\x8b")
        self.assertEqual(header[3] & 0x08, 0, "gzip header holds a file name (gzip -n)")
        self.assertEqual(header[4:8], b"\0\0\0\0", "gzip header holds a time stamp (gzip -n)")
        with gzip.open(path, "rt") as f:
            page = f.read()
        for sub in ("run", "validate", "status", "ls", "checkpoints ls", "checkpoints best",
                    "report", "export", "stop"):
            self.assertIn('.SS "tune %s"' % sub, page)
        p = run(["man", "-l", path], env=dict(self.env, MANWIDTH="100", MANPAGER="cat", PAGER="cat"))
        self.assertEqual(p.returncode, 0, p.stderr)
        text = p.stdout.replace("\u2010", "-")
        self.assertRegex(text, r"NAME\n +tune - hyperparameter tuning")
        for flag in ("--restore-from", "--include-errored", "--all-results", "TUNE_STORAGE_PATH"):
            self.assertIn(flag, text)

    def check_debian_docs(self, prefix, version):
        """/usr/share/doc/tune/copyright in Debian's machine-readable format: every third_party/
        component has a Files paragraph, and every licence named has its text; the changelog's
        one entry is this package's version."""
        with open(os.path.join(prefix, "share", "doc", "tune", "copyright")) as f:
            paragraphs = [dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", para, re.M))
                          for para in f.read().split("\n\n") if para.strip()]
        self.assertEqual(paragraphs[0].get("Format"),
                         "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/")
        files = {p["Files"]: p for p in paragraphs if "Files" in p}
        self.assertIn("*", files)
        for component in os.listdir(os.path.join(SOURCE, "third_party")):
            if os.path.isdir(os.path.join(SOURCE, "third_party", component)):
                self.assertIn("third_party/%s/*" % component, files, "no copyright paragraph")
        self.assertEqual(files["third_party/uplot/*"]["License"], "Expat")
        texts = {p["License"] for p in paragraphs if "License" in p and "Files" not in p}
        for p in files.values():
            self.assertTrue(p.get("Copyright"), p)
            self.assertIn(p["License"], texts, "a licence without its text")
        with gzip.open(os.path.join(prefix, "share", "doc", "tune", "changelog.Debian.gz"), "rt") as f:
            changelog = f.read()
        self.assertRegex(changelog.split("\n")[0],
                         r"^tune \(%s\) unstable; urgency=medium$" % re.escape(version))
        self.assertRegex(changelog, r"\n -- .+ <.+>  \w{3}, \d\d \w{3} \d{4} [\d:]{8} \+0000\n")

    def check_lintian(self, deb):
        """Debian's lintian finds no error and no warning but the placeholder maintainer
        address's (when the build was configured with the default TUNE_DEB_MAINTAINER)."""
        if not shutil.which("lintian"):
            self.skipTest("lintian is not installed (scripts/setup.sh --test installs it)")
        p = run(["lintian", "--no-cfg", deb], timeout=300)
        self.assertIn(p.returncode, (0, 2), p.stderr)  # 2: an error tag (1: lintian failed)
        tags = [line for line in p.stdout.splitlines() if re.match(r"^[EW]: ", line)]
        maintainer = run(["dpkg-deb", "-f", deb, "Maintainer"]).stdout.strip()
        if maintainer.endswith("@localhost>"):
            tags = [t for t in tags if not re.match(r"^E: tune: bogus-mail-host(-in-debian-changelog)? ", t)]
        self.assertEqual(tags, [], p.stdout)

    def run_quickstart(self, prefix):
        """configs/quickstart.yaml with `tune` from PATH (the installed one): its trial program
        is the build's example, copied to where the file expects it (../build/examples/)."""
        os.makedirs(os.path.join(self.dir, "configs"))
        os.makedirs(os.path.join(self.dir, "build", "examples"))
        shutil.copy(os.path.join(SOURCE, "configs", "quickstart.yaml"), os.path.join(self.dir, "configs"))
        shutil.copy(os.path.join(BUILD, "examples", "tune-example-logreg"),
                    os.path.join(self.dir, "build", "examples"))
        env = self.installed_env(prefix)
        self.assertEqual(shutil.which("tune", path=env["PATH"]), os.path.join(prefix, "bin", "tune"))
        p = run(["tune", "run", "configs/quickstart.yaml", "--quiet"], env=env, cwd=self.dir,
                timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        trials = self.trials("quickstart")
        self.assertEqual(len(trials), 8)
        self.assertEqual([t["status"] for t in trials], ["TERMINATED"] * 8)
        best = run(["tune", "checkpoints", "best", "quickstart"], env=env, cwd=self.dir)
        self.assertEqual(best.returncode, 0, best.stderr)
        path = best.stdout.strip()
        self.assertTrue(path.startswith(self.exp_dir("quickstart") + os.sep), path)
        self.assertTrue(os.path.isfile(os.path.join(path, "weights.txt")), path)
        # The driver found its agent in PREFIX/libexec/tune (nothing is beside PREFIX/bin/tune),
        # and gave the trials the installed Python helper.
        self.write("py/trial.py", """
            import os, tune_trial
            print("helper at", tune_trial.__file__, flush=True)
            tune_trial.report({"loss": 1.0})
            """)
        self.write("py/exp.yaml", """
            name: pyhelper
            trial: {command: ["%s", "trial.py"]}
            param_space: {x: 1}
            metric: loss
            mode: min
            """ % SYSTEM_PYTHON)
        env.pop("PYTHONPATH")
        p = run(["tune", "run", "py/exp.yaml", "--quiet"], env=env, cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        (trial,) = self.trials("pyhelper")
        with open(os.path.join(self.exp_dir("pyhelper"), trial["trial_name"], "stdout.log")) as f:
            self.assertIn("helper at " + os.path.join(prefix, "share", "tune", "python", "tune_trial.py"),
                          f.read())

    def test_deb_unpacked_into_a_scratch_root_runs_the_quickstart(self):
        out = os.path.join(self.dir, "pkg")
        p = run(["cpack", "-G", "DEB", "--config", os.path.join(BUILD, "CPackConfig.cmake"), "-B", out],
                cwd=BUILD, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        debs = glob.glob(os.path.join(out, "*.deb"))
        self.assertEqual(len(debs), 1, debs)
        deb = debs[0]
        fields = {f: run(["dpkg-deb", "-f", deb, f]).stdout.strip()
                  for f in ("Package", "Version", "Architecture", "Depends")}
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        self.assertEqual(os.path.basename(deb), "tune_%s_%s.deb" % (fields["Version"], arch))
        self.assertEqual(fields["Package"], "tune")
        # Upstream version, then the Debian revision (a non-native package).
        self.assertRegex(fields["Version"], r"^[0-9][A-Za-z0-9.+~]*-1$")
        depends = {d.split()[0] for d in fields["Depends"].split(", ")}
        # The shared libraries (dpkg-shlibdeps over the binaries) and the programs tune runs.
        for want in ("libyaml-cpp", "libssh-", "libspdlog", "libfmt", "libstdc++6", "rsync",
                     "openssh-client", "python3"):
            self.assertTrue(any(d.startswith(want) for d in depends), (want, fields["Depends"]))

        root = os.path.join(self.dir, "root")
        p = run(["dpkg", "-x", deb, root])
        self.assertEqual(p.returncode, 0, p.stderr)
        prefix = os.path.join(root, "usr")
        self.check_layout(prefix)
        self.check_debian_docs(prefix, fields["Version"])
        self.check_man_page(prefix)
        p = run([os.path.join(prefix, "bin", "tune"), "--version"])
        self.assertEqual(p.stdout, run([TUNE, "--version"]).stdout)
        self.check_python_helper(prefix)
        self.run_quickstart(prefix)
        self.check_lintian(deb)  # last: it skips the rest when lintian is missing

    def test_cmake_install_into_a_prefix(self):
        prefix = os.path.join(self.dir, "prefix")
        p = run(["cmake", "--install", BUILD, "--prefix", prefix])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.check_layout(prefix)
        self.check_python_helper(prefix)
        # The C++ helper compiles from the installed header alone.
        src = self.write("trial.cpp", """
            #include <tune/trial.hpp>
            int main() { return 0; }
            """)
        p = run(["g++", "-std=c++20", "-fsyntax-only", "-I", os.path.join(prefix, "include"), src])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_man_page(prefix)
        # A trial started by the installed binary runs (agent found in libexec/tune).
        self.write("trial.sh", """
            #!/bin/sh
            echo '{"loss": 1}'
            """, mode=0o755)
        self.write("exp.yaml", """
            name: tiny
            trial: {command: ["./trial.sh"]}
            param_space: {x: {grid_search: [1, 2]}}
            metric: loss
            mode: min
            """)
        p = run(["tune", "run", "exp.yaml", "--quiet"], env=self.installed_env(prefix), cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual([t["status"] for t in self.trials("tiny")], ["TERMINATED"] * 2)
        # A tune copied away from its helpers says, in one line, every place it looked.
        lone = os.path.join(self.dir, "lone", "bin")
        os.makedirs(lone)
        shutil.copy(os.path.join(prefix, "bin", "tune"), lone)
        p = run([os.path.join(lone, "tune"), "run", "exp.yaml", "--name", "lone", "--quiet"],
                env=self.installed_env(prefix), cwd=self.dir)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        for place in (os.path.join(lone, "tune-agent"),
                      os.path.join(self.dir, "lone", "libexec", "tune", "tune-agent"), "$TUNE_AGENT"):
            self.assertIn(place, p.stderr)

    def test_version_names_the_commit(self):
        p = run([TUNE, "--version"])
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
            version = re.search(r"project\(tune VERSION ([0-9.]+)", f.read()).group(1)
        head = run(["git", "-C", SOURCE, "rev-parse", "--short", "HEAD"])
        if head.returncode != 0:  # not a git checkout: the project version alone
            self.assertEqual(p.stdout, "tune %s\n" % version)
            return
        self.assertRegex(p.stdout, r"^tune %s \(git [^ ()]+\)\n$" % re.escape(version))
        described = re.search(r"\(git ([^ ()]+)\)", p.stdout).group(1)
        # git describe --always: the commit's abbreviated hash, after a tag's name if any.
        self.assertTrue(re.search(r"(^|-g)%s[0-9a-f]*(-dirty)?$" % head.stdout.strip()[:7], described),
                        (described, head.stdout))


if __name__ == "__main__":
    unittest.main()
