#!/usr/bin/python3
"""NodePublishVolume throughput and latency: kvolumed's C client (csi/,
through test/tools/csi-harness) against a Python grpcio client, in the same
run, against the same do-nothing grpcio server (test/interop/python/server.py).

  KVOLUMED_BUILD_DIR=build-csi /usr/bin/python3 test/bench/bench_csi.py [--count 10000] [--parallel 64]

Each client makes COUNT calls sequentially, then COUNT calls with PARALLEL in
flight.  The C client runs with this machine's libcurl (a fresh connection
per call on 7.88) and, when bookworm-backports is reachable, with libcurl 8
(one multiplexed connection).  The Python client keeps one channel, as grpc
clients do (kubelet opens one per call: see --fresh).  Log level warning for
the C client (an info line per publish would go to stderr).  Not pass/fail.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time

TEST_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TEST_DIR)
REPO = os.path.dirname(TEST_DIR)
BUILD = os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO, "build"))
HARNESS = os.path.join(BUILD, "test", "tools", "csi-harness")
REQUEST = {"volume_id": "bench", "target_path": "/target/bench", "staging_target_path": "/staging/bench",
           "volume_capability": {"mount": {"fs_type": "ext4"}, "access_mode": "SINGLE_NODE_WRITER"},
           "volume_context": {"k": "v"}}


def c_client(socket, count, parallel, libdir=None):
    env = dict(os.environ)
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir
    p = subprocess.Popen([HARNESS, "--driver=bench.csi=unix://" + socket, "--log-level=warning",
                          "--max-parallel=%d" % max(parallel, 1)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, env=env)
    ready = json.loads(p.stdout.readline())
    p.stdin.write(json.dumps({"id": "b", "bench": {"method": "NodePublishVolume", "driver": "bench.csi",
                                                   "request": REQUEST, "count": count,
                                                   "parallel": parallel}}) + "\n")
    p.stdin.close()
    res = json.loads(p.stdout.readline())
    p.wait()
    assert res["errors"] == 0, res
    return {"client": "kvolumed (libcurl %s, %s)" % (ready["libcurl"], "reuse" if ready["reuse"] else "fresh conn"),
            "median_us": res["median_us"], "p99_us": res["p99_us"], "calls_per_sec": res["calls_per_sec"]}


def py_client(socket, count, parallel, fresh=False):
    import grpc
    from doubles.mockcsi import stubs
    pb, pb_grpc, _, _ = stubs.load()
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(fs_type="ext4"),
                              access_mode=pb.VolumeCapability.AccessMode(mode=1))
    req = pb.NodePublishVolumeRequest(volume_id="bench", target_path="/target/bench",
                                      staging_target_path="/staging/bench", volume_capability=cap,
                                      volume_context={"k": "v"})
    chan = grpc.insecure_channel("unix:" + socket)
    stub = pb_grpc.NodeStub(chan)
    stub.NodePublishVolume(req, timeout=10)  # connect first
    lat = []
    t0 = time.perf_counter()
    if parallel <= 1:
        for _ in range(count):
            s = time.perf_counter()
            if fresh:
                with grpc.insecure_channel("unix:" + socket) as c:
                    pb_grpc.NodeStub(c).NodePublishVolume(req, timeout=10)
            else:
                stub.NodePublishVolume(req, timeout=10)
            lat.append(time.perf_counter() - s)
    else:
        sem = threading.Semaphore(parallel)
        done = threading.Event()
        lock = threading.Lock()
        left = [count]

        def finished(fut, s):
            fut.result()
            with lock:
                lat.append(time.perf_counter() - s)
                left[0] -= 1
                if left[0] == 0:
                    done.set()
            sem.release()
        for _ in range(count):
            sem.acquire()
            s = time.perf_counter()
            f = stub.NodePublishVolume.future(req, timeout=30)
            f.add_done_callback(lambda fut, s=s: finished(fut, s))
        done.wait()
    elapsed = time.perf_counter() - t0
    chan.close()
    lat.sort()
    return {"client": "python grpcio %s (%s)" % (grpc.__version__, "channel per call" if fresh else "one channel"),
            "median_us": statistics.median(lat) * 1e6, "p99_us": lat[int(len(lat) * 0.99)] * 1e6,
            "calls_per_sec": count / elapsed}


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--count", type=int, default=10000)
    a.add_argument("--parallel", type=int, default=64)
    a.add_argument("--fresh", action="store_true", help="also a Python client with a channel per call (slow)")
    args = a.parse_args()
    d = tempfile.mkdtemp(prefix="kvbench", dir="/tmp")
    sock = os.path.join(d, "csi.sock")
    srv = subprocess.Popen(["/usr/bin/python3", os.path.join(TEST_DIR, "interop", "python", "server.py"), sock,
                            "--workers", "64"], stdout=subprocess.PIPE, text=True,
                           env=dict(os.environ, PYTHONPATH=TEST_DIR))
    assert "READY" in srv.stdout.readline()
    libdirs = [None]
    p = subprocess.run([os.path.join(TEST_DIR, "tools", "csi-fetch-curl8.sh")], capture_output=True, text=True)
    if p.returncode == 0:
        libdirs.append(p.stdout.strip())
    else:
        print("# libcurl 8 not available: %s" % p.stderr.strip())
    print("# %s, %d CPUs, %s; server: grpcio, 64 worker threads, does nothing" % (
        platform.node(), os.cpu_count(), platform.platform()))
    print("# %d NodePublishVolume calls per row" % args.count)
    print("%-48s %8s %11s %11s %10s" % ("client", "inflight", "median_us", "p99_us", "calls/s"))
    try:
        for inflight in (1, args.parallel):
            rows = [c_client(sock, args.count, inflight, l) for l in libdirs]
            py = py_client(sock, args.count, inflight)
            rows.append(py)
            if args.fresh and inflight == 1:
                rows.append(py_client(sock, min(args.count, 2000), 1, fresh=True))
            for r in rows:
                print("%-48s %8d %11.0f %11.0f %10.0f" % (r["client"], inflight, r["median_us"], r["p99_us"],
                                                        r["calls_per_sec"]))
            for r in rows[:-1 - (args.fresh and inflight == 1)]:
                print("#   %s / python: throughput x%.2f, median latency x%.2f" % (
                    r["client"], r["calls_per_sec"] / py["calls_per_sec"], r["median_us"] / py["median_us"]))
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
