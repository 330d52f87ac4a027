"""The pod runner of the tests: a small CRI client that does on a real
containerd what kubelet's pod workers do, as a runner other than kubelet may
(no io.kubernetes.* labels: the sandbox's PodSandboxMetadata.uid names the
pod).  Sandboxes use the host network (no CNI) and the harness's cgroup
parent; containers run the local busybox image with their own PID namespace,
as kubelet's default is, and get the volumes' host paths as mounts.

Everything it makes is remembered, and `remove_everything()` stops and
removes it (the fixtures call it after each test)."""
import time

import grpc

from .image import IMAGE
from .stubs import load

SERVICE = "/runtime.v1.RuntimeService/"
METHODS = {
    "Version": ("VersionRequest", "VersionResponse"),
    "RunPodSandbox": ("RunPodSandboxRequest", "RunPodSandboxResponse"),
    "StopPodSandbox": ("StopPodSandboxRequest", "StopPodSandboxResponse"),
    "RemovePodSandbox": ("RemovePodSandboxRequest", "RemovePodSandboxResponse"),
    "ListPodSandbox": ("ListPodSandboxRequest", "ListPodSandboxResponse"),
    "CreateContainer": ("CreateContainerRequest", "CreateContainerResponse"),
    "StartContainer": ("StartContainerRequest", "StartContainerResponse"),
    "StopContainer": ("StopContainerRequest", "StopContainerResponse"),
    "RemoveContainer": ("RemoveContainerRequest", "RemoveContainerResponse"),
    "ListContainers": ("ListContainersRequest", "ListContainersResponse"),
    "ContainerStatus": ("ContainerStatusRequest", "ContainerStatusResponse"),
}


class Pod:
    def __init__(self, uid, name, namespace, sandbox_id, config):
        self.uid, self.name, self.namespace = uid, name, namespace
        self.sandbox_id = sandbox_id
        self.config = config  # the PodSandboxConfig, which CreateContainer repeats
        self.containers = {}  # name -> id


class PodRunner:
    def __init__(self, containerd, timeout=60.0):
        self.pb = load()
        self.containerd = containerd
        self.timeout = timeout
        self.pods = []
        self._channel = None

    def _call(self, method, **fields):
        req_name, resp_name = METHODS[method]
        if self._channel is None:
            self._channel = grpc.insecure_channel("unix:" + self.containerd.socket)
        stub = self._channel.unary_unary(SERVICE + method,
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=getattr(self.pb, resp_name).FromString)
        return stub(getattr(self.pb, req_name)(**fields), timeout=self.timeout)

    def close(self):
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def wait_ready(self, timeout=60.0):
        """Until the CRI service answers (containerd initialises it after
        its socket exists)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._call("Version", version="v1")
            except grpc.RpcError as e:
                if time.monotonic() > deadline:
                    raise AssertionError(f"containerd's CRI does not answer: {e}\n{self.containerd.log_tail()}")
                self.close()  # a fresh connection: containerd may have restarted
                time.sleep(0.1)

    # ---- pods ----------------------------------------------------------------
    def run_pod(self, uid, name, namespace="default"):
        """RunPodSandbox: a ready sandbox on the host network (no hostname:
        there is no UTS namespace to set it in, as kubelet knows)."""
        pb = self.pb
        host = pb.NamespaceOption(network=pb.NODE, pid=pb.POD, ipc=pb.POD)
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            linux=pb.LinuxPodSandboxConfig(cgroup_parent=self.containerd.cgroup_parent,
                                           security_context=pb.LinuxSandboxSecurityContext(namespace_options=host)))
        sid = self._call("RunPodSandbox", config=config).pod_sandbox_id
        pod = Pod(uid, name, namespace, sid, config)
        self.pods.append(pod)
        return pod

    def create_container(self, pod, name, script, mounts=(), cri_mounts=()):
        """CreateContainer: `sh -c script`, with mounts [(host path,
        container path, read-only)], and cri_mounts: runtime.v1 Mount
        messages as dicts in the proto's field names (what kvolumed's local
        API gives per container), passed as they are."""
        from google.protobuf import json_format
        pb = self.pb
        ns = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=0), image=pb.ImageSpec(image=IMAGE),
            command=["/bin/sh", "-c", script],
            mounts=[pb.Mount(host_path=h, container_path=c, readonly=ro, propagation=pb.PROPAGATION_PRIVATE)
                    for h, c, ro in mounts] + [json_format.ParseDict(m, pb.Mount()) for m in cri_mounts],
            linux=pb.LinuxContainerConfig(security_context=pb.LinuxContainerSecurityContext(namespace_options=ns)))
        cid = self._call("CreateContainer", pod_sandbox_id=pod.sandbox_id, config=config,
                         sandbox_config=pod.config).container_id
        pod.containers[name] = cid
        return cid

    def start_container(self, cid):
        self._call("StartContainer", container_id=cid)

    def run_container(self, pod, name, script, mounts=(), cri_mounts=()):
        cid = self.create_container(pod, name, script, mounts, cri_mounts)
        self.start_container(cid)
        return cid

    def stop_container(self, cid, timeout=10):
        """StopContainer: the stop signal (SIGTERM), SIGKILL after `timeout` s."""
        self._call("StopContainer", container_id=cid, timeout=timeout)

    def container_state(self, cid):
        return self.pb.ContainerState.Name(self._call("ContainerStatus", container_id=cid).status.state)

    def stop_pod(self, pod):
        self._call("StopPodSandbox", pod_sandbox_id=pod.sandbox_id)

    def remove_pod(self, pod):
        self._call("RemovePodSandbox", pod_sandbox_id=pod.sandbox_id)
        self.pods.remove(pod)

    def list_sandboxes(self):
        return list(self._call("ListPodSandbox").items)

    def list_containers(self):
        return list(self._call("ListContainers").containers)

    def remove_everything(self):
        """Every sandbox on the runtime (its containers with it), not only
        this runner's: the next test starts from an empty runtime."""
        for sb in self.list_sandboxes():
            self._call("StopPodSandbox", pod_sandbox_id=sb.id)
            self._call("RemovePodSandbox", pod_sandbox_id=sb.id)
        self.pods = []
