package journald

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// relay passes a writer's calls through to the real daemon on its own unix socket, and cuts
// the first AppendStream once the daemon has answered cutAt appends on it (in however many
// messages), without passing the last answer message on: an ack lost after the daemon stored the records, which the client sees as
// a bare cutCode without journald's trailer (UNAVAILABLE: a broken connection; INTERNAL: a
// stream reset, "Internal error from Core").
type relay struct {
	pb.UnimplementedJournalServiceServer
	up      pb.JournalServiceClient
	cutAt   int32
	cutCode codes.Code
	cut     atomic.Bool
	streams atomic.Int32
}

func startRelay(t *testing.T, daemonSocket string, cutAt int32, cutCode codes.Code) (*relay, string) {
	t.Helper()
	target, err := Target(daemonSocket)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := &relay{up: pb.NewJournalServiceClient(conn), cutAt: cutAt, cutCode: cutCode}
	return r, serveOnUnixSocket(t, "jd-relay", r)
}

// serveOnUnixSocket serves impl as the JournalService (and a SERVING health service) on a
// fresh unix socket, stopped when the test ends, and returns the socket's path.
func serveOnUnixSocket(t *testing.T, prefix string, impl pb.JournalServiceServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix) // a unix socket path must stay short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "journald.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterJournalServiceServer(srv, impl)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return path
}

func (r *relay) Open(req *pb.OpenRequest, down grpc.ServerStreamingServer[pb.OpenResponse]) error {
	up, err := r.up.Open(down.Context(), req)
	if err != nil {
		return err
	}
	for {
		m, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := down.Send(m); err != nil {
			return err
		}
	}
}

func (r *relay) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	return r.up.Release(ctx, req)
}

func (r *relay) AppendStream(down grpc.BidiStreamingServer[pb.AppendStreamRequest, pb.AppendStreamResponse]) error {
	r.streams.Add(1)
	up, err := r.up.AppendStream(down.Context())
	if err != nil {
		return err
	}
	go func() {
		for {
			m, err := down.Recv()
			if err != nil {
				_ = up.CloseSend()
				return
			}
			if up.Send(m) != nil {
				return
			}
		}
	}()
	for answered := int32(0); ; {
		m, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// appends answered: a coalesced message answers several
		answered += int32(max(1, len(m.GetResponses())))
		if answered >= r.cutAt && r.cut.CompareAndSwap(false, true) {
			return status.Error(r.cutCode, "relay: connection cut")
		}
		if err := down.Send(m); err != nil {
			return err
		}
	}
}

func TestAStreamCutAfterTheDaemonStoredAnAppendIsResentAndEveryRecordIsStoredOnce(t *testing.T) {
	cutStreamIsResentAndStoredOnce(t, codes.Unavailable, "go-cut")
}

// A bare INTERNAL is gRPC's, not the daemon's (whose statuses all carry the trailer): the
// writer treats it as the connection failing, not as a daemon bug that ends the agent.
func TestAStreamCutByABareInternalIsResentAndEveryRecordIsStoredOnce(t *testing.T) {
	cutStreamIsResentAndStoredOnce(t, codes.Internal, "go-cut-internal")
}

func cutStreamIsResentAndStoredOnce(t *testing.T, code codes.Code, prefix string) {
	sock := liveSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, relaySocket := startRelay(t, sock, 3, code)
	_, run := startRun(ctx, t, relaySocket, uniqueID(prefix))
	w, err := run.Pipelined(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var pending []*Pending
	for i := 0; i < 8; i++ {
		p, err := w.Append(ctx, State{Namespace: "agent", Key: "step", Type: "text/plain", Data: []byte{byte('a' + i)}})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	for i, p := range pending {
		acks, err := p.Wait(ctx)
		if err != nil || acks[0].GetSeq() != uint64(i+2) {
			t.Fatalf("append %d: %v, %v", i, acks, err)
		}
		// seq 4's answer was the one cut off: the daemon had stored it, so the resend is a duplicate
		if i == 2 && !acks[0].GetDuplicate() {
			t.Fatalf("seq 4 was stored before the cut, but its resend was not answered as a duplicate")
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !r.cut.Load() || r.streams.Load() != 2 {
		t.Fatalf("cut %v after %d streams, want one cut and one resend stream", r.cut.Load(), r.streams.Load())
	}
	direct, err := Connect(ctx, WithSocket(sock))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	stored, err := direct.Load(ctx, run.ID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 9 {
		t.Fatalf("%d records stored, want 9 (meta + 8, each once)", len(stored))
	}
	for i, rec := range stored[1:] {
		if rec.GetSeq() != uint64(i+2) || string(rec.GetState().GetData()) != string(rune('a'+i)) {
			t.Fatalf("stored seq %d holds %q", rec.GetSeq(), rec.GetState().GetData())
		}
	}
}
