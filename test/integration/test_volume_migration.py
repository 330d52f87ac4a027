"""In-tree cloud volumes served through CSI migration (issue 33), as kubelet
serves them (pkg/volume/csimigration, the desired state populator's
createVolumeSpec, pkg/volume/csi; kubelet-facts §1, §3).

For each of the six migrated plugins the mock driver runs under the CSI
driver's name; a pod uses a PV in in-tree form through a claim and an inline
volume of the same kind.  The translated volumes must be staged and published
with the handle, attributes and paths kubelet uses (the expected values are
csi-translation-lib's own, from its *_test.go cases where it has them and
its code where it has none: cited at each kind), behind the attach wait on
the VolumeAttachment the attach/detach controller names for the migrated
volume (test/doubles/fakeapi/attacher.py), be reported in volumesInUse under
kubelet's unique name, be labelled migrated="true" in the metrics, survive a
restart with no CSI call, and be torn down cleanly.

One node (the fake API server, six drivers, kvolumed) serves the whole
module: the scenario runs once, in the module fixture, and each test checks
one kind's part of what it recorded."""
import hashlib
import json
import os
import re
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass, field

import pytest

from doubles.fakeapi.attacher import attach_volume, attachment_name, detach_volume, unique_name
from doubles.fakeapi.server import FakeApiServer
from doubles.mockcsi.fixtures import _Factory, _require_root
from integration.agent_fixtures import (DRIVER, Agent, kvolumed_path, make_node, unmount_root_dir_bind, wait_until,
                                        write_config)
from integration.test_agent_localapi import api_get
from integration.test_agent_localapi import start as local_api_start
from integration.test_agent_metrics import SERVING

pytestmark = pytest.mark.xdist_group("migration")

NODE = "test-node"
MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"


@dataclass
class Kind:
    """One in-tree plugin: its PV and inline volume in in-tree form, and what
    kubelet calls the driver with for each once translated."""
    key: str                 # the source's field name
    plugin: str              # the in-tree plugin
    driver: str              # the CSI driver it is migrated to
    attach: bool             # the driver's CSIDriver attachRequired
    pv_name: str
    pv_source: dict
    handle: str              # the translated PV's volumeHandle
    context: dict            # its volumeAttributes: the calls' volume_context
    fs_type: str
    pv_modes: list = field(default_factory=lambda: ["ReadWriteOnce"])
    pv_labels: dict = field(default_factory=dict)
    pv_annotations: dict = field(default_factory=dict)
    access_mode: str = "SINGLE_NODE_WRITER"
    stage_secret: tuple = None  # (namespace, name) of the NodeStage secret
    inline_source: dict = None
    inline_name: str = "inline"  # the pod's volume name
    inline_pv: str = None        # the translated PV's name: kubelet's spec name
    inline_handle: str = None
    inline_context: dict = None
    inline_fs_type: str = ""
    inline_modes: list = field(default_factory=lambda: ["ReadWriteOnce"])
    inline_access_mode: str = "SINGLE_NODE_WRITER"
    inline_stage_secret: tuple = None
    metadata: dict = field(default_factory=dict)  # the attacher's attachmentMetadata

    @property
    def inline_dir(self):
        """kubelet's getTargetPath: the spec name escaped (EscapeQualifiedName, "/" -> "~")."""
        return self.inline_pv.replace("/", "~")


AZURE_DISK_URI = "/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/name"
VSPHERE_PATH = ("[vsanDatastore] 6785a85e-268e-6352-a2e8-02008b7afadd/"
                "kubernetes-dynamic-pvc-68734c9f-a679-42e6-a694-39632c51e31f.vmdk")

