package journald

import (
	"context"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// OpenTelemetry: only the API module is a dependency (no SDK). When the caller's context
// carries a span (from any OTel SDK, or trace.ContextWithSpanContext), every RPC carries
// its W3C `traceparent` (and `tracestate`) in gRPC metadata, so the daemon's span
// continues the caller's trace, and every record written carries its trace/span id.
// Without a span nothing is added.

var w3c = propagation.TraceContext{}

// TraceMetadata returns the W3C trace context of ctx as gRPC metadata pairs (empty when
// ctx carries no valid span context).
func TraceMetadata(ctx context.Context) metadata.MD {
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	md := metadata.MD{}
	for k, v := range carrier {
		md.Set(k, v)
	}
	return md
}

func withTrace(ctx context.Context) context.Context {
	md := TraceMetadata(ctx)
	if len(md) == 0 {
		return ctx
	}
	pairs := make([]string, 0, 2*len(md))
	for k, vs := range md {
		for _, v := range vs {
			pairs = append(pairs, k, v)
		}
	}
	return metadata.AppendToOutgoingContext(ctx, pairs...)
}

func unaryTrace(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(withTrace(ctx), method, req, reply, cc, opts...)
}

func streamTrace(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(withTrace(ctx), desc, cc, method, opts...)
}

// recordTrace is the record's trace field from the span in ctx (nil without one).
func recordTrace(ctx context.Context) *pb.TraceContext {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return &pb.TraceContext{TraceId: sc.TraceID().String(), SpanId: sc.SpanID().String()}
}
