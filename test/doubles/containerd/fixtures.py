"""pytest fixtures for a real containerd (a plugin of test/integration/conftest.py):

  * `busybox_archive`: the local image, built once per session;
  * `containerd`: one containerd per test module, started on first use with
    that image imported; everything it made is removed after the module, so
    that the rest of the suite runs on a machine without it;
  * `pod_runner`: the tests' CRI pod runner; after each test every sandbox
    on the runtime is stopped and removed (containerd is started again first
    if the test killed it), so each test starts from an empty runtime."""
import os
import shutil
import tempfile

import pytest

from .daemon import Containerd, missing
from .image import IMAGE, available, build
from .runner import PodRunner


@pytest.fixture(scope="session")
def busybox_archive():
    # A machine without containerd fails here, it does not skip: test/deps
    # installs it, and a skipped real-runtime proof is no proof.
    why = missing() or available()
    if why:
        pytest.fail(why)
    d = tempfile.mkdtemp(prefix="kvimage-", dir="/tmp")
    try:
        yield build(os.path.join(d, "busybox.tar"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def containerd(busybox_archive):
    ctrd = Containerd(IMAGE)
    runner = PodRunner(ctrd)
    try:
        ctrd.start()
        runner.wait_ready()
        ctrd.import_image(busybox_archive)
        yield ctrd
    finally:
        ctrd.cleanup(runner)
        runner.close()


@pytest.fixture
def pod_runner(containerd):
    runner = PodRunner(containerd)
    yield runner
    if not containerd.running:
        containerd.start()
    runner.wait_ready()
    runner.remove_everything()
    runner.close()