KINDS = [
    # aws_ebs_test.go TestKubernetesVolumeIDToEBSVolumeID and
    # TestTranslateInTreeInlineVolumeToCSI: "aws://us-west-2a/vol-..." and
    # "aws:///vol-..." are volume vol-..., the inline PV "ebs.csi.aws.com-<id>";
    # aws_ebs.go: partition as a string ("0" when unset).
    Kind(key="awsElasticBlockStore", plugin="kubernetes.io/aws-ebs", driver="ebs.csi.aws.com", attach=True,
         pv_name="pv-ebs", pv_source={"volumeID": "aws://us-west-2a/vol-02399794d890f9375", "fsType": "ext4"},
         pv_labels={"topology.kubernetes.io/zone": "us-west-2a"},
         handle="vol-02399794d890f9375", context={"partition": "0"}, fs_type="ext4",
         inline_source={"volumeID": "aws:///vol-0a1b2c3d4e5f60718", "partition": 1},
         inline_pv="ebs.csi.aws.com-vol-0a1b2c3d4e5f60718", inline_handle="vol-0a1b2c3d4e5f60718",
         inline_context={"partition": "1"}, metadata={"devicePath": "/dev/xvdba"}),
    # gce_pd_test.go TestTranslateInTreePVToCSIVolIDFmt ("v1 topology key
    # zonal": projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name) and
    # TestInlineReadOnly (readOnly: ReadOnlyMany; the handle with both parts
    # UNSPECIFIED, gce_pd.go); partition "" when unset.
    Kind(key="gcePersistentDisk", plugin="kubernetes.io/gce-pd", driver="pd.csi.storage.gke.io", attach=True,
         pv_name="pv-gce", pv_source={"pdName": "pd-name", "fsType": "ext4"},
         pv_labels={"topology.kubernetes.io/zone": "us-east1-a"},
         handle="projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name", context={"partition": ""}, fs_type="ext4",
         inline_source={"pdName": "foo", "readOnly": True},
         inline_pv="pd.csi.storage.gke.io-foo", inline_handle="projects/UNSPECIFIED/zones/UNSPECIFIED/disks/foo",
         inline_context={"partition": ""}, inline_modes=["ReadOnlyMany"],
         inline_access_mode="MULTI_NODE_READER_ONLY"),
    # azure_disk_test.go TestTranslateAzureDiskInTreePVToCSI ("azure disk
    # volume": the URI as handle, cachingmode/fstype/kind attributes) and
    # TestTranslateAzureDiskInTreeInlineVolumeToCSI (the URI is the PV's
    # name too); only kind Managed is migrated (the API's default is Shared).
    Kind(key="azureDisk", plugin="kubernetes.io/azure-disk", driver="disk.csi.azure.com", attach=True,
         pv_name="pv-azure-disk",
         pv_source={"diskName": "name", "diskURI": AZURE_DISK_URI, "cachingMode": "ReadOnly", "fsType": "ext4",
                    "readOnly": False, "kind": "Managed"},
         handle=AZURE_DISK_URI, context={"cachingmode": "ReadOnly", "fstype": "ext4", "kind": "Managed"},
         fs_type="ext4",
         inline_source={"diskName": "inline", "cachingMode": "None", "fsType": "ext4", "kind": "Managed",
                        "diskURI": "/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/inline"},
         inline_pv="/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/inline",
         inline_handle="/subscriptions/12/resourceGroups/23/providers/Microsoft.Compute/disks/inline",
         inline_context={"cachingmode": "None", "fstype": "ext4", "kind": "Managed"}, inline_fs_type="ext4",
         metadata={"LUN": "0"}),
    # azure_file_test.go TestTranslateAzureFileInTreePVToCSI ("azure file
    # volume with rg annotation": <rg>#<account>#<share>#<pv>#<secret ns>,
    # the secret for NodeStage) and TestTranslateAzureFileInTreeInlineVolumeToCSI
    # ("#secretname#sharename#name#<pod namespace>", ReadWriteMany).
    Kind(key="azureFile", plugin="kubernetes.io/azure-file", driver="file.csi.azure.com", attach=False,
         pv_name="uuid",
         pv_source={"shareName": "sharename", "secretName": "secretname", "secretNamespace": "secretnamespace"},
         pv_annotations={"kubernetes.io/azure-file-resource-group": "rg"}, pv_modes=["ReadWriteMany"],
         handle="rg#secretname#sharename#uuid#secretnamespace", context={"sharename": "sharename"}, fs_type="",
         access_mode="MULTI_NODE_MULTI_WRITER", stage_secret=("secretnamespace", "secretname"),
         inline_source={"shareName": "sharename", "secretName": "secretname"}, inline_name="name",
         inline_pv="#secretname#sharename#name#default", inline_handle="#secretname#sharename#name#default",
         inline_context={"sharename": "sharename"}, inline_modes=["ReadWriteMany"],
         inline_access_mode="MULTI_NODE_MULTI_WRITER", inline_stage_secret=("default", "secretname")),
    # openstack_cinder.go (the 1.25 lib has no PV or inline case for cinder
    # in its tests): the volume ID as handle, no attributes, inline PV
    # "cinder.csi.openstack.org-<id>".
    Kind(key="cinder", plugin="kubernetes.io/cinder", driver="cinder.csi.openstack.org", attach=True,
         pv_name="pv-cinder", pv_source={"volumeID": "5a6e6e2e-16b1-4b8f-a8e0-8d8fa4e25b4d", "fsType": "ext4"},
         handle="5a6e6e2e-16b1-4b8f-a8e0-8d8fa4e25b4d", context={}, fs_type="ext4",
         inline_source={"volumeID": "0c3e5d4a-7b9f-4e2a-9c1d-2f6b8a0e4d31"},
         inline_pv="cinder.csi.openstack.org-0c3e5d4a-7b9f-4e2a-9c1d-2f6b8a0e4d31",
         inline_handle="0c3e5d4a-7b9f-4e2a-9c1d-2f6b8a0e4d31", inline_context={}),
    # vsphere_volume_test.go TestTranslateVSphereInTreePVToCSI (the volume
    # path as handle, storagepolicyname); the inline PV is
    # "csi.vsphere.vmware.com-<path>" (vsphere_volume.go), its "/" escaped
    # in the pod's volume dir.
    Kind(key="vsphereVolume", plugin="kubernetes.io/vsphere-volume", driver="csi.vsphere.vmware.com", attach=True,
         pv_name="pvc-d8b4475f-2c47-486e-9b57-43ae006f9b59",
         pv_source={"volumePath": VSPHERE_PATH, "fsType": "ext4", "storagePolicyName": "vSAN Default Storage Policy"},
         handle=VSPHERE_PATH, context={"storagepolicyname": "vSAN Default Storage Policy"}, fs_type="ext4",
         inline_source={"volumePath": "[vsanDatastore] kubevols/inline.vmdk", "fsType": "ext4"},
         inline_pv="csi.vsphere.vmware.com-[vsanDatastore] kubevols/inline.vmdk",
         inline_handle="[vsanDatastore] kubevols/inline.vmdk", inline_context={}, inline_fs_type="ext4"),
]
IDS = [k.key for k in KINDS]


def staging_path(root, driver, handle):
    """kubelet-facts §1.1: plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount."""
    return f"{root}/plugins/kubernetes.io/csi/{driver}/{hashlib.sha256(handle.encode()).hexdigest()}/globalmount"


def target_path(root, uid, spec_dir):
    return f"{root}/pods/{uid}/volumes/kubernetes.io~csi/{spec_dir}/mount"


