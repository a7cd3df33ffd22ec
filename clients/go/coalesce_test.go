package journald

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/grpc"
)

// stubDaemon stands in for the daemon where go test runs without one (scripts/test_clients.sh):
// it grants a lease saying whether it takes coalesced messages and acknowledges every append
// of every AppendStream message, counting the appends each message carried. The same writer
// against the real daemon runs in tests/integration/client/test_polyglot.py.
type stubDaemon struct {
	pb.UnimplementedJournalServiceServer
	batches  bool
	mu       sync.Mutex
	messages []int // appends per AppendStream message, in arrival order
}

func startStubDaemon(t *testing.T, batches bool) (*stubDaemon, string) {
	t.Helper()
	d := &stubDaemon{batches: batches}
	return d, serveOnUnixSocket(t, "jd-stub", d)
}

func (d *stubDaemon) Open(req *pb.OpenRequest, down grpc.ServerStreamingServer[pb.OpenResponse]) error {
	lease := &pb.Lease{LeaseId: "lease-1", RunId: req.GetRunId(), Created: true, LastSeq: 1,
		State: &pb.RunState{LastSeq: 1}, AppendStreamBatches: d.batches}
	if err := down.Send(&pb.OpenResponse{Event: &pb.OpenResponse_Lease{Lease: lease}}); err != nil {
		return err
	}
	<-down.Context().Done()
	return nil
}

func (d *stubDaemon) Release(context.Context, *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	return &pb.ReleaseResponse{Released: true}, nil
}

func (d *stubDaemon) AppendStream(s grpc.BidiStreamingServer[pb.AppendStreamRequest, pb.AppendStreamResponse]) error {
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		appends := m.GetAppends()
		if len(appends) == 0 {
			appends = []*pb.AppendRequest{m.GetAppend()}
		}
		d.mu.Lock()
		d.messages = append(d.messages, len(appends))
		d.mu.Unlock()
		var answers []*pb.AppendResponse
		for _, a := range appends {
			var acks []*pb.Ack
			for _, r := range a.GetRecords() {
				acks = append(acks, &pb.Ack{Seq: r.GetSeq(), Hash: strings.Repeat("0", 64),
					Durability: pb.Durability_DURABILITY_FSYNC_LOCAL})
			}
			answers = append(answers, &pb.AppendResponse{Acks: acks})
		}
		resp := &pb.AppendStreamResponse{Responses: answers}
		if len(m.GetAppends()) == 0 {
			resp = &pb.AppendStreamResponse{Response: answers[0]}
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
}

func (d *stubDaemon) counted() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.messages)
}

// appendHeldBehindTheWire submits n state appends while the test holds the wire (as a
// message being sent does), then lets the writer send what queued up, and waits for the acks.
func appendHeldBehindTheWire(ctx context.Context, t *testing.T, w *PipelinedWriter, n int) [][]*pb.Ack {
	t.Helper()
	w.wireMu.Lock()
	var pending []*Pending
	for i := 0; i < n; i++ {
		p, err := w.Append(ctx, State{Namespace: "agent", Key: "step", Type: "text/plain", Data: []byte{byte('a' + i)}})
		if err != nil {
			w.wireMu.Unlock()
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	w.wireMu.Unlock()
	w.sendQueued()
	var out [][]*pb.Ack
	for _, p := range pending {
		acks, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, acks)
	}
	return out
}

func TestAppendsQueuedBehindAMessageOnTheWireGoInOneMessageAndEachGetsItsOwnAcks(t *testing.T) {
	d, sock := startStubDaemon(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, run := startRun(ctx, t, sock, "go-coalesced")
	w, err := run.Pipelined(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	acks := appendHeldBehindTheWire(ctx, t, w, 10)
	for i, a := range acks {
		if len(a) != 1 || a[0].GetSeq() != uint64(i+2) {
			t.Fatalf("append %d acked %v, want seq %d", i, a, i+2)
		}
	}
	// one append and a wait: it goes alone, at once
	p, err := w.Append(ctx, Terminal{Reason: "completed"})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := p.Wait(ctx); err != nil || a[0].GetSeq() != 12 {
		t.Fatalf("the lone append: %v, %v", a, err)
	}
	if got := d.counted(); !slices.Equal(got, []int{10, 1}) {
		t.Fatalf("appends per stream message %v, want [10 1]", got)
	}
}

func TestADaemonWhoseLeaseTakesNoBatchesGetsOneAppendPerMessage(t *testing.T) {
	d, sock := startStubDaemon(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, run := startRun(ctx, t, sock, "go-one-by-one")
	w, err := run.Pipelined(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	appendHeldBehindTheWire(ctx, t, w, 5)
	if got := d.counted(); !slices.Equal(got, []int{1, 1, 1, 1, 1}) {
		t.Fatalf("appends per stream message %v, want five of one", got)
	}
}

func TestStreamMessagesKeepACoalescedMessageUnderItsByteBound(t *testing.T) {
	big := strings.Repeat("x", coalescedMessageBytes/3)
	var batch []*Pending
	for i := 0; i < 7; i++ {
		rec := &pb.Record{Seq: uint64(i + 2), Payload: &pb.Record_State{State: &pb.StatePayload{Namespace: "n", Key: "k", Type: "t", Data: []byte(big)}}}
		batch = append(batch, &Pending{req: &pb.AppendRequest{RunId: "r", LeaseId: "l", Records: []*pb.Record{rec}}})
	}
	var sizes []int
	for _, m := range streamMessages(batch, true) {
		if m.GetAppend() != nil {
			sizes = append(sizes, 1)
		} else {
			sizes = append(sizes, len(m.GetAppends()))
		}
	}
	// three thirds of the bound (plus their framing) do not fit in one message
	if !slices.Equal(sizes, []int{2, 2, 2, 1}) {
		t.Fatalf("appends per message %v, want [2 2 2 1]", sizes)
	}
}
