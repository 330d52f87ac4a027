"""pytest fixtures of the fake API server (loaded through pytest_plugins)."""
import pytest

from .server import FakeApiServer


@pytest.fixture
def fake_api(tmp_path):
    """A started FakeApiServer with its files in tmp_path/fakeapi; stopped
    after the test.  Set .bookmark_interval (seconds, default 1) to change
    how often watches with allowWatchBookmarks get a BOOKMARK.
    fake_api.node_kubeconfig("test-node") is a kubeconfig for the node's own
    identity, which the Node authorizer and NodeRestriction restrict."""
    api = FakeApiServer(tmp_path / "fakeapi")
    api.start()
    try:
        yield api
    finally:
        api.stop()
