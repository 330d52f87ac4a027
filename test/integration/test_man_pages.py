"""The man pages against the code they document, so that the two cannot
drift apart: the configuration keys, their defaults and which of them a
reload applies come from conf/config.c (its key table and its list of
reloadable settings, whatever sections other work adds), and are compared
with kvolumed.conf(5) and kvolumed(8); the pages are rendered with scdoc and
groff as man(1) shows them.  No daemon runs: well under a second."""
import json
import os
import re
import subprocess

import pytest

from integration.agent_fixtures import REPO_DIR, build_dir

CONFIG_C = os.path.join(REPO_DIR, "conf", "config.c")
CONF_PAGE = os.path.join(REPO_DIR, "conf", "kvolumed.conf.5.scd")
AGENT_PAGE = os.path.join(REPO_DIR, "agent", "kvolumed.8.scd")
# A [driver "NAME"] section's one key, as conf/config.c parses it.
DRIVER_KEY = ("driver \"NAME\"", "endpoint")


def c_array(source, name):
    """The text between the braces of `name[] = { ... };` in config.c."""
    m = re.search(re.escape(name) + r"\[\]\s*=\s*\{(.*?)\};", source, re.S)
    assert m, f"conf/config.c has no {name}[]: update this test with the code"
    return m.group(1)


@pytest.fixture(scope="module")
def code():
    with open(CONFIG_C) as f:
        source = f.read()
    table = re.findall(r'\{\s*"([a-z]+)",\s*"([a-z-]+)",\s*VALUE_\w+,\s*FIELD\(\w+\),\s*(NULL|"[^"]*")',
                       c_array(source, "key_table"))
    keys = {(s, k): (None if d == "NULL" else d.strip('"')) for s, k, d in table}
    reloadable = set(re.findall(r'"([^"]+)"', c_array(source, "reloadable_settings")))
    # Not vacuous: the table has the sections every kvolumed has.
    assert {"agent", "kubernetes", "csi", "metrics", "log"} <= {s for s, _ in keys}, keys
    assert reloadable and "log.level" in reloadable, reloadable
    return keys, reloadable


def read(path):
    with open(path) as f:
        return f.read()


def plain(text):
    """scdoc markup (*bold*, _underline_, escapes) off."""
    text = re.sub(r"(?<![A-Za-z0-9])_(.+?)_(?![A-Za-z0-9])", r"\1", text.replace("\\(dq", '"'))
    return " ".join(re.sub(r"\\(.)", r"\1", text.replace("*", "")).split())


def conf_page_entries():
    """{(section, key): its text} from kvolumed.conf(5)'s "# [section]" parts."""
    entries = {}
    section = None
    current = []
    for line in read(CONF_PAGE).splitlines():
        m = re.match(r"# \[(.*)\]$", line)
        if m:
            section = m.group(1).replace("\\(dq", '"')
            current = []
            continue
        if line.startswith("# "):
            section = None
            continue
        if section is None:
            continue
        keys = re.findall(r"\*([a-z-]+)\* = ", line) if not line.startswith("\t") else []
        if keys:
            current = []
            for k in keys:
                entries[(section, k)] = current
        else:
            current.append(line)
    return {k: plain(" ".join(v)) for k, v in entries.items()}


def rendered(page):
    scd = subprocess.run(["scdoc"], stdin=open(page), capture_output=True, check=True).stdout
    r = subprocess.run(["groff", "-man", "-Tutf8", "-P-cbou", "-rLL=200n"], input=scd, capture_output=True,
                       check=True)
    return r.stdout.decode()


def paragraph(text, start, end):
    i = text.index(start)
    return text[i:text.index(end, i)]


def reload_names(text):
    names = set(re.findall(r"\*([a-z]+\.[a-z-]+)\*", text))
    if '[driver "NAME"]' in plain(text):
        names.add("driver")
    return names


def test_every_key_of_the_code_is_in_kvolumed_conf_5_and_no_other(code):
    keys, _ = code
    documented = set(conf_page_entries())
    expected = set(keys) | {DRIVER_KEY}
    assert documented - expected == set(), f"kvolumed.conf(5) documents keys the code does not know: " \
        f"{sorted(documented - expected)}"
    assert expected - documented == set(), f"kvolumed.conf(5) lacks keys of conf/config.c: " \
        f"{sorted(expected - documented)}"


def test_defaults_in_kvolumed_conf_5_are_the_codes(code):
    keys, _ = code
    entries = conf_page_entries()
    wrong = {f"{s}.{k}": d for (s, k), d in keys.items()
             if d is not None and (s, k) in entries
             and not re.search(r"Default: *" + re.escape(d) + r"\b", entries[(s, k)])}
    assert wrong == {}, f"kvolumed.conf(5) gives other defaults than conf/config.c for: {wrong}"


def test_reloadable_keys_in_both_pages_are_the_codes(code):
    _, reloadable = code
    conf5 = reload_names(paragraph(read(CONF_PAGE), "On a reload", "\n\n"))
    assert conf5 == reloadable, f"kvolumed.conf(5) on reload: {sorted(conf5)}, the code: {sorted(reloadable)}"
    page8 = reload_names(paragraph(read(AGENT_PAGE), "*SIGHUP*", "\n# "))
    assert page8 == reloadable, f"kvolumed(8) SIGHUP: {sorted(page8)}, the code: {sorted(reloadable)}"


def test_driver_section_heading_renders_with_its_quotes():
    lines = rendered(CONF_PAGE).splitlines()
    assert '[driver "NAME"]' in lines, [line for line in lines if "driver" in line and not line.startswith(" ")]


def test_files_of_kvolumed_8_name_what_is_installed_and_read(code):
    keys, _ = code
    files = paragraph(rendered(AGENT_PAGE), "\nFILES\n", "\nSEE ALSO\n")
    flat = " ".join(files.split())
    # What the daemon reads and writes: its default kubeconfig, and its
    # records' directory under root-dir (volume/host/paths.h's RECORDS_DIR).
    with open(os.path.join(REPO_DIR, "volume", "host", "paths.h")) as f:
        records = re.search(r'#define RECORDS_DIR "([^"]+)"', f.read()).group(1)
    for path in (keys[("kubernetes", "kubeconfig")], f"<root-dir>/{records}/"):
        assert path in flat, f"FILES lacks {path}:\n{files}"
    # What an installation puts in place (meson's own list), by name.
    installed = os.path.join(build_dir(), "meson-info", "intro-installed.json")
    with open(installed) as f:
        names = {os.path.basename(p) for p in json.load(f).values()}
    names -= {"kvolumed", "kvolumed.8", "kvolumed.conf.5", "kvolumed.conf.example"}
    assert {"kvolumed.catalog", "rbac.yaml", "kvolumed.service"} <= names, names
    missing = {n for n in names if n not in flat}
    assert missing == set(), f"FILES of kvolumed(8) lacks {sorted(missing)}:\n{files}"