def inline_spec(k):
    """The PV spec the lib makes of k's inline volume, as the attach/detach
    controller puts it in the VolumeAttachment (source.inlineVolumeSpec)."""
    csi = {"driver": k.driver, "volumeHandle": k.inline_handle, "volumeAttributes": k.inline_context}
    if k.inline_fs_type:
        csi["fsType"] = k.inline_fs_type
    return {"csi": csi, "accessModes": k.inline_modes, "volumeMode": "Filesystem"}


class MigrationNode:
    """The node of the module and what its scenario recorded."""

    def __init__(self, base):
        self.base = base
        self.root = os.path.join(base, "root")
        os.makedirs(self.root)
        self.sockdir = tempfile.mkdtemp(prefix="kvm", dir="/tmp")
        self.socket = os.path.join(self.sockdir, "kvolumed.sock")
        self.api = FakeApiServer(os.path.join(base, "fakeapi"))
        self.factory = None
        self.drivers = {}
        self.agents = []
        self.agent = None
        self.pods = {}
        self.calls = {}             # kind key -> driver calls up to the restart
        self.restart_calls = {}     # kind key -> stage/publish calls the restart made
        self.teardown_calls = {}    # kind key -> calls after the pods went
        self.in_use = []            # volumesInUse while the pods ran
        self.metrics = ""
        self.described = {}         # handle -> its /volumes entry while the pods ran
        self.mounted = {}           # path -> mounted while the pods ran
        self.vol_data = {}          # path of a vol_data.json -> its content
        self.left = {}              # what remained after teardown
        self.errors = []

    # -- set-up --------------------------------------------------------------

    def start_agent(self):
        extra = "".join(f'[driver "{d.name}"]\nendpoint = {d.endpoint}\n' for d in self.drivers.values())
        config = write_config(os.path.join(self.base, "kvolumed.conf"), self.root,
                              self.api.node_kubeconfig(NODE),
                              extra + "[log]\nlevel = debug\n" + f"[api]\nsocket = {self.socket}\n")
        with open(config) as f:
            text = f.read().replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n")
        with open(config, "w") as f:
            f.write(text)
        self.agent = Agent(kvolumed_path(), config)
        self.agents.append(self.agent)
        self.agent.wait_for_log("Serving the local volumes API", timeout=30)
        self.agent.wait_for_log("Serving /metrics", timeout=30)

    def metrics_address(self):
        return SERVING.findall(self.agent.output())[-1]

    def objects(self):
        api = self.api
        api.create(make_node())
        for k in KINDS:
            api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": k.driver},
                        "spec": {"attachRequired": k.attach, "volumeLifecycleModes": ["Persistent"]}})
            meta = {"name": k.pv_name}
            if k.pv_labels:
                meta["labels"] = k.pv_labels
            if k.pv_annotations:
                meta["annotations"] = k.pv_annotations
            api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta,
                        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": k.pv_modes,
                                 "persistentVolumeReclaimPolicy": "Retain",
                                 "claimRef": {"namespace": "default", "name": f"claim-{k.key.lower()}"},
                                 k.key: k.pv_source},
                        "status": {"phase": "Available"}})
            api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": f"claim-{k.key.lower()}", "namespace": "default"},
                        "spec": {"accessModes": k.pv_modes, "resources": {"requests": {"storage": "1Gi"}}},
                        "status": {"phase": "Pending"}})
            api.bind_claim("default", f"claim-{k.key.lower()}", k.pv_name)
        for ns in ("default", "secretnamespace"):
            api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secretname", "namespace": ns},
                        "data": {"azurestorageaccountname": "c2VjcmV0bmFtZQ==",
                                 "azurestorageaccountkey": "a2V5"}})

    def migrated_on_node(self):
        items, _ = self.api.list("csinodes")
        for c in items:
            if c["metadata"]["name"] == NODE:
                return (c["metadata"].get("annotations") or {}).get(MIGRATED_PLUGINS, "")
        return None

    def attach(self):
        """The attach/detach controller, once the node's CSINode says the
        plugins are migrated there."""
        want = ",".join(sorted(k.plugin for k in KINDS))
        wait_until(lambda: self.migrated_on_node() == want, timeout=30,
                   what=f"CSINode {MIGRATED_PLUGINS}={want} (it is {self.migrated_on_node()!r})")
        for k in KINDS:
            if not k.attach:
                continue
            attach_volume(self.api, NODE, k.driver, k.handle, pv_name=k.pv_name, metadata=k.metadata,
                          migrated_from=k.plugin)
            attach_volume(self.api, NODE, k.driver, k.inline_handle, inline_spec=inline_spec(k),
                          metadata=k.metadata, migrated_from=k.plugin)

    def create_pods(self):
        for k in KINDS:
            volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": f"claim-{k.key.lower()}"}},
                       {"name": k.inline_name, k.key: k.inline_source}]
            mounts = [{"name": v["name"], "mountPath": "/v/" + v["name"]} for v in volumes]
            self.pods[k.key] = self.api.create(
                {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"pod-{k.key.lower()}", "namespace": "default"},
                 "spec": {"nodeName": NODE, "volumes": volumes,
                          "containers": [{"name": "c", "image": "busybox", "volumeMounts": mounts}]},
                 "status": {"phase": "Running"}})

    def uid(self, k):
        return self.pods[k.key]["metadata"]["uid"]

    def targets(self, k):
        return (target_path(self.root, self.uid(k), k.pv_name), target_path(self.root, self.uid(k), k.inline_dir))

    def wait_mounted(self, timeout=60):
        for k in KINDS:
            status, body, _ = api_get(self.socket, f"/v1/pods/{self.uid(k)}/volumes?wait=mounted&timeout={timeout}s",
                                      timeout=timeout + 30)
            assert status == 200 and body["allMounted"], (k.key, status, body, self.agent.output()[-4000:])

    def node_calls(self, k, methods=("NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume",
                                     "NodeUnstageVolume")):
        return [c for c in self.drivers[k.key].calls() if c["method"] in methods]

    def records_done(self):
        paths = [os.path.join(d, f) for d, _, files in os.walk(self.root) for f in files
                 if f.startswith("kvolumed") and f.endswith(".json")]
        try:
            return paths and all(json.load(open(p)).get("done") for p in paths)
        except (OSError, ValueError):
            return False

    def reconcile_passes(self):
        found = re.search(r"^kvolumed_reconcile_seconds_count (\d+)", self.scrape(), re.M)
        return int(found.group(1)) if found else 0

    def scrape(self):
        with urllib.request.urlopen(f"http://{self.metrics_address()}/metrics", timeout=10) as r:
            return r.read().decode()

    # -- the scenario ----------------------------------------------------------

    def run(self):
        _require_root()
        self.api.start()
        self.factory = _Factory(os.path.join(self.base, "drivers"))
        self.objects()
        for k in KINDS:
            self.drivers[k.key] = self.factory(name=k.driver, tmpfs=True)
        self.start_agent()
        self.attach()
        self.create_pods()
        self.wait_mounted()
        for k in KINDS:
            for path in self.targets(k):
                self.mounted[path] = os.path.ismount(path)
            # the driver logs a call after it answered: wait for both publishes
            wait_until(lambda: len([c for c in self.node_calls(k, ("NodePublishVolume",)) if c["code"] == "OK"]) >= 2,
                       timeout=30, what=f"{k.key}: two publishes")
        self.in_use = (self.api.get("nodes", None, NODE).get("status") or {}).get("volumesInUse", [])
        wait_until(self.records_done, timeout=30, what="every record done")
        self.metrics = self.scrape()
        with urllib.request.urlopen(f"http://{self.metrics_address()}/volumes", timeout=10) as r:
            self.described = {v["handle"]: v for v in json.loads(r.read())["volumes"]}
        for d, _, files in os.walk(self.root):
            if "vol_data.json" in files:
                with open(os.path.join(d, "vol_data.json")) as f:
                    self.vol_data[d] = json.load(f)
        self.calls = {k.key: self.node_calls(k) for k in KINDS}

        # A restart: everything found set up, nothing called.
        self.agent.stop()
        self.start_agent()
        self.wait_mounted()
        # One more pass over every pod (a label changed) for anything it would redo.
        self.agent.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
        passes = self.reconcile_passes()
        for k in KINDS:
            obj = self.api.get("pods", "default", f"pod-{k.key.lower()}")
            obj["metadata"].setdefault("labels", {})["touched"] = "yes"
            self.api.update(obj)
        wait_until(lambda: self.reconcile_passes() > passes, timeout=30, what="a pass after the pods changed")
        self.restart_calls = {k.key: self.node_calls(k)[len(self.calls[k.key]):] for k in KINDS}

        # Teardown: every pod goes; the controller detaches afterwards.
        for k in KINDS:
            self.api.remove("pods", "default", f"pod-{k.key.lower()}")
        wait_until(lambda: not [line for line in open("/proc/self/mountinfo")
                                if line.split()[4].startswith(self.root + "/")], timeout=60,
                   what=lambda: "no mounts under root-dir\n" + self.agent.output()[-4000:])
        wait_until(lambda: not (self.api.get("nodes", None, NODE).get("status") or {}).get("volumesInUse"),
                   timeout=30, what="volumesInUse cleared")
        wait_until(lambda: not os.listdir(os.path.join(self.root, "pods")), timeout=30, what="pod dirs gone")
        self.teardown_calls = {k.key: self.node_calls(k)[len(self.calls[k.key]) + len(self.restart_calls[k.key]):]
                               for k in KINDS}
        csi_dir = os.path.join(self.root, "plugins/kubernetes.io/csi")

        def plugins_left():
            return sorted(os.path.join(d, n) for d in (csi_dir,) if os.path.isdir(d)
                          for n in os.listdir(d) if os.listdir(os.path.join(d, n)))
        # The driver logs NodeUnstageVolume once it answered, and the
        # staging dirs go after that answer: waited for, not raced (CI:
        # azureFile's staging dir was read before its unstage ended).
        try:
            wait_until(lambda: not plugins_left(), timeout=30, what="the staging dirs removed")
        except AssertionError:
            pass  # what is left, the teardown test reports
        self.left = {"pods": os.listdir(os.path.join(self.root, "pods")), "plugins": plugins_left()}
        for k in KINDS:
            if k.attach:
                detach_volume(self.api, NODE, k.driver, k.handle)
                detach_volume(self.api, NODE, k.driver, k.inline_handle)

    def stop(self):
        problems = []
        for a in self.agents:
            a.stop()
            problems += [line for line in a.output().splitlines() if "Incremental pass missed" in line]
        for a in self.agents:
            unmount_root_dir_bind(a.config)
        if self.factory:
            problems += self.factory.teardown()
        self.api.stop()
        shutil.rmtree(self.sockdir, ignore_errors=True)
        return problems


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = MigrationNode(str(tmp_path_factory.mktemp("migration")))
    try:
        n.run()
    except BaseException:
        problems = n.stop()
        if n.agent:
            print(n.agent.output()[-8000:])
        if problems:
            print("\n".join(problems))
        raise
    yield n
    problems = n.stop()
    if problems:
        pytest.fail("the migration node's teardown:\n  " + "\n  ".join(problems), pytrace=False)


