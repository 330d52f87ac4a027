// The benchmarks' CSI node plugin on grpc-go (Debian's golang-google-grpc-dev):
// the most representative peer, since most CSI drivers are written in Go, for
// the figures that depend on the driver's own receive (test/bench/mount.sh
// --driver go).  It does what the Python mock driver (test/doubles/mockcsi)
// does for the benchmarks' ephemeral inline volumes, no more:
// NodePublishVolume makes the target and mounts a tmpfs there,
// NodeUnpublishVolume unmounts and removes it, each call rewrites the state
// file (as the CSI hostpath driver's state.go does) and appends a line to the
// call log the benchmarks read, as the mock's: {"time": the call's start,
// seconds since the epoch, "duration", "method", "code"}.  The messages are
// generated from the reference csi.proto by protoc-gen-go
// (test/interop/go/build.sh); the services are declared by hand.
//
//	driver -endpoint SOCKET -name NAME -state-dir DIR [-state-write safe|hostpath]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	wrappers "github.com/golang/protobuf/ptypes/wrappers"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type published struct {
	VolumeID string `json:"volume_id"`
	Target   string `json:"target"`
	Readonly bool   `json:"readonly"`
}

type driver struct {
	name, stateDir, stateWrite string
	mu                         sync.Mutex
	published                  map[string]published // target → what is published there
	logMu                      sync.Mutex
	log                        *os.File
}

// saveLocked writes the state file: "safe" (temp file, fsync, rename) or
// "hostpath" (truncated and written in place, never synced, as state.go).
func (d *driver) saveLocked() error {
	data, err := json.Marshal(map[string]interface{}{"published": d.published})
	if err != nil {
		return err
	}
	path := filepath.Join(d.stateDir, "state.json")
	if d.stateWrite == "hostpath" {
		return os.WriteFile(path, data, 0o600)
	}
	tmp := fmt.Sprintf("%s.tmp.%d", path, os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// record appends the call's line: one write in append mode, so that a
// reader never sees half a line.
func (d *driver) record(start time.Time, method string, err error) {
	code := "OK"
	if err != nil {
		code = status.Code(err).String()
	}
	line, _ := json.Marshal(map[string]interface{}{
		"time":     float64(start.UnixNano()) / 1e9,
		"duration": time.Since(start).Seconds(),
		"method":   method,
		"code":     code,
	})
	d.logMu.Lock()
	_, _ = d.log.Write(append(line, '\n'))
	d.logMu.Unlock()
}

func (d *driver) publish(r *csi.NodePublishVolumeRequest) (interface{}, error) {
	if r.GetVolumeId() == "" || r.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID and target path are required")
	}
	if r.GetVolumeCapability().GetMount() == nil {
		return nil, status.Error(codes.InvalidArgument, "only mount volumes are served")
	}
	target := filepath.Clean(r.GetTargetPath())
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.published[target]; ok {
		if p.VolumeID != r.GetVolumeId() || p.Readonly != r.GetReadonly() {
			return nil, status.Errorf(codes.AlreadyExists, "target path %s is in use by volume %s", target, p.VolumeID)
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}
	// kubelet makes the parent before the call (reference/kubelet-facts.md).
	if _, err := os.Stat(filepath.Dir(target)); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "parent of %s: %v", target, err)
	}
	if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, status.Errorf(codes.Internal, "mkdir %s: %v", target, err)
	}
	flags := uintptr(0)
	if r.GetReadonly() {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount("tmpfs", target, "tmpfs", flags, "size=1m,mode=0755"); err != nil {
		_ = os.Remove(target)
		return nil, status.Errorf(codes.Internal, "mount a tmpfs at %s: %v", target, err)
	}
	d.published[target] = published{VolumeID: r.GetVolumeId(), Target: target, Readonly: r.GetReadonly()}
	if err := d.saveLocked(); err != nil {
		return nil, status.Errorf(codes.Internal, "save the state: %v", err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) unpublish(r *csi.NodeUnpublishVolumeRequest) (interface{}, error) {
	if r.GetVolumeId() == "" || r.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID and target path are required")
	}
	target := filepath.Clean(r.GetTargetPath())
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := syscall.Unmount(target, 0); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove %s: %v", target, err)
	}
	delete(d.published, target)
	if err := d.saveLocked(); err != nil {
		return nil, status.Errorf(codes.Internal, "save the state: %v", err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// method builds a grpc.MethodDesc that decodes the request, runs the handler
// and logs the call.
func method[Req any](d *driver, name string, h func(*Req) (interface{}, error)) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(srv interface{}, ctx context.Context, dec func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
		start := time.Now()
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		out, err := h(in)
		d.record(start, name, err)
		return out, err
	}}
}

func main() {
	endpoint := flag.String("endpoint", "", "unix socket path")
	name := flag.String("name", "go.csi.kvolumed.io", "the driver's name")
	stateDir := flag.String("state-dir", "", "the state file's and the call log's directory")
	stateWrite := flag.String("state-write", "safe", "safe or hostpath")
	flag.Parse()
	if *endpoint == "" || *stateDir == "" {
		fmt.Fprintln(os.Stderr, "usage: driver -endpoint SOCKET -state-dir DIR [-name NAME] [-state-write safe|hostpath]")
		os.Exit(2)
	}
	if err := os.MkdirAll(*stateDir, 0o750); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	log, err := os.OpenFile(filepath.Join(*stateDir, "calls.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	d := &driver{name: *name, stateDir: *stateDir, stateWrite: *stateWrite, published: map[string]published{}, log: log}
	_ = os.Remove(*endpoint)
	lis, err := net.Listen("unix", *endpoint)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := grpc.NewServer()
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "csi.v1.Identity",
		HandlerType: (*interface{})(nil),
		Methods: []grpc.MethodDesc{
			method(d, "GetPluginInfo", func(*csi.GetPluginInfoRequest) (interface{}, error) {
				return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "bench-go"}, nil
			}),
			method(d, "GetPluginCapabilities", func(*csi.GetPluginCapabilitiesRequest) (interface{}, error) {
				return &csi.GetPluginCapabilitiesResponse{}, nil
			}),
			method(d, "Probe", func(*csi.ProbeRequest) (interface{}, error) {
				return &csi.ProbeResponse{Ready: &wrappers.BoolValue{Value: true}}, nil
			}),
		},
		Metadata: "csi.proto",
	}, struct{}{})
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "csi.v1.Node",
		HandlerType: (*interface{})(nil),
		Methods: []grpc.MethodDesc{
			method(d, "NodePublishVolume", d.publish),
			method(d, "NodeUnpublishVolume", d.unpublish),
			method(d, "NodeGetCapabilities", func(*csi.NodeGetCapabilitiesRequest) (interface{}, error) {
				return &csi.NodeGetCapabilitiesResponse{}, nil
			}),
			method(d, "NodeGetInfo", func(*csi.NodeGetInfoRequest) (interface{}, error) {
				host, _ := os.Hostname()
				return &csi.NodeGetInfoResponse{NodeId: host}, nil
			}),
		},
		Metadata: "csi.proto",
	}, struct{}{})
	fmt.Println("READY", *endpoint)
	_ = s.Serve(lis)
}
