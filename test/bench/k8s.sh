#!/bin/bash
# k8s/ benchmark: Pod decode time, memory per stored pod, and watch latency
# over 5,000 pods on the fake API server.  Not a pass/fail test.
#   test/bench/k8s.sh [BUILD_DIR]      (default: build; needs ninja -C BUILD_DIR first)
# Env: PODS (5000), CHANGES (200), DECODES (20000).
set -eu -o pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$REPO/build}" && pwd)
PODS=${PODS:-5000}
CHANGES=${CHANGES:-200}
DECODES=${DECODES:-20000}
WORK=$(mktemp -d)
FAKE_PID=
cleanup() { [ -n "$FAKE_PID" ] && kill "$FAKE_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

# test/bench has no meson.build of its own: build against the module's library.
cc -O2 -g -std=gnu17 -D_GNU_SOURCE -DKVOLUMED_VERSION='"bench"' -I"$REPO" \
        $(pkg-config --cflags libcjson libcurl libsystemd) \
        -o "$WORK/k8s-bench" "$REPO/test/bench/k8s-bench.c" \
        "$BUILD/k8s/libkv-k8s.a" "$BUILD/systemd/libkv-systemd.a" \
        $(pkg-config --libs libcjson yaml-0.1 libcrypto libcurl libsystemd) -lm

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -r)"
"$WORK/k8s-bench" decode "$REPO/../shared/reference/k8s-api-fixtures/core.v1.Pod.json" "$DECODES"

/usr/bin/python3 - "$WORK/pods.json" "$PODS" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}]
for i in range(n):
    name = f"p{i:05d}"
    items.append({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "labels": {"app": "bench"}},
        "spec": {"nodeName": "bench-node", "serviceAccountName": "default",
                 "securityContext": {"fsGroup": 2000},
                 "containers": [{"name": "app", "image": "registry.example/app:1",
                                 "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                                  {"name": "cfg", "mountPath": "/cfg", "readOnly": True}]}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}},
                             {"name": "cfg", "csi": {"driver": "hostpath.csi.k8s.io",
                                                     "volumeAttributes": {"size": "1Mi"}}}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "ready": True,
                   "restartCount": 0, "image": "registry.example/app:1", "imageID": "",
                   "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}]}})
json.dump({"kind": "List", "items": items}, open(path, "w"))
PY
cd "$REPO/test"
PYTHONPATH="$REPO/test" /usr/bin/python3 -m doubles.fakeapi --dir "$WORK/fake" --load "$WORK/pods.json" \
        --bookmark-interval 60 >"$WORK/endpoints" 2>"$WORK/fake.log" &
FAKE_PID=$!
for _ in $(seq 1 600); do [ -s "$WORK/endpoints" ] && break; sleep 0.1; done
[ -s "$WORK/endpoints" ] || { cat "$WORK/fake.log"; exit 1; }
ep() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$WORK/endpoints" "$1"; }
"$WORK/k8s-bench" informer --server "$(ep server)" --token-file "$(ep token)" --ca "$(ep ca)" \
        --control "$(ep control)" --node bench-node --changes "$CHANGES"
