"""Identity, NodeGetInfo/capabilities, the registration socket, stub generation."""
import os
import stat
import subprocess

import grpc
import pytest

from doubles.mockcsi import CSIClient, stubs


def test_identity_and_node_info(mock_csi_factory):
    drv = mock_csi_factory(name="x.csi.example.com", vendor_version="9.8.7", node_id="worker-7",
                           max_volumes=17, topology={"topology.kubernetes.io/zone": "z1", "rack": "r9"})
    c = drv.csi
    info = c.identity("GetPluginInfo")
    assert (info.name, info.vendor_version) == ("x.csi.example.com", "9.8.7")
    caps = c.identity("GetPluginCapabilities").capabilities
    assert [cap.service.type for cap in caps] == [c.pb.PluginCapability.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS]
    assert c.identity("Probe").ready.value is True
    ni = c.node("NodeGetInfo")
    assert (ni.node_id, ni.max_volumes_per_node) == ("worker-7", 17)
    assert dict(ni.accessible_topology.segments) == {"topology.kubernetes.io/zone": "z1", "rack": "r9"}
    assert c.caps() == ["EXPAND_VOLUME", "GET_VOLUME_STATS", "STAGE_UNSTAGE_VOLUME"]


def test_settings_change_at_run_time(mock_csi):
    ctl, c = mock_csi.control, mock_csi.csi
    new = ctl.set_config(caps=["VOLUME_MOUNT_GROUP", "SINGLE_NODE_MULTI_WRITER", "VOLUME_CONDITION"],
                         node_id="n2", probe_ready=False)
    assert (new["node_id"], new["probe_ready"]) == ("n2", False)
    assert c.caps() == ["SINGLE_NODE_MULTI_WRITER", "VOLUME_CONDITION", "VOLUME_MOUNT_GROUP"]
    assert c.node("NodeGetInfo").node_id == "n2"
    assert c.identity("Probe").ready.value is False
    ctl.set_caps()
    assert c.caps() == []
    with pytest.raises(Exception) as e:
        ctl.set_caps("FLY")
    assert e.value.status == 400


def test_registration_socket(mock_csi_factory):
    drv = mock_csi_factory(registration_dir=True, name="reg.csi.example.com")
    assert drv.registration_socket == os.path.join(drv.registration_dir, "reg.csi.example.com-reg.sock")
    assert stat.S_ISSOCK(os.stat(drv.registration_socket).st_mode)
    r = CSIClient(drv.registration_socket)
    info = r.registration("GetInfo")
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "CSIPlugin", "reg.csi.example.com", drv.socket_path, ["1.0.0"])
    r.registration("NotifyRegistrationStatus", r.reg_pb.RegistrationStatus(plugin_registered=False, error="nope"))
    r.registration("NotifyRegistrationStatus", r.reg_pb.RegistrationStatus(plugin_registered=True))
    notes = drv.control.registration()["notifications"]
    assert [(n["plugin_registered"], n["error"]) for n in notes] == [(False, "nope"), (True, "")]
    assert [e["method"] for e in drv.calls()] == ["GetInfo", "NotifyRegistrationStatus", "NotifyRegistrationStatus"]

    drv.control.stop_registration()
    assert not os.path.exists(drv.registration_socket)
    drv.control.start_registration()
    assert stat.S_ISSOCK(os.stat(drv.registration_socket).st_mode)


def test_registration_negative_settings(mock_csi_factory):
    drv = mock_csi_factory(registration_dir=True, registration_versions=["2.0.0", "v0.3"],
                           registration_type="DevicePlugin", registration_endpoint="/elsewhere/csi.sock")
    info = CSIClient(drv.registration_socket).registration("GetInfo")
    assert (info.type, info.endpoint, list(info.supported_versions)) == (
        "DevicePlugin", "/elsewhere/csi.sock", ["2.0.0", "v0.3"])
    drv.control.set_config(registration_versions=[])
    assert list(CSIClient(drv.registration_socket).registration("GetInfo").supported_versions) == []
    drv.control.fail_next("GetInfo", "UNAVAILABLE", "not yet")
    with pytest.raises(grpc.RpcError) as e:
        CSIClient(drv.registration_socket).registration("GetInfo")
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.UNAVAILABLE, "not yet")


def test_no_registration_socket_unless_asked(mock_csi):
    assert mock_csi.registration_socket is None
    assert mock_csi.control.registration() == {"serving": False, "socket": None, "notifications": []}


def test_strip_gogo_removes_import_and_options():
    src = ('syntax = "proto3";\nimport "github.com/gogo/protobuf/gogoproto/gogo.proto";\n'
           'option (gogoproto.goproto_getters_all) = false;\n'
           'message M {\n  string a = 1 [(gogoproto.customname) = "A", deprecated = true];\n'
           '  repeated string b = 2 [(gogoproto.nullable) = false];\n}\n')
    assert stubs.strip_gogo(src) == ('syntax = "proto3";\nmessage M {\n'
                                     '  string a = 1 [deprecated = true];\n  repeated string b = 2;\n}\n')


def test_stubs_generate_from_reference_dir_override(tmp_path):
    """KVOLUMED_REFERENCE_DIR and XDG_CACHE_HOME are honoured, generation is cached."""
    ref = tmp_path / "ref"
    ref.mkdir()
    real = stubs.reference_dir()
    for f in ("csi.proto", "pluginregistration-v1.proto"):
        (ref / f).write_bytes(open(os.path.join(real, f), "rb").read())
    code = ("from doubles.mockcsi import stubs; d = stubs.stub_dir(); "
            "m = stubs.load()[0]; print(d); print(m.__file__)")
    env = dict(os.environ, KVOLUMED_REFERENCE_DIR=str(ref), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(stubs.__file__))))
    out = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0].startswith(str(tmp_path / "cache" / "kvolumed-mockcsi-stubs") + "/")
    assert out[1] == os.path.join(out[0], "csi_pb2.py")
    mtime = os.stat(out[1]).st_mtime_ns
    again = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    assert again == out and os.stat(out[1]).st_mtime_ns == mtime  # not regenerated
