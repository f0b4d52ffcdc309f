package api

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	ringlimitv1 "github.com/ringlimit/ringlimit/proto/ringlimit/v1"
)

// gRPC decodes a request before the handler runs and answers one that does
// not decode with Internal, a server fault that clients may retry, and no
// word of which field is wrong. The public RateLimiter service therefore
// receives its requests undecoded (a rawFrame, through serverCodec) and
// decodes them itself: a malformed request gets InvalidArgument naming the
// field when it can.

// rawFrame is a received message, not decoded, or one to send already
// encoded; buf holds b as serverCodec.Marshal returns it, so that it needs
// no allocation of its own.
type rawFrame struct {
	b   []byte
	buf [1]mem.Buffer
}

// serverCodec is the codec of the node's gRPC servers: gRPC's protobuf
// codec, except that a *rawFrame receives the message's bytes as they are.
type serverCodec struct{ proto encoding.CodecV2 }

// Codec returns the codec of a node's gRPC servers (grpc.ForceServerCodecV2):
// gRPC's protobuf codec, with which the services of this package, and
// RegisterEnvoy's, decode their requests themselves.
func Codec() encoding.CodecV2 { return serverCodec{proto: encoding.GetCodecV2("proto")} }

// Marshal implements encoding.CodecV2. A *rawFrame is a message already
// in wire form (the Check handler's answers): sent as it is.
func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*rawFrame); ok {
		f.buf[0] = mem.SliceBuffer(f.b)
		return f.buf[:], nil
	}
	return c.proto.Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*rawFrame); ok {
		f.b = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// Name implements encoding.CodecV2: it replaces "proto".
func (serverCodec) Name() string { return "proto" }

// rateLimiterDesc is ringlimitv1.RateLimiter_ServiceDesc with a Check
// handler that decodes its request itself, and answers in wire form
// (wire.go) the requests decodeItems takes when no interceptor wants the
// messages. The server it is registered on must use serverCodec.
var rateLimiterDesc = func() grpc.ServiceDesc {
	d := ringlimitv1.RateLimiter_ServiceDesc
	general := rawUnary(ringlimitv1.RateLimiter_Check_FullMethodName,
		func(srv any, ctx context.Context, in *ringlimitv1.CheckRequest) (any, error) {
			return srv.(ringlimitv1.RateLimiterServer).Check(ctx, in)
		})
	d.Methods = []grpc.MethodDesc{{MethodName: "Check", Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		a, ok := srv.(grpcAPI)
		if !ok || interceptor != nil {
			return general(srv, ctx, dec, interceptor)
		}
		start := time.Now()
		var f rawFrame
		if err := dec(&f); err != nil {
			return nil, err
		}
		c := a.s.getCall()
		defer a.s.putCall(c)
		if items, ok := decodeItems(c.items[:0], f.b, a.s.cfg.MaxBatchItems); ok {
			c.items = items
			return a.s.checkWire(ctx, c, a.s.cfg.GRPCRulesOnly, start)
		}
		in := new(ringlimitv1.CheckRequest)
		if err := decodeRequest(f.b, in); err != nil {
			return nil, err
		}
		return a.Check(ctx, in)
	}}}
	return d
}()

// RegisterEnvoy registers Envoy's RateLimitService v3 served by srv on g,
// decoding its requests as RateLimiter's are: a request that is not valid
// protobuf or UTF-8 gets InvalidArgument, not Internal. g must use Codec.
func RegisterEnvoy(g *grpc.Server, srv rlsv3.RateLimitServiceServer) {
	g.RegisterService(&envoyDesc, srv)
}

// envoyDesc is Envoy's RateLimitService_ServiceDesc with a ShouldRateLimit
// handler that decodes its request itself, as rateLimiterDesc does: a
// request that is not valid protobuf or UTF-8 gets InvalidArgument, not
// Internal. The server it is registered on must use serverCodec.
var envoyDesc = func() grpc.ServiceDesc {
	d := rlsv3.RateLimitService_ServiceDesc
	d.Methods = []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: rawUnary(rlsv3.RateLimitService_ShouldRateLimit_FullMethodName,
		func(srv any, ctx context.Context, in *rlsv3.RateLimitRequest) (any, error) {
			return srv.(rlsv3.RateLimitServiceServer).ShouldRateLimit(ctx, in)
		})}}
	return d
}()

// rawUnary returns the handler of the unary method fullMethod that receives
// its request undecoded (a rawFrame), decodes it into a new R with
// decodeRequest and calls call with it, through the interceptor if any.
func rawUnary[R any, PR interface {
	*R
	proto.Message
}](fullMethod string, call func(srv any, ctx context.Context, in PR) (any, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		var f rawFrame
		if err := dec(&f); err != nil {
			return nil, err
		}
		in := PR(new(R))
		if err := decodeRequest(f.b, in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return call(srv, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return call(srv, ctx, req.(PR))
		})
	}
}

// decodeRequest decodes b into m; a failure is an InvalidArgument status
// naming the first field that is not UTF-8, if that is the fault.
func decodeRequest(b []byte, m proto.Message) error {
	err := proto.Unmarshal(b, m)
	if err == nil {
		return nil
	}
	if path := invalidUTF8(b, m.ProtoReflect().Descriptor(), ""); path != "" {
		return status.Errorf(codes.InvalidArgument, "malformed request: %s: not valid UTF-8", path)
	}
	return status.Errorf(codes.InvalidArgument, "malformed request: %v", err)
}

// invalidUTF8 returns the path ("items[2].unique_key") of the first string
// field of the message md encoded in b that is not UTF-8, or "" if there is
// none or b does not parse.
func invalidUTF8(b []byte, md protoreflect.MessageDescriptor, prefix string) string {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		val := b[:n]
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType {
			continue
		}
		path := prefix + string(fd.Name())
		if fd.IsList() {
			path = fmt.Sprintf("%s[%d]", path, seen[num])
			seen[num]++
		}
		v, _ := protowire.ConsumeBytes(val)
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return path
			}
		case protoreflect.MessageKind:
			if p := invalidUTF8(v, fd.Message(), path+"."); p != "" {
				return p
			}
		}
	}
	return ""
}
