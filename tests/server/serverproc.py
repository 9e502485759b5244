"""Starts cotensor_server for the Python tests of tests/server and stops it with SIGTERM.

    with ServerProcess(binary, repo) as server:   # waits for "cotensor_server listening on A:P"
        server.url                                # "127.0.0.1:PORT", as tritonclient wants it
    server.returncode                             # after SIGTERM: the server's exit status

stdout and stderr are read by threads so that the server never blocks on a full pipe; the
stderr lines are kept (`stderr_lines()`) and echoed with a prefix when `echo` is set.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

EXAMPLES_SERVER = Path(__file__).resolve().parents[2] / "examples" / "server"
LISTENING = "cotensor_server listening on "


class ServerError(RuntimeError):
    """The server did not start, or did not stop as it should."""


class ServerProcess:
    def __init__(self, binary, repo, extra_args=(), start_timeout=60.0, echo=False):
        self.binary = str(binary)
        self.repo = str(repo)
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self.echo = echo
        self.proc = None
        self.host = None
        self.port = None
        self.returncode = None
        self._stdout = []
        self._stderr = []
        self._lock = threading.Lock()
        self._listening = threading.Event()

    @property
    def url(self):
        return f"{self.host}:{self.port}"

    def stderr_lines(self):
        with self._lock:
            return list(self._stderr)

    def stdout_lines(self):
        with self._lock:
            return list(self._stdout)

    def _read(self, stream, sink, is_stdout):
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._lock:
                sink.append(line)
            if self.echo:
                print(f"  [server {'out' if is_stdout else 'err'}] {line}", flush=True)
            if is_stdout and line.startswith(LISTENING) and not self._listening.is_set():
                # "ADDRESS:PORT", then optionally " (what it serves)".
                address = line[len(LISTENING):].strip().split(" ", 1)[0]
                host, _, port = address.rpartition(":")
                self.host = host.strip("[]")
                if self.host in ("0.0.0.0", "::", ""):
                    self.host = "127.0.0.1"
                self.port = int(port)
                self._listening.set()
        stream.close()

    def start(self):
        cmd = [self.binary, "--model-repository", self.repo, "--address", "127.0.0.1",
               "--port", "0", *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self._stdout, True),
                             daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self._stderr, False),
                             daemon=True),
        ]
        for t in self._threads:
            t.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None:
                self._join_readers()
                raise ServerError(f"{' '.join(cmd)} exited with {self.proc.returncode} before "
                                  f"listening; stderr:\n" + "\n".join(self.stderr_lines()))
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(f"no '{LISTENING}ADDRESS:PORT' line on stdout within "
                                  f"{self.start_timeout:.0f} s; stdout: {self.stdout_lines()}; "
                                  "stderr:\n" + "\n".join(self.stderr_lines()))
        return self

    def _join_readers(self):
        for t in self._threads:
            t.join(5)

    def terminate(self, timeout=30.0):
        """SIGTERM, then waits; returns the exit status (ServerError if it does not exit)."""
        if self.proc is None or self.returncode is not None:
            return self.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ServerError(f"the server did not exit within {timeout:.0f} s of SIGTERM")
        self._join_readers()
        return self.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.returncode = self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if exc[0] is not None:
            self.kill()
        else:
            self.terminate()
        return False


def check_binary(path):
    """Exits 1 with a message unless `path` is an executable file."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        print(f"FAIL: {path} is not an executable file", file=sys.stderr)
        sys.exit(1)
