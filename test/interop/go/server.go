// A canned CSI node plugin on grpc-go (Debian's golang-google-grpc-dev), for
// the interop tests of kvolumed's C client.  The messages are generated from
// the reference csi.proto by protoc-gen-go (golang-goprotobuf-dev); the
// services are declared by hand below, so no protoc-gen-go-grpc is needed.
//
//	server SOCKET_PATH
//
// Requests with volume_id "fail-<CODE NUMBER>" fail with that code and a
// message that needs percent-encoding; "hang" never answers.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	wrappers "github.com/golang/protobuf/ptypes/wrappers"
)

type volumeRequest interface{ GetVolumeId() string }

func check(ctx context.Context, req interface{}) error {
	if v, ok := req.(volumeRequest); ok {
		id := v.GetVolumeId()
		if id == "hang" {
			<-ctx.Done()
			return status.Error(codes.DeadlineExceeded, "hung until the deadline")
		}
		if strings.HasPrefix(id, "fail-") {
			n, _ := strconv.Atoi(id[5:])
			return status.Error(codes.Code(n), "failed: 100% \""+id+"\" caf\u00e9")
		}
	}
	return nil
}

// method builds a grpc.MethodDesc from a request constructor and a handler.
func method[Req any](name string, h func(*Req) (interface{}, error)) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(srv interface{}, ctx context.Context, dec func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		if err := check(ctx, in); err != nil {
			return nil, err
		}
		return h(in)
	}}
}

func main() {
	sock := os.Args[1]
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := grpc.NewServer()
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "csi.v1.Identity",
		HandlerType: (*interface{})(nil),
		Methods: []grpc.MethodDesc{
			method[csi.GetPluginInfoRequest]("GetPluginInfo", func(*csi.GetPluginInfoRequest) (interface{}, error) {
				return &csi.GetPluginInfoResponse{Name: "go.csi.kvolumed.io", VendorVersion: "go-1", Manifest: map[string]string{"impl": "grpc-go"}}, nil
			}),
			method[csi.GetPluginCapabilitiesRequest]("GetPluginCapabilities", func(*csi.GetPluginCapabilitiesRequest) (interface{}, error) {
				return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
					{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}},
					{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}},
				}}, nil
			}),
			method[csi.ProbeRequest]("Probe", func(*csi.ProbeRequest) (interface{}, error) {
				return &csi.ProbeResponse{Ready: &wrappers.BoolValue{Value: true}}, nil
			}),
		},
		Metadata: "csi.proto",
	}, struct{}{})
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "csi.v1.Node",
		HandlerType: (*interface{})(nil),
		Methods: []grpc.MethodDesc{
			method[csi.NodeStageVolumeRequest]("NodeStageVolume", func(*csi.NodeStageVolumeRequest) (interface{}, error) { return &csi.NodeStageVolumeResponse{}, nil }),
			method[csi.NodeUnstageVolumeRequest]("NodeUnstageVolume", func(*csi.NodeUnstageVolumeRequest) (interface{}, error) { return &csi.NodeUnstageVolumeResponse{}, nil }),
			method[csi.NodePublishVolumeRequest]("NodePublishVolume", func(r *csi.NodePublishVolumeRequest) (interface{}, error) {
				m := r.GetVolumeCapability().GetMount()
				if r.TargetPath != "/target" || m.GetFsType() != "xfs" || len(m.GetMountFlags()) != 2 || m.GetMountFlags()[1] != "noatime" ||
					r.Secrets["key"] != "value" || !r.Readonly ||
					r.GetVolumeCapability().GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER {
					return nil, status.Errorf(codes.InvalidArgument, "unexpected request %v", r)
				}
				return &csi.NodePublishVolumeResponse{}, nil
			}),
			method[csi.NodeUnpublishVolumeRequest]("NodeUnpublishVolume", func(*csi.NodeUnpublishVolumeRequest) (interface{}, error) { return &csi.NodeUnpublishVolumeResponse{}, nil }),
			method[csi.NodeGetVolumeStatsRequest]("NodeGetVolumeStats", func(*csi.NodeGetVolumeStatsRequest) (interface{}, error) {
				return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Available: 1, Total: 3, Used: 2, Unit: csi.VolumeUsage_BYTES}},
					VolumeCondition: &csi.VolumeCondition{Abnormal: true, Message: "bad"}}, nil
			}),
			method[csi.NodeExpandVolumeRequest]("NodeExpandVolume", func(r *csi.NodeExpandVolumeRequest) (interface{}, error) {
				return &csi.NodeExpandVolumeResponse{CapacityBytes: r.GetCapacityRange().GetRequiredBytes()}, nil
			}),
			method[csi.NodeGetCapabilitiesRequest]("NodeGetCapabilities", func(*csi.NodeGetCapabilitiesRequest) (interface{}, error) {
				return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
					{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}},
					{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}}},
				}}, nil
			}),
			method[csi.NodeGetInfoRequest]("NodeGetInfo", func(*csi.NodeGetInfoRequest) (interface{}, error) {
				return &csi.NodeGetInfoResponse{NodeId: "node-go", MaxVolumesPerNode: 9, AccessibleTopology: &csi.Topology{Segments: map[string]string{"zone": "a"}}}, nil
			}),
		},
		Metadata: "csi.proto",
	}, struct{}{})
	fmt.Println("READY", sock)
	_ = s.Serve(lis)
}
