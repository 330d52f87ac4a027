"""Shared pytest set-up for the integration suite.

The suite runs as root inside a private mount namespace (test/check wraps it in
`unshare -m --propagation private`), so every mount a test makes disappears
with the namespace even if the test crashes.  Loop devices are global and are
detached by the fixtures that create them.
"""
import os
import sys

TEST_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TEST_DIR)
if TEST_DIR not in sys.path:
    sys.path.insert(0, TEST_DIR)

# Fixtures of the test doubles live next to the doubles themselves.
pytest_plugins = [
    "doubles.fakeapi.fixtures",
    "doubles.mockcsi.fixtures",
    "doubles.containerd.fixtures",
    "integration.agent_fixtures",
]
