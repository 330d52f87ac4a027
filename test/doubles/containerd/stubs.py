"""Python message classes for cri_runner.proto, generated at test time (never
committed) with the helper the other doubles use (doubles/mockcsi/stubs.py):
protoc into a cache dir keyed by the file's sha256."""
import os

from doubles.mockcsi.stubs import generate, import_from

_loaded = None


def load():
    """The cri_runner_pb2 module."""
    global _loaded
    if _loaded is None:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cri_runner.proto"), "rb") as f:
            text = f.read()
        (_loaded,) = import_from(generate("kvolumed-cri-runner-stubs", {"cri_runner.proto": text}),
                                 ("cri_runner_pb2",))
    return _loaded