def only(calls, method, **match):
    found = [c for c in calls if c["method"] == method and c["code"] == "OK"
             and all(c["request"].get(key) == value for key, value in match.items())]
    assert len(found) == 1, (method, match, calls)
    return found[0]["request"]


@pytest.mark.parametrize("k", KINDS, ids=IDS)
def test_pv_is_staged_and_published_as_kubelet_does(node, k):
    """The PV's translated volume: the lib's handle and attributes, staged at
    kubelet's globalmount of the handle, published at pods/<uid>/volumes/
    kubernetes.io~csi/<pv name>/mount, with the attacher's publish context."""
    root, calls = node.root, node.calls[k.key]
    staging = staging_path(root, k.driver, k.handle)
    stage = only(calls, "NodeStageVolume", volume_id=k.handle)
    assert stage["staging_target_path"] == staging
    assert stage.get("volume_context", {}) == k.context
    assert stage["volume_capability"]["mount"].get("fs_type", "") == k.fs_type
    assert stage["volume_capability"]["access_mode"]["mode"] == k.access_mode
    assert stage.get("publish_context", {}) == (k.metadata if k.attach else {})
    target = target_path(root, node.uid(k), k.pv_name)
    publish = only(calls, "NodePublishVolume", target_path=target)
    assert publish["volume_id"] == k.handle
    assert publish["staging_target_path"] == staging
    assert publish.get("volume_context", {}) == k.context
    assert not publish.get("readonly")
    assert node.mounted[target]
    assert node.vol_data[os.path.dirname(staging)] == {"driverName": k.driver, "volumeHandle": k.handle}
    assert node.vol_data[os.path.dirname(target)] == {
        "attachmentID": attachment_name(k.handle, k.driver, NODE), "driverName": k.driver, "nodeName": NODE,
        "specVolID": k.pv_name, "volumeHandle": k.handle, "volumeLifecycleMode": "Persistent"}


