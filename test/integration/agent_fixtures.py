"""Fixtures to run the real kvolumed binary: its path, a configuration writer,
and a NOTIFY_SOCKET the test binds to receive sd_notify messages."""
import os
import signal
import socket
import subprocess
import time

import pytest

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DIR = os.environ.get("KVOLUMED_SHARED_DIR", os.path.join(os.path.dirname(REPO_DIR), "shared"))


def build_dir():
    return os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO_DIR, "build"))


def kvolumed_path():
    path = os.path.join(build_dir(), "agent", "kvolumed")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is not built; run test/check or ninja -C build")
    return path


@pytest.fixture
def kvolumed_bin():
    return kvolumed_path()


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's notify socket."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.messages = []

    def wait_for(self, line, timeout=5.0):
        """Returns the first message holding `line` (e.g. "READY=1"), reading
        further datagrams as needed; raises on timeout."""
        deadline = time.monotonic() + timeout
        for m in self.messages:
            if line in m.split("\n"):
                self.messages.remove(m)
                return m
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {line!r} within {timeout}s; got {self.messages}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536).decode()
            except socket.timeout:
                continue
            if line in data.split("\n"):
                return data
            self.messages.append(data)

    def drain(self, duration):
        """Collects every message for `duration` seconds."""
        deadline = time.monotonic() + duration
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                self.messages.append(self.sock.recv(65536).decode())
            except socket.timeout:
                break
        return self.messages

    def close(self):
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path):
    s = NotifySocket(str(tmp_path / "notify.sock"))
    yield s
    s.close()


def write_config(path, root_dir, extra=""):
    """A configuration for tests: a private root-dir, no metrics port, no
    registration dir unless asked; `extra` is appended verbatim."""
    text = (
        "[agent]\n"
        "node-name = test-node\n"
        f"root-dir = {root_dir}\n"
        "[csi]\n"
        "registration-dir =\n"
        "[metrics]\n"
        "listen =\n"
    ) + extra
    with open(path, "w") as f:
        f.write(text)
    return str(path)


@pytest.fixture
def agent_config(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    return write_config(tmp_path / "kvolumed.conf", str(root))


class Agent:
    """A running kvolumed; stderr is collected in a file."""

    def __init__(self, binary, config, env=None, notify=None):
        self.log_path = config + ".log"
        self.log = open(self.log_path, "w")
        full_env = dict(os.environ)
        full_env.pop("NOTIFY_SOCKET", None)
        full_env.pop("WATCHDOG_USEC", None)
        full_env.pop("JOURNAL_STREAM", None)
        full_env["KVOLUMED_LOG_TARGET"] = "stderr"
        if notify:
            full_env["NOTIFY_SOCKET"] = notify.path
        full_env.update(env or {})
        self.proc = subprocess.Popen([binary, "--config", config], stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=full_env)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=5.0):
        return self.proc.wait(timeout=timeout)

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def wait_for_log(self, text, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not logged within {timeout}s:\n{self.output()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def start_agent(kvolumed_bin):
    agents = []

    def start(config, env=None, notify=None):
        a = Agent(kvolumed_bin, config, env=env, notify=notify)
        agents.append(a)
        return a

    yield start
    for a in agents:
        a.stop()
