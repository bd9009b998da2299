"""Catch2 test names that ctest's discovery cannot carry: an unbalanced '[' or ']' makes CMake
glue every later test into one list element (64 unit tests once silently stopped running that
way), and a leading '-' is read as an option. Fails naming each such TEST_CASE."""
import glob
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "unit")
bad = []
for path in sorted(glob.glob(os.path.join(root, "*.cpp"))):
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.search(r'TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"', line)
            if not m:
                continue
            name, depth, ok = m.group(1), 0, True
            for c in name:
                depth += (c == "[") - (c == "]")
                ok = ok and depth >= 0
            if depth != 0 or not ok or name.startswith("-"):
                bad.append("%s:%d: %s" % (os.path.basename(path), n, name))
for b in bad:
    print("test name ctest cannot discover as one test:", b)
print("%d unusable test name(s)" % len(bad))
sys.exit(1 if bad else 0)
