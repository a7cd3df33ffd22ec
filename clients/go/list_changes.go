package journald

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/journald/journald/clients/go/journaldv1"
)

// ListChange is one notice of a ListChanges stream (docs/protocol.md#list-changes).
type ListChange struct {
	// Ready is set on the first notice only: the stream is live, and a List sent after it
	// misses no change.
	Ready bool
	// RunIDs are the runs whose RunInfo may differ from a List sent before this notice
	// (sorted, each once).
	RunIDs []string
	// All says "List everything": more runs changed than one notice names, or the daemon
	// cannot tell which.
	All bool
}

// ListChanges is a live stream of ListChange notices, so a listing Lists again only when
// something moved instead of polling. Read Changes until it is closed, then Err.
type ListChanges struct {
	changes chan ListChange
	err     error // written before changes is closed
}

// Changes delivers the notices, the Ready one first. It is closed when the context given to
// Client.ListChanges is cancelled, when the daemon ends the stream (it stops: List again
// after reconnecting), or on a failure (Err says which).
func (l *ListChanges) Changes() <-chan ListChange { return l.changes }

// Err is why Changes was closed: nil when the context was cancelled or the daemon ended
// the stream, else the failure as an *Error (ErrorCode "unimplemented" from a daemon older
// than ListChanges: poll List then). Call it after Changes is closed.
func (l *ListChanges) Err() error { return l.err }

// ListChanges follows which runs' listing rows change. Cancel ctx to stop; keep reading
// Changes until then (a notice not read holds the stream).
func (c *Client) ListChanges(ctx context.Context) (*ListChanges, error) {
	stream, err := c.rpc.ListChanges(ctx, &pb.ListChangesRequest{})
	if err != nil {
		return nil, fromGRPC(err, nil)
	}
	l := &ListChanges{changes: make(chan ListChange)}
	go func() {
		defer close(l.changes)
		for {
			m, err := stream.Recv()
			if err != nil {
				l.err = endOfChanges(ctx, err, func() error { return fromGRPC(err, stream.Trailer()) })
				return
			}
			n := ListChange{Ready: m.GetReady(), RunIDs: m.GetRunIds(), All: m.GetAll()}
			select {
			case l.changes <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	return l, nil
}

// endOfChanges is nil for the ends that are not failures: the daemon closing the stream
// (EOF) or the caller cancelling; else the mapped error.
func endOfChanges(ctx context.Context, err error, mapped func() error) error {
	if errors.Is(err, ioEOF) || ctx.Err() != nil || status.Code(err) == codes.Canceled {
		return nil
	}
	return mapped()
}