@pytest.mark.parametrize("k", KINDS, ids=IDS)
def test_inline_volume_is_staged_and_published_as_kubelet_does(node, k):
    """The pod's inline volume: the PV the lib makes of it, persistent for
    kubelet (staged at the handle's globalmount), its pod dir named after that
    PV (escaped as getTargetPath does), not published read-only (kubelet's
    Spec.ReadOnly of an inline volume is false)."""
    root, calls = node.root, node.calls[k.key]
    staging = staging_path(root, k.driver, k.inline_handle)
    stage = only(calls, "NodeStageVolume", volume_id=k.inline_handle)
    assert stage["staging_target_path"] == staging
    assert stage.get("volume_context", {}) == k.inline_context
    assert stage["volume_capability"]["mount"].get("fs_type", "") == k.inline_fs_type
    assert stage["volume_capability"]["access_mode"]["mode"] == k.inline_access_mode
    assert stage.get("publish_context", {}) == (k.metadata if k.attach else {})
    target = target_path(root, node.uid(k), k.inline_dir)
    publish = only(calls, "NodePublishVolume", target_path=target)
    assert publish["volume_id"] == k.inline_handle
    assert publish["staging_target_path"] == staging
    assert publish.get("volume_context", {}) == k.inline_context
    assert not publish.get("readonly")
    assert node.mounted[target]
    # specVolID is kubelet's spec.Name(), the translated PV's name unescaped.
    assert node.vol_data[os.path.dirname(target)] == {
        "attachmentID": attachment_name(k.inline_handle, k.driver, NODE), "driverName": k.driver,
        "nodeName": NODE, "specVolID": k.inline_pv, "volumeHandle": k.inline_handle,
        "volumeLifecycleMode": "Persistent"}
    assert node.vol_data[os.path.dirname(staging)] == {"driverName": k.driver, "volumeHandle": k.inline_handle}


@pytest.mark.parametrize("k", [k for k in KINDS if k.stage_secret], ids=[k.key for k in KINDS if k.stage_secret])
def test_stage_secret_is_the_translated_reference(node, k):
    """Azure file: NodeStage gets the secret the translation names (the PV's
    secretNamespace; the pod's namespace for the inline volume)."""
    calls = node.calls[k.key]
    digest = {key: hashlib.sha256(value.encode()).hexdigest()
              for key, value in {"azurestorageaccountname": "secretname", "azurestorageaccountkey": "key"}.items()}
    for handle in (k.handle, k.inline_handle):
        stage = [c for c in calls if c["method"] == "NodeStageVolume" and c["request"]["volume_id"] == handle]
        assert [c.get("secret_digests") for c in stage] == [digest], stage


@pytest.mark.parametrize("k", KINDS, ids=IDS)
def test_attach_wait_used_the_migrated_attachment(node, k):
    """volumesInUse names the volumes as kubelet does
    (kubernetes.io/csi/<driver>^<handle>); an attachable driver's volumes
    were staged only after the node read the VolumeAttachment the
    controller made for the migrated volume (PV by name, inline by spec)."""
    for handle in (k.handle, k.inline_handle):
        assert (unique_name(k.driver, handle) in node.in_use) == k.attach, node.in_use
    gets = [r["path"] for r in node.api.requests()
            if r["method"] == "GET" and "/volumeattachments/" in r["path"] and r["user"] == f"system:node:{NODE}"]
    for handle in (k.handle, k.inline_handle):
        name = attachment_name(handle, k.driver, NODE)
        assert any(p.endswith("/" + name) for p in gets) == k.attach, (name, gets)


