"""Under systemd (JOURNAL_STREAM names stderr) entries go to the journal as
structured records; tested against a stand-in journald socket in a nested
private mount namespace, so the machine's /run is untouched."""
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def test_entries_are_structured_journal_records(kvolumed_bin, agent_config):
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "/usr/bin/python3",
         os.path.join(HERE, "journal_capture.py"), "--seconds", "0.3", "--",
         kvolumed_bin, "--config", agent_config],
        capture_output=True, text=True, timeout=30, check=True)
    result = json.loads(out.stdout)
    assert result["exit"] == 0
    # Nothing is duplicated as text on stderr when the journal takes the entries.
    assert result["stderr"] == ""
    starting = [e for e in result["entries"] if "starting for node test-node" in e.get("MESSAGE", "")]
    assert len(starting) == 1
    e = starting[0]
    assert e["PRIORITY"] == "6"
    assert e["SYSLOG_IDENTIFIER"] == "kvolumed"
    assert e["CODE_FUNC"] == "agent_run"
    assert e["CODE_FILE"].endswith("agent.c")
    assert any("stopping; volumes stay as they are" in x.get("MESSAGE", "") for x in result["entries"])
