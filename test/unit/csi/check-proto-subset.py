#!/usr/bin/python3
"""Wire compatibility of kvolumed's .proto subsets with the reference specs.

Both sides are compiled by protoc into FileDescriptorSets and compared with
python3-protobuf: every message, enum and service method of our subset must
exist in the reference under the same full name, every field with the same
number, type, label and (for message/enum fields) type name, every enum value
with the same number.  The one allowed difference is csi.v1.BoolValue standing
in for google.protobuf.BoolValue, whose own shape is checked against the
reference's wrappers.proto.  The list of secret-bearing fields kept in
csi/describe.c must equal the reference's [(csi_secret) = true] fields within
the subset.  Prints TAP.

usage: check-proto-subset.py SOURCE_ROOT REFERENCE_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

SUBSTITUTES = {".csi.v1.BoolValue": ".google.protobuf.BoolValue"}

results = []


def check(ok, what):
    results.append((bool(ok), what))


def descriptor_set(include_dirs, files):
    with tempfile.NamedTemporaryFile(suffix=".pb") as out:
        cmd = ["protoc", "--include_imports", "--descriptor_set_out=" + out.name]
        cmd += ["-I" + d for d in include_dirs] + list(files)
        subprocess.run(cmd, check=True)
        fds = descriptor_pb2.FileDescriptorSet()
        fds.ParseFromString(open(out.name, "rb").read())
        return fds


def index(fds):
    """full name -> descriptor proto, for messages, enums and services."""
    msgs, enums, services = {}, {}, {}

    def walk_msg(prefix, m):
        name = prefix + "." + m.name
        msgs[name] = m
        for n in m.nested_type:
            walk_msg(name, n)
        for e in m.enum_type:
            enums[name + "." + e.name] = e

    for f in fds.file:
        prefix = "." + f.package if f.package else ""
        for m in f.message_type:
            walk_msg(prefix, m)
        for e in f.enum_type:
            enums[prefix + "." + e.name] = e
        for s in f.service:
            services[prefix + "." + s.name] = s
    return msgs, enums, services


def compare(ours_fds, ref_fds, own_files, complete=True):
    ours = index(ours_fds)
    ref = index(ref_fds)
    own_pkgs = {"." + f.package for f in ours_fds.file if f.name in own_files}
    o_msgs, o_enums, o_services = ours
    r_msgs, r_enums, r_services = ref
    for name, m in sorted(o_msgs.items()):
        if not any(name.startswith(p + ".") for p in own_pkgs):
            continue
        ref_name = SUBSTITUTES.get(name, name)
        rm = r_msgs.get(ref_name)
        check(rm is not None, "message %s exists in the reference" % ref_name)
        if rm is None:
            continue
        rfields = {f.name: f for f in rm.field}
        for f in m.field:
            rf = rfields.get(f.name)
            check(rf is not None, "%s.%s exists in the reference" % (name, f.name))
            if rf is None:
                continue
            same = (f.number == rf.number and f.type == rf.type and f.label == rf.label and
                    SUBSTITUTES.get(f.type_name, f.type_name) == rf.type_name and
                    f.HasField("oneof_index") == rf.HasField("oneof_index"))
            check(same, "%s.%s: number %d type %d label %d %s (reference: %d %d %d %s)" % (
                name, f.name, f.number, f.type, f.label, f.type_name, rf.number, rf.type, rf.label, rf.type_name))
        # A field the reference has and we lack would be silently dropped on decode.
        ours_names = {f.name for f in m.field}
        for rf in (rm.field if complete else ()):
            check(rf.name in ours_names, "%s.%s of the reference is in our subset" % (name, rf.name))
    for name, e in sorted(o_enums.items()):
        if not any(name.startswith(p + ".") for p in own_pkgs):
            continue
        re_ = r_enums.get(name)
        check(re_ is not None, "enum %s exists in the reference" % name)
        if re_ is None:
            continue
        rvals = {v.name: v.number for v in re_.value}
        for v in e.value:
            check(rvals.get(v.name) == v.number, "%s.%s = %d" % (name, v.name, v.number))
        check(len(e.value) == len(re_.value), "%s has all %d values of the reference" % (name, len(re_.value)))
    for name, s in sorted(o_services.items()):
        rs = r_services.get(name)
        check(rs is not None, "service %s exists in the reference" % name)
        if rs is None:
            continue
        rmeth = {m.name: m for m in rs.method}
        for m in s.method:
            rm = rmeth.get(m.name)
            check(rm is not None and rm.input_type == m.input_type and rm.output_type == m.output_type,
                  "rpc %s/%s(%s) returns (%s)" % (name, m.name, m.input_type, m.output_type))
        check(len(s.method) == len(rs.method) or name != ".pluginregistration.Registration",
              "%s has every method of the reference" % name)
    return ref


def secret_fields_of_reference(ref_fds, subset_msgs):
    """(message, field) pairs with [(csi_secret) = true] among our messages."""
    secrets = set()
    # 1059 is the csi_secret extension number in csi.proto.
    for f in ref_fds.file:
        if f.package != "csi.v1":
            continue
        stack = [("." + f.package + "." + m.name, m) for m in f.message_type]
        while stack:
            name, m = stack.pop()
            stack += [(name + "." + n.name, n) for n in m.nested_type]
            if name not in subset_msgs:
                continue
            for fld in m.field:
                for (fd, val) in fld.options.ListFields():
                    if fd.number == 1059 and val:
                        secrets.add((name[1:], fld.name))
                unknown = fld.options.SerializeToString()
                # Extensions not linked in are kept as unknown fields: tag 1059, varint 1.
                if b"\x98\x42\x01" in unknown:
                    secrets.add((name[1:], fld.name))
    return secrets


def main():
    src, ref_dir = sys.argv[1], sys.argv[2]
    csi_dir = os.path.join(src, "csi")
    with tempfile.TemporaryDirectory() as tmp:
        # The reference registration proto has a '-' in its name; copy it.
        reg = os.path.join(tmp, "pluginregistration_ref.proto")
        text = open(os.path.join(ref_dir, "pluginregistration-v1.proto")).read()
        text = re.sub(r'^\s*import\s+"[^"]*gogo\.proto"\s*;\s*$', "", text, flags=re.M)
        text = re.sub(r'\s*\[\(gogoproto\.[^\]]*\]', "", text)
        text = re.sub(r'^\s*option\s+\(gogoproto\.[^;]*;\s*$', "", text, flags=re.M)
        open(reg, "w").write(text)
        ref_csi = descriptor_set([ref_dir, "/usr/include"], [os.path.join(ref_dir, "csi.proto")])
        ref_reg = descriptor_set([tmp], [reg])
        # Debian 12's protoc (3.21) predates the debug_redact field option.
        cri = os.path.join(tmp, "cri_ref.proto")
        text = open(os.path.join(ref_dir, "cri-api-v1.proto")).read()
        open(cri, "w").write(re.sub(r"\s*\[debug_redact\s*=\s*true\]", "", text))
        ref_cri = descriptor_set([tmp], [cri])
    ours_csi = descriptor_set([csi_dir], [os.path.join(csi_dir, "csi.proto")])
    ours_reg = descriptor_set([csi_dir], [os.path.join(csi_dir, "pluginregistration.proto")])

    compare(ours_csi, ref_csi, {"csi.proto"})
    compare(ours_reg, ref_reg, {"pluginregistration.proto"})
    # The CRI subset reads a few fields of a few answers: fields it lacks are
    # skipped on decode, on purpose; what it has must match the wire.
    ours_cri = descriptor_set([csi_dir], [os.path.join(csi_dir, "cri.proto")])
    compare(ours_cri, ref_cri, {"cri.proto"}, complete=False)

    # BoolValue stand-in: the same shape as google.protobuf.BoolValue.
    o_msgs = index(ours_csi)[0]
    r_msgs = index(ref_csi)[0]
    ob, rb = o_msgs[".csi.v1.BoolValue"], r_msgs[".google.protobuf.BoolValue"]
    check([(f.name, f.number, f.type, f.label) for f in ob.field] ==
          [(f.name, f.number, f.type, f.label) for f in rb.field], "csi.v1.BoolValue is shaped like google.protobuf.BoolValue")

    # Every message reachable from Identity and Node is in the subset.
    ref_services = index(ref_csi)[2]
    needed = set()

    def use(t):
        if t in needed or t not in r_msgs:
            return
        needed.add(t)
        for f in r_msgs[t].field:
            if f.type_name:
                use(f.type_name)
    for s in ("Identity", "Node"):
        for m in ref_services[".csi.v1." + s].method:
            use(m.input_type)
            use(m.output_type)
    for t in sorted(needed):
        check(SUBSTITUTES.get(t, t) in {SUBSTITUTES.get(n, n) for n in o_msgs} or
              t in {SUBSTITUTES.get(n, n) for n in o_msgs}, "%s (used by Identity/Node) is in the subset" % t)

    listed = set(re.findall(r'\{\s*"([a-zA-Z0-9_.]+)",\s*"([a-z_]+)"\s*\}',
                            open(os.path.join(csi_dir, "describe.c")).read().split("csi-secret-fields-begin")[1]
                            .split("csi-secret-fields-end")[0]))
    expected = secret_fields_of_reference(ref_csi, set(o_msgs))
    check(expected and listed == expected, "secret fields in csi/describe.c %s == reference csi_secret fields %s" % (
        sorted(listed), sorted(expected)))

    print("TAP version 13")
    print("1..%d" % len(results))
    failed = 0
    for i, (ok, what) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if ok else "not ok", i, what))
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
