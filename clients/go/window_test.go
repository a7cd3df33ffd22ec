package journald

import (
	"context"
	"os"
	"testing"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/protobuf/proto"
)

// pagedRaw reads a whole message list through the raw History stub, 200 at a time.
func pagedRaw(ctx context.Context, t *testing.T, c *Client, runID string, view pb.HistoryView) []*pb.Message {
	t.Helper()
	var out []*pb.Message
	for offset := uint64(0); ; {
		p, err := c.RPC().History(ctx, &pb.HistoryRequest{RunId: runID, Offset: offset, Limit: 200, View: view})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.GetMessages()...)
		if p.GetNextOffset() >= p.GetTotal() {
			return out
		}
		offset = p.GetNextOffset()
	}
}

func sameMessages(t *testing.T, what string, got, want []*pb.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: message %d differs", what, i)
		}
	}
}

// TestFoldAndResumeOfARunLongerThanTheWindowHoldEveryMessage needs a live daemon and a run
// longer than the window whose state is over the daemon's max message size:
// JOURNALD_TEST_SOCKET and JOURNALD_TEST_LONG_RUN (tests/integration/client/test_polyglot.py).
func TestFoldAndResumeOfARunLongerThanTheWindowHoldEveryMessage(t *testing.T) {
	sock, runID := os.Getenv("JOURNALD_TEST_SOCKET"), os.Getenv("JOURNALD_TEST_LONG_RUN")
	if sock == "" || runID == "" {
		t.Skip("JOURNALD_TEST_SOCKET / JOURNALD_TEST_LONG_RUN are not set (needs a running daemon)")
	}
	// a bound, not a speed: paging a long run three ways took over 60 s on a loaded machine
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	c, err := Connect(ctx, WithSocket(sock), WithClientName("go-window"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := pagedRaw(ctx, t, c, runID, pb.HistoryView_HISTORY_VIEW_STATE)
	wantGoverned := pagedRaw(ctx, t, c, runID, pb.HistoryView_HISTORY_VIEW_GOVERNED)
	if len(want) <= 2*DefaultMessageWindow {
		t.Fatalf("run %s has %d messages: not longer than the window", runID, len(want))
	}
	folded, err := c.Fold(ctx, runID, true)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, "Fold state", folded.GetState().GetMessages(), want)
	sameMessages(t, "Fold governed", folded.GetGovernedMessages(), wantGoverned)
	if folded.GetState().GetMessagesOffset() != 0 || folded.GetState().GetMessagesTotal() != uint64(len(want)) {
		t.Fatalf("offset %d total %d", folded.GetState().GetMessagesOffset(), folded.GetState().GetMessagesTotal())
	}
	run, err := c.Resume(ctx, ResumeOptions{RunID: runID, Fingerprint: folded.GetState().GetFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	sameMessages(t, "Resume state", run.State().GetMessages(), want)
	if got := run.Unanswered(); len(got) != 1 || got[0].GetId() != "open" {
		t.Fatalf("unanswered %v", got)
	}
	// window 0 asks for every message at once: over the daemon's cap, a typed error
	all, err := Connect(ctx, WithSocket(sock), WithMessageWindow(0))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if _, err := all.Fold(ctx, runID, false); ErrorCode(err) != CodeResponseTooLarge {
		t.Fatalf("Fold with window 0: %v, want response_too_large", err)
	}
}
