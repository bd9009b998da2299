"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: no
port is opened), with the Python standard library only. Loads one page and records what the
page did: console errors, uncaught exceptions, JavaScript dialogs, every network request."""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium. Every request goes through a proxy on a dead port, so even a request
    the DevTools protocol did not show could not succeed."""

    def __init__(self, width=1280, height=1000):
        exe = find_chromium()
        if not exe:
            raise RuntimeError("chromium is not installed (scripts/setup.sh --test installs it)")
        self.profile = tempfile.mkdtemp(prefix="tune-chromium-")
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        # The child gets the command pipe's read end as fd 3 and the response pipe's write end as
        # fd 4 (moved above 4 first, so the dup2's cannot clobber each other).
        hi_cmd, hi_res = os.dup(cmd_r), os.dup(res_w)
        while hi_cmd <= 4 or hi_res <= 4:
            hi_cmd, hi_res = os.dup(hi_cmd), os.dup(hi_res)

        def child_fds():
            os.dup2(hi_cmd, 3)
            os.dup2(hi_res, 4)

        args = [exe, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
                "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
                "--window-size=%d,%d" % (width, height), "--user-data-dir=" + self.profile,
                "about:blank"]
        # close_fds=False: the fds dup2'd in the child must survive; every other fd of this
        # process is non-inheritable (Python's default) and is closed at exec.
        self.proc = subprocess.Popen(args, close_fds=False, preexec_fn=child_fds,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (cmd_r, res_w, hi_cmd, hi_res):
            os.close(fd)
        self.out = os.fdopen(cmd_w, "wb", buffering=0)
        self.inp = res_r
        self.next_id = 0
        self.replies = {}
        self.events = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.session = None

    def _read(self):
        buf = b""
        while True:
            chunk = os.read(self.inp, 1 << 20)
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                m = json.loads(msg)
                with self.cond:
                    if "id" in m:
                        self.replies[m["id"]] = m
                    else:
                        self.events.append(m)
                    self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def send(self, method, params=None, session=True, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        self.out.write(json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        with self.cond:
            while self.next_id not in self.replies:
                left = deadline - time.time()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError("no reply to %s from chromium" % method)
                self.cond.wait(left)
            reply = self.replies.pop(self.next_id)
        if "error" in reply:
            raise RuntimeError("%s: %s" % (method, reply["error"]))
        return reply.get("result", {})

    def wait_event(self, method, timeout=60):
        deadline = time.time() + timeout
        with self.cond:
            while not any(e["method"] == method for e in self.events):
                left = deadline - time.time()
                if left <= 0:
                    raise RuntimeError("chromium sent no %s" % method)
                self.cond.wait(left)

    def open(self, url, timeout=60):
        """Opens `url` in a new page with every domain that reports trouble enabled."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(domain + ".enable")
        with self.cond:
            self.events.clear()
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", timeout)

    def evaluate(self, expression, timeout=60):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in r:
            raise RuntimeError("page script failed: %s" % json.dumps(r["exceptionDetails"])[:2000])
        return r["result"].get("value")

    def screenshot(self, path):
        r = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def problems(self):
        """Console errors, uncaught exceptions and dialogs the page opened, as text lines."""
        out = []
        with self.cond:
            events = list(self.events)
        for e in events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails"))[:500])
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + json.dumps(p.get("args"))[:500])
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", "")[:500])
            elif e["method"] == "Page.javascriptDialogOpening":
                out.append("dialog: " + p.get("message", ""))
        return out

    def requests(self):
        """URLs of every request the page made (the page's own URL included)."""
        with self.cond:
            return [e["params"]["request"]["url"] for e in self.events
                    if e["method"] == "Network.requestWillBeSent"]

    def close(self):
        try:
            self.send("Browser.close", session=False, timeout=10)
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            self.out.close()
        except OSError:
            pass
        os.close(self.inp)
        shutil.rmtree(self.profile, ignore_errors=True)