@pytest.mark.parametrize("k", KINDS, ids=IDS)
def test_volumes_document_names_the_in_tree_plugin(node, k):
    for handle in (k.handle, k.inline_handle):
        v = node.described[handle]
        assert (v["kind"], v["driver"], v["migrated_from"]) == ("csi", k.driver, k.plugin), v


@pytest.mark.parametrize("k", KINDS, ids=IDS)
def test_restart_finds_them_set_up_and_calls_nothing(node, k):
    assert node.restart_calls[k.key] == []


@pytest.mark.parametrize("k", KINDS, ids=IDS)
def test_teardown_unpublishes_and_unstages_each_once(node, k):
    calls = node.teardown_calls[k.key]
    pv_target, inline_target = node.targets(k)
    assert sorted(c["request"]["target_path"] for c in calls if c["method"] == "NodeUnpublishVolume"
                  and c["code"] == "OK") == sorted([pv_target, inline_target])
    assert sorted(c["request"]["staging_target_path"] for c in calls if c["method"] == "NodeUnstageVolume"
                  and c["code"] == "OK") == sorted([staging_path(node.root, k.driver, k.handle),
                                                   staging_path(node.root, k.driver, k.inline_handle)])
    assert node.left == {"pods": [], "plugins": []}
    assert not node.drivers[k.key].violations()


def test_metrics_are_labelled_migrated(node):
    """csi_operations_seconds and storage_operation_duration_seconds say
    migrated="true" for the migrated volumes' stage and publish, with the
    CSI plugin's label as kubelet's (kubernetes.io/csi:<driver>)."""
    for k in KINDS:
        for method in ("NodeStageVolume", "NodePublishVolume"):
            assert re.search(r'csi_operations_seconds_count\{driver_name="%s",method_name="/csi.v1.Node/%s",'
                             r'grpc_status_code="OK",migrated="true"\} 2' % (re.escape(k.driver), method),
                             node.metrics), (k.driver, method)
        for op in ("mount_device", "volume_mount"):
            assert re.search(r'storage_operation_duration_seconds_count\{volume_plugin="kubernetes.io/csi:%s",'
                             r'operation_name="%s",status="success",migrated="true"\} 2' % (re.escape(k.driver), op),
                             node.metrics), (k.driver, op)
    assert 'migrated="false"} ' not in "\n".join(line for line in node.metrics.splitlines()
                                                 if "NodeStageVolume" in line or "NodePublishVolume" in line)


# --- a migration that cannot be served -------------------------------------------

def in_tree_pv(env, name, claim, key, source, modes=("ReadWriteOnce",)):
    env.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": list(modes),
                             "claimRef": {"namespace": "default", "name": claim}, key: source},
                    "status": {"phase": "Available"}})
    env.pvc(claim, name)
    return {"name": claim, "persistentVolumeClaim": {"claimName": claim}}


