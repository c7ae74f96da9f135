"""Headless Chromium (Debian's ``/usr/bin/chromium``) driven over the DevTools protocol: a
page to load, JavaScript to run in it, waits on what it shows, screenshots.

``chromium --headless --dump-dom`` (tests/integration/test_live_view.py) only loads a page;
a form to fill needs the protocol: the browser starts with ``--remote-debugging-port=0``,
writes its port to ``DevToolsActivePort`` in its profile, and the page's target takes
commands over a websocket (JSON ``{"id", "method", "params"}``; the answer has the same id).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Self

from websockets.sync.client import ClientConnection, connect

__all__ = ["CHROMIUM", "Browser", "BrowserError"]

CHROMIUM = "/usr/bin/chromium"


class BrowserError(AssertionError):
    """A command failed, a script threw, or what was awaited did not come."""


class Browser:
    """One headless Chromium with one page, ``width`` x ``height`` CSS pixels."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        self.width, self.height = width, height
        # chromium's helpers may still write into the profile as the group is killed
        self._profile = tempfile.TemporaryDirectory(prefix="dblog-chromium-",
                                                    ignore_cleanup_errors=True)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: ClientConnection | None = None
        self._stack = ExitStack()
        self._next_id = 0

    def start(self, timeout: float = 30) -> Self:
        profile = Path(self._profile.name)
        with (profile / "chromium.log").open("wb") as log:
            self._proc = subprocess.Popen(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--hide-scrollbars", "--no-first-run",
                 "--no-default-browser-check", f"--user-data-dir={profile}",
                 "--remote-debugging-port=0", f"--window-size={self.width},{self.height}",
                 "about:blank"],
                stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise BrowserError(f"chromium did not start (exit {self._proc.poll()}):\n"
                                   + (profile / "chromium.log").read_text(errors="replace"))
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                    timeout=10) as response:
            targets = json.load(response)
        [page] = [t for t in targets if t["type"] == "page"]
        self._ws = self._stack.enter_context(
            connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10))
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        return self

    def close(self) -> None:
        self._stack.close()
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(10)
            with contextlib.suppress(ProcessLookupError):  # its renderers and helpers too
                os.killpg(self._proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(10)
        self._profile.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        """One protocol command; its result. Events that arrive meanwhile are dropped."""
        assert self._ws is not None, "start() the browser first"
        self._next_id += 1
        ident = self._next_id
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no answer to {method} within {timeout} s")
            message = json.loads(self._ws.recv(timeout=left))
            if message.get("id") != ident:
                continue
            if "error" in message:
                raise BrowserError(f"{method} failed: {message['error']}")
            result: dict[str, Any] = message.get("result", {})
            return result

    def evaluate(self, script: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", expression=script, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(f"script failed: {details.get('exception', details)}\n{script}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"could not open {url}: {result['errorText']}")

    def text(self) -> str:
        """What the page shows, as text."""
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def wait_for(self, script: str, what: str, timeout: float = 60) -> Any:
        """Evaluate ``script`` until its value is truthy (it may throw meanwhile); that value.
        On timeout the error has what the page shows."""
        deadline = time.monotonic() + timeout
        error = ""
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(script)
            except BrowserError as exc:
                error = str(exc)
            else:
                if value:
                    return value
            time.sleep(0.25)
        raise BrowserError(f"timed out after {timeout} s waiting for {what} {error}\n"
                           f"the page ({self.evaluate('location.href')}) shows:\n"
                           f"{self.text()[-3000:]}")

    def click(self, element: str, what: str, timeout: float = 60) -> None:
        """A mouse click, as a user's, in the middle of the element that the JavaScript
        expression ``element`` gives, once it is there and enabled."""
        box = self.wait_for(f"""(() => {{
            const e = {element};
            if (!e || e.disabled) return null;
            e.scrollIntoView({{block: "center"}});
            const r = e.getBoundingClientRect();
            return r.width > 0 && r.height > 0 ? [r.x + r.width / 2, r.y + r.height / 2] : null;
            }})()""", what, timeout)
        x, y = box
        for event in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=event, x=x, y=y, button="left",
                      clickCount=1)

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element, select what it holds and type ``text`` over it, as a user
        would (React sees the input events)."""
        found = self.evaluate(f"""(() => {{
            const e = document.querySelector({json.dumps(selector)});
            if (!e) return false;
            e.scrollIntoView({{block: "center"}}); e.focus();
            if (e.select) e.select();
            return true; }})()""")
        if not found:
            raise BrowserError(f"no element {selector} on the page:\n{self.text()[-3000:]}")
        self.send("Input.insertText", text=text)

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
