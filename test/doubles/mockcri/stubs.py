"""Python gRPC stubs for the CRI API (runtime.v1), generated at test time from
the reference `cri-api-v1.proto` (never committed), like mockcsi/stubs.py does
for csi.proto: the double cannot drift from the upstream API.

The reference marks registry credentials `[debug_redact = true]`, a field
option Debian 12's protoc (3.21) does not know; it is stripped first.  The
file is saved as `cri_api_v1.proto` so the module name is importable."""
import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

from doubles.mockcsi.stubs import GRPC_PLUGIN, reference_dir

_GENERATOR_VERSION = "1"


def _cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or tempfile.gettempdir()
    return os.path.join(base, "kvolumed-mockcri-stubs")


def stub_dir():
    with open(os.path.join(reference_dir(), "cri-api-v1.proto")) as f:
        text = re.sub(r"\s*\[debug_redact\s*=\s*true\]", "", f.read()).encode()
    key = hashlib.sha256(text + b"\0" + _GENERATOR_VERSION.encode()).hexdigest()
    final = os.path.join(_cache_root(), key[:32])
    if os.path.exists(os.path.join(final, "cri_api_v1_pb2_grpc.py")):
        return final
    os.makedirs(_cache_root(), exist_ok=True)
    work = tempfile.mkdtemp(prefix=".gen-", dir=_cache_root())
    try:
        with open(os.path.join(work, "cri_api_v1.proto"), "wb") as f:
            f.write(text)
        subprocess.run(["protoc", "--python_out=" + work, "--grpc_python_out=" + work,
                        "--plugin=protoc-gen-grpc_python=" + GRPC_PLUGIN, "-I" + work, "cri_api_v1.proto"],
                       check=True, cwd=work, capture_output=True)
        try:
            os.rename(work, final)
        except OSError:
            if not os.path.isdir(final):
                raise
    finally:
        if os.path.isdir(work):
            shutil.rmtree(work, ignore_errors=True)
    return final


_loaded = None


def load():
    """(cri_pb2, cri_pb2_grpc)"""
    global _loaded
    if _loaded is None:
        d = stub_dir()
        if d not in sys.path:
            sys.path.insert(0, d)
        _loaded = (importlib.import_module("cri_api_v1_pb2"), importlib.import_module("cri_api_v1_pb2_grpc"))
    return _loaded
