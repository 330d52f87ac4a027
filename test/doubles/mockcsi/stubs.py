"""Python gRPC stubs for the CSI and kubelet plugin-registration protos.

The stubs are generated at test time, never committed: the reference protos
in `../shared/reference/` (or `$KVOLUMED_REFERENCE_DIR`) are the source of
truth, and generating from them means the double cannot drift from the spec
the C code is written against.

Generation runs `protoc` with Debian's `grpc_python_plugin` into a cache dir
keyed by the sha256 of the inputs, and only when that dir is missing.  The
dir is filled in a temporary sibling and renamed into place, so several
drivers (processes) starting at once never import half-written modules.

`pluginregistration-v1.proto` is preprocessed before protoc sees it:
  * upstream versions of it import `github.com/gogo/protobuf/gogoproto/gogo.proto`
    and set `(gogoproto.*)` file/field options.  gogo.proto is not shipped by
    Debian's protobuf packages and the options only steer Go code generation,
    so the import line and every `(gogoproto.*)` option are stripped.  (The
    copy in reference/ at the time of writing already has none; stripping is a
    no-op then.)
  * its file name contains a `-`, which would give a module name Python cannot
    import, so the copy is saved as `pluginregistration_v1.proto`.
"""
import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

GRPC_PLUGIN = "/usr/bin/grpc_python_plugin"
PROTO_INCLUDE = "/usr/include"  # google/protobuf/*.proto from libprotobuf-dev
# Bump when the preprocessing below changes, so old caches are not reused.
_GENERATOR_VERSION = "2"


def reference_dir():
    """Directory holding the reference protos (env override first)."""
    env = os.environ.get("KVOLUMED_REFERENCE_DIR")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    return os.path.join(os.path.dirname(repo), "shared", "reference")


def strip_gogo(text):
    """Remove the gogoproto import and every (gogoproto.x) option from a proto."""
    text = re.sub(r'^\s*import\s+"[^"]*gogo\.proto"\s*;\s*\n', "", text, flags=re.M)
    # File-level: option (gogoproto.foo) = true;
    text = re.sub(r'^\s*option\s+\(gogoproto\.[A-Za-z_]+\)\s*=\s*[^;]*;\s*\n', "", text, flags=re.M)
    # Field-level: [(gogoproto.a) = x, (gogoproto.b) = "y"] possibly mixed with others.
    def fix_brackets(m):
        opts = [o.strip() for o in m.group(1).split(",")]
        keep = [o for o in opts if o and not o.startswith("(gogoproto.")]
        return " [" + ", ".join(keep) + "]" if keep else ""
    return re.sub(r'\s*\[([^\]]*\(gogoproto\.[^\]]*)\]', fix_brackets, text)


def _cache_root(name):
    base = os.environ.get("XDG_CACHE_HOME") or tempfile.gettempdir()
    return os.path.join(base, name)


def generate(cache_name, sources, includes=()):
    """Runs protoc on sources ({file name: text as bytes}) into a cache dir
    under cache_name keyed by their sha256, unless it is there already, and
    returns that dir.  Shared with the other doubles' stubs (mockcri)."""
    digest = hashlib.sha256(_GENERATOR_VERSION.encode())
    for name in sorted(sources):
        digest.update(b"\0" + name.encode() + b"\0" + sources[name])
    root = _cache_root(cache_name)
    final = os.path.join(root, digest.hexdigest()[:32])
    if os.path.exists(os.path.join(final, ".complete")):
        return final
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".gen-", dir=root)
    try:
        for name, text in sources.items():
            with open(os.path.join(work, name), "wb") as f:
                f.write(text)
        subprocess.run(
            ["protoc", "--python_out=" + work, "--grpc_python_out=" + work,
             "--plugin=protoc-gen-grpc_python=" + GRPC_PLUGIN, "-I" + work]
            + ["-I" + i for i in includes] + sorted(sources),
            check=True, cwd=work, capture_output=True)
        open(os.path.join(work, ".complete"), "w").close()
        try:
            os.rename(work, final)
        except OSError:
            # Another process won the race; its result is identical.
            if not os.path.isdir(final):
                raise
    finally:
        if os.path.isdir(work):
            shutil.rmtree(work, ignore_errors=True)
    return final


def import_from(directory, modules):
    """The generated *_grpc modules do `import x_pb2`, so the dir itself
    must be on sys.path (not a package)."""
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return tuple(importlib.import_module(m) for m in modules)


def stub_dir():
    """Return the directory holding the generated modules, generating if needed."""
    ref = reference_dir()
    with open(os.path.join(ref, "csi.proto"), "rb") as f:
        csi_text = f.read()
    with open(os.path.join(ref, "pluginregistration-v1.proto"), "rb") as f:
        reg_text = strip_gogo(f.read().decode()).encode()
    return generate("kvolumed-mockcsi-stubs", {"csi.proto": csi_text, "pluginregistration_v1.proto": reg_text},
                    includes=(PROTO_INCLUDE,))


_loaded = None


def load():
    """Import and return (csi_pb2, csi_pb2_grpc, reg_pb2, reg_pb2_grpc)."""
    global _loaded
    if _loaded is None:
        _loaded = import_from(stub_dir(), ("csi_pb2", "csi_pb2_grpc", "pluginregistration_v1_pb2",
                                           "pluginregistration_v1_pb2_grpc"))
    return _loaded
