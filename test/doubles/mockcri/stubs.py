"""Python gRPC stubs for the CRI API (runtime.v1), generated at test time from
the reference `cri-api-v1.proto` (never committed), like mockcsi/stubs.py does
for csi.proto: the double cannot drift from the upstream API.

The reference marks registry credentials `[debug_redact = true]`, a field
option Debian 12's protoc (3.21) does not know; it is stripped first.  The
file is saved as `cri_api_v1.proto` so the module name is importable."""
import os
import re

from doubles.mockcsi.stubs import generate, import_from, reference_dir


def stub_dir():
    with open(os.path.join(reference_dir(), "cri-api-v1.proto")) as f:
        text = re.sub(r"\s*\[debug_redact\s*=\s*true\]", "", f.read()).encode()
    return generate("kvolumed-mockcri-stubs", {"cri_api_v1.proto": text})


_loaded = None


def load():
    """(cri_pb2, cri_pb2_grpc)"""
    global _loaded
    if _loaded is None:
        _loaded = import_from(stub_dir(), ("cri_api_v1_pb2", "cri_api_v1_pb2_grpc"))
    return _loaded
