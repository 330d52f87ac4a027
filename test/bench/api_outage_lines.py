"""How many warning lines about the API server kvolumed logs in 10 s of an
outage at boot (issue 22: one line per change of state, not per retry).  A
measurement over a fixed window, not a test; run it against any build:

  cd test && KVOLUMED_BUILD_DIR=/path/to/build PYTHONPATH=$PWD \\
      unshare -m --propagation private python3 -m pytest bench/api_outage_lines.py -q -s -p no:cacheprovider

Measured on the shared, loaded 2-core machine: 27 and 29 lines at 59d9a3a
(two runs: each informer and the volume manager once per retry, the node
annotation writer once per retry), 1 after."""
import os
import time

from integration.test_agent_day2 import relay, start_relayed, warnings  # noqa: F401 (relay is a fixture)

pytest_plugins = ["doubles.fakeapi.fixtures", "doubles.mockcsi.fixtures", "integration.agent_fixtures"]

WINDOW = 10.0


def test_outage_lines(volume_env, relay):
    relay.down()
    start_relayed(volume_env, relay)
    time.sleep(WINDOW)
    host = f"127.0.0.1:{relay.port}"
    lines = warnings(volume_env.agent.output(), host)
    print(f"\n{os.environ.get('KVOLUMED_BUILD_DIR', 'build')}: {len(lines)} warning lines about the API server "
          f"in {WINDOW:.0f} s of outage")
    for line in lines:
        print("  " + line[:160])