@pytest.fixture
def sockdir():
    d = tempfile.mkdtemp(prefix="kvm", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_untranslatable_and_unmigrated_sources_fail_at_once_with_kubelets_message(volume_env, sockdir):
    """A source the translation refuses fails at once with the lib's words
    behind kubelet's ("failed to translate in-tree pv to CSI: ..."), an
    in-tree type with no CSI driver (nfs) or whose migration is off
    (portworxVolume: CSIMigrationPortworx is off in 1.25) stays an
    unsupported type; each is one FailedMount Event and a 409 to the
    runner, nothing is staged, and the pod's CSI volume is set up anyway."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    bad_ebs = in_tree_pv(env, "pv-bad-ebs", "bad-ebs", "awsElasticBlockStore",
                         # aws_ebs_test.go invalidVolumeID
                         {"volumeID": "aws://us-west-2a/02399794d890f9375"})
    sock = local_api_start(env, sockdir)
    pod = env.pod("legacy", [
        {"name": "scratch", "csi": {"driver": DRIVER}},
        bad_ebs,
        # azure_disk.go: only managed disks are migrated
        {"name": "shared-disk", "azureDisk": {"diskName": "d", "diskURI": "/subscriptions/1/disks/d",
                                              "kind": "Shared", "cachingMode": "ReadWrite", "fsType": "ext4"}},
        {"name": "home", "nfs": {"server": "nfs.example", "path": "/h"}},
        {"name": "px", "portworxVolume": {"volumeID": "px-1"}},
    ])
    uid = pod["metadata"]["uid"]
    expected = {
        "bad-ebs": "failed to translate in-tree pv to CSI: failed to translate Kubernetes ID to EBS Volume ID "
                   "Invalid format for AWS volume (aws://us-west-2a/02399794d890f9375)",
        "shared-disk": "failed to translate in-tree pv to CSI: kind(Shared) is not supported in csi migration",
        "home": "unsupported volume type nfs: kvolumed does not set up nfs volumes",
        "px": "unsupported volume type portworxVolume: kvolumed does not set up portworxVolume volumes",
    }

    def all_failed():
        status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes")
        vols = {v["name"]: v for v in body.get("volumes", [])} if status == 200 else {}
        return vols if all(vols.get(n, {}).get("state") == "failed" for n in expected) else None
    vols = wait_until(all_failed, timeout=30, what="the four volumes failed")
    for name, message in expected.items():
        assert message in vols[name]["reason"], (name, vols[name])
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=60s", timeout=90)
    assert status == 409 and body["allMounted"] is False, body
    for message in expected.values():
        env.wait_event("FailedMount", message, timeout=30)
    env.wait_mounted(env.target(pod, "scratch"))
    # The driver mounts before its answer is recorded: wait for the record.
    wait_until(lambda: env.calls("NodePublishVolume"), timeout=30, what="the NodePublishVolume recorded")
    assert not env.calls("NodeStageVolume")
    assert [c["request"]["target_path"] for c in env.calls("NodePublishVolume")] == [env.target(pod, "scratch")]
    # One Event each, not one per pass.
    for message in expected.values():
        assert len([e for e in env.events() if message in e.get("message", "")]) == 1, message


def test_a_migrated_volume_whose_driver_is_not_registered_waits_and_says_so(volume_env, sockdir):
    """kubelet translates whatever the node's drivers: with ebs.csi.aws.com
    not registered here the volume waits (the driver may register later, as
    at boot) and, after the grace, is reported with kubelet's message
    ("driver name ebs.csi.aws.com not found in the list of registered CSI
    drivers") in a FailedMount Event, and the runner's wait is answered 409
    at once from then on; it is never reported mounted."""
    env = volume_env
    claim = in_tree_pv(env, "pv-ebs", "ebs", "awsElasticBlockStore", {"volumeID": "vol-02399794d890f9375"})
    sock = local_api_start(env, sockdir)
    pod = env.pod("web", [claim, {"name": "inline", "awsElasticBlockStore": {"volumeID": "vol-0a1b2c3d4e5f60718"}}])
    uid = pod["metadata"]["uid"]
    env.agent.wait_for_log("(in-tree kubernetes.io/aws-ebs, served through CSI migration) waits for CSI driver "
                           "ebs.csi.aws.com to register", timeout=30)
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes")
    assert body["allMounted"] is False and {v["state"] for v in body["volumes"]} == {"pending"}, body
    for spec_name in ("pv-ebs", "ebs.csi.aws.com-vol-0a1b2c3d4e5f60718"):
        env.wait_event("FailedMount", f'MountVolume.SetUp failed for volume "{spec_name}" : kubernetes.io/csi: '
                       "driver name ebs.csi.aws.com not found in the list of registered CSI drivers", timeout=60)
    # Past the grace, the runner's wait is answered at once: a final error.
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=60s", timeout=90)
    assert status == 409 and body["allMounted"] is False, body
    assert "driver name ebs.csi.aws.com not found in the list of registered CSI drivers" in body["error"], body
    assert not env.calls("NodeStageVolume") and not env.calls("NodePublishVolume")


# --- handover from kubelet ---------------------------------------------------------

# What a 1.25 kubelet writes in the CSINode annotation: every plugin whose
# migration is on (nodeinfomanager setMigrationAnnotation, sorted).
KUBELET_MIGRATED = ("kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,"
                    "kubernetes.io/gce-pd,kubernetes.io/vsphere-volume")


def kubelet_vol_data(path, **keys):
    """csi_util.go saveVolumeData: compact JSON, keys sorted, a newline."""
    with open(path, "w") as f:
        f.write(json.dumps(keys, sort_keys=True, separators=(",", ":")) + "\n")


def test_a_migrated_volume_kubelet_mounted_is_adopted_without_a_call(fake_api, mock_csi_factory, start_agent,
                                                                      tmp_path, sockdir):
    """The node was kubelet's: an EBS PV and an inline EBS volume of a
    running pod, migrated, staged and published in kubelet's layout (the
    handle's globalmount; pods/<uid>/volumes/kubernetes.io~csi/<pv name> and
    /<translated PV name>; vol_data.json as kubelet writes it), attached
    through the driver's VolumeAttachments.  kvolumed adopts them: no
    unpublish or unstage, the pod mounted, both in volumesInUse under
    kubelet's names; once the pod goes they are torn down as kvolumed's own."""
    driver = "ebs.csi.aws.com"
    drv = mock_csi_factory(name=driver, tmpfs=True)
    fake_api.create(make_node())
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": driver},
                     "spec": {"attachRequired": True, "volumeLifecycleModes": ["Persistent"]}})
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                     "metadata": {"name": NODE, "annotations": {MIGRATED_PLUGINS: KUBELET_MIGRATED}},
                     "spec": {"drivers": [{"name": driver, "nodeID": "node-1", "topologyKeys": []}]}})
    fake_api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-ebs"},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                              "claimRef": {"namespace": "default", "name": "ebs"},
                              "awsElasticBlockStore": {"volumeID": "aws://us-west-2a/vol-02399794d890f9375"}},
                     "status": {"phase": "Available"}})
    fake_api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "ebs", "namespace": "default"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                     "status": {"phase": "Pending"}})
    fake_api.bind_claim("default", "ebs", "pv-ebs")
    inline = {"name": "scratch", "awsElasticBlockStore": {"volumeID": "vol-0a1b2c3d4e5f60718"}}
    pod = fake_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                           "spec": {"nodeName": NODE, "containers": [{
                               "name": "c", "image": "busybox",
                               "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                                {"name": "scratch", "mountPath": "/scratch"}]}],
                               "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "ebs"}}, inline]},
                           "status": {"phase": "Running"}})
    uid = pod["metadata"]["uid"]
    root = str(tmp_path / "root")
    attached = {"vol-02399794d890f9375": ("pv-ebs", "pv-ebs"),
                "vol-0a1b2c3d4e5f60718": (None, "ebs.csi.aws.com-vol-0a1b2c3d4e5f60718")}
    for handle, (pv, spec_name) in attached.items():
        if pv:
            attach_volume(fake_api, NODE, driver, handle, pv_name=pv, metadata={"devicePath": "/dev/xvdba"},
                          migrated_from="kubernetes.io/aws-ebs")
        else:
            attach_volume(fake_api, NODE, driver, handle, metadata={"devicePath": "/dev/xvdbb"},
                          migrated_from="kubernetes.io/aws-ebs",
                          inline_spec={"csi": {"driver": driver, "volumeHandle": handle,
                                               "volumeAttributes": {"partition": "0"}},
                                       "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"})
        staging = staging_path(root, driver, handle)
        os.makedirs(staging)
        kubelet_vol_data(os.path.join(os.path.dirname(staging), "vol_data.json"), driverName=driver,
                         volumeHandle=handle)
        drv.csi.stage(handle, staging, fs_type="ext4", volume_context={"partition": "0"})
        target = target_path(root, uid, spec_name)
        os.makedirs(os.path.dirname(target))
        kubelet_vol_data(os.path.join(os.path.dirname(target), "vol_data.json"),
                         attachmentID=attachment_name(handle, driver, NODE), driverName=driver, nodeName=NODE,
                         specVolID=spec_name, volumeHandle=handle, volumeLifecycleMode="Persistent")
        drv.csi.publish(handle, target, staging_path=staging, volume_context={"partition": "0"})
    before = len(drv.calls())
    config = write_config(tmp_path / "kvolumed.conf", root, fake_api.node_kubeconfig(NODE),
                          f'[driver "{driver}"]\nendpoint = {drv.endpoint}\n[log]\nlevel = debug\n'
                          f"[api]\nsocket = {os.path.join(sockdir, 'kvolumed.sock')}\n")
    agent = start_agent(config)
    agent.wait_for_log("Serving the local volumes API", timeout=30)
    sock = os.path.join(sockdir, "kvolumed.sock")
    # Known by its name once the pod list is in (before, only what is on disk).
    wait_until(lambda: api_get(sock, f"/v1/pods/{uid}/volumes")[1].get("pod") == "default/web", timeout=30,
               what="the pod listed")
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=60s", timeout=90)
    assert status == 200 and body["allMounted"], (body, agent.output()[-3000:])
    in_use = wait_until(lambda: (fake_api.get("nodes", None, NODE).get("status") or {}).get("volumesInUse"),
                        timeout=30, what="volumesInUse")
    assert sorted(in_use) == sorted(unique_name(driver, h) for h in attached)
    calls = drv.calls()[before:]
    assert not {"NodeUnpublishVolume", "NodeUnstageVolume"} & {c["method"] for c in calls}, calls
    # Found without kvolumed's records, they are uncertain, as kubelet takes
    # what it reconstructs: staged and published again, at kubelet's paths,
    # which the driver finds already done.
    assert sorted(c["request"]["staging_target_path"] for c in calls if c["method"] == "NodeStageVolume") == \
        sorted(staging_path(root, driver, h) for h in attached)
    assert sorted(c["request"]["target_path"] for c in calls if c["method"] == "NodePublishVolume") == \
        sorted(target_path(root, uid, s) for _, s in attached.values())

    fake_api.remove("pods", "default", "web")
    wait_until(lambda: not os.path.exists(os.path.join(root, "pods", uid)), timeout=60,
               what=lambda: "the pod's volumes torn down\n" + agent.output()[-3000:])
    driver_dir = f"{root}/plugins/kubernetes.io/csi/{driver}"
    wait_until(lambda: not os.path.exists(driver_dir) or not os.listdir(driver_dir), timeout=30,
               what="both unstaged")
    done = [c for c in drv.calls()[before:] if c["code"] == "OK"]
    assert sorted(c["request"]["target_path"] for c in done if c["method"] == "NodeUnpublishVolume") == \
        sorted(target_path(root, uid, s) for _, s in attached.values())
    assert sorted(c["request"]["volume_id"] for c in done if c["method"] == "NodeUnstageVolume") == sorted(attached)
    assert not drv.violations()


# --- the doubles --------------------------------------------------------------------

def test_fake_api_validates_volume_attachments_as_the_api_server(fake_api):
    """ValidateVolumeAttachment: exactly one source; an inline spec needs a
    CSI source and access modes, and may have no capacity or claimRef.  And
    the attach double attaches a migrated volume only on a node whose
    CSINode lists its plugin as migrated."""
    from doubles.fakeapi.attacher import NotMigratedOnNode
    from doubles.fakeapi.errors import ApiError

    def va(name, source):
        return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
                "spec": {"attacher": "ebs.csi.aws.com", "nodeName": NODE, "source": source}}
    spec = inline_spec(KINDS[0])
    refused = {
        "none": ({}, "spec.source: Required value: must specify exactly one of inlineVolumeSpec and "
                     "persistentVolumeName"),
        "both": ({"persistentVolumeName": "pv", "inlineVolumeSpec": spec},
                 "spec.source: Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName"),
        "no-csi": ({"inlineVolumeSpec": {"accessModes": ["ReadWriteOnce"]}},
                   "spec.source.inlineVolumeSpec.csi: Required value"),
        "capacity": ({"inlineVolumeSpec": {**spec, "capacity": {"storage": "1Gi"}}},
                     "spec.source.inlineVolumeSpec.capacity: Forbidden"),
    }
    for name, (source, message) in refused.items():
        with pytest.raises(ApiError) as e:
            fake_api.create(va(name, source))
        assert e.value.code == 422 and message in e.value.message, (name, e.value.message)
    assert fake_api.create(va("ok", {"inlineVolumeSpec": spec}))["spec"]["source"]["inlineVolumeSpec"] == spec
    fake_api.create(make_node())
    with pytest.raises(NotMigratedOnNode):
        attach_volume(fake_api, NODE, "ebs.csi.aws.com", "vol-1", pv_name="pv", migrated_from="kubernetes.io/aws-ebs")
    assert not [v for v in fake_api.list("volumeattachments")[0] if v["metadata"]["name"] != "ok"]
