"""pytest fixtures for a real containerd (import them into a test module):

  * `containerd`: one containerd for the whole session, started on first use,
    with the local busybox image imported; everything it made is removed at
    the end of the session;
  * `pod_runner`: the tests' CRI pod runner; after each test every sandbox
    on the runtime is stopped and removed (containerd is started again first
    if the test killed it), so each test starts from an empty runtime."""
import os

import pytest

from .daemon import Containerd, missing
from .image import IMAGE, available, build
from .runner import PodRunner


@pytest.fixture(scope="session")
def containerd():
    # A machine without containerd fails here, it does not skip: test/deps
    # installs it, and a skipped real-runtime proof is no proof.
    why = missing() or available()
    if why:
        pytest.fail(why)
    ctrd = Containerd(IMAGE)
    runner = PodRunner(ctrd)
    try:
        ctrd.start()
        runner.wait_ready()
        ctrd.import_image(build(os.path.join(ctrd.dir, "busybox.tar")))
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
