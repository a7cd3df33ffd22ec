package journald

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The pipelined writer's tests need a live daemon: JOURNALD_TEST_SOCKET names its socket
// (tests/integration/client/test_polyglot.py sets it and runs them).

func liveSocket(t *testing.T) string {
	t.Helper()
	sock := os.Getenv("JOURNALD_TEST_SOCKET")
	if sock == "" {
		t.Skip("JOURNALD_TEST_SOCKET is not set (needs a running daemon)")
	}
	return sock
}

// startRun starts a run on its own connection whose clock ticks one second per stamp from
// a fixed instant, so two runs given the same entries store the same timestamps.
func startRun(ctx context.Context, t *testing.T, sock, runID string) (*Client, *Run) {
	t.Helper()
	next := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { now := next; next = next.Add(time.Second); return now }
	c, err := Connect(ctx, WithSocket(sock), WithClientName("go-pipelined"), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fp, err := ComputeFingerprint(Config{
		Provider: "anthropic", Model: "claude-test", SystemPrompt: []string{"pipelined"},
		MaxTokens: 16, MaxIterations: 8,
	})
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Start(ctx, StartOptions{RunID: runID, Fingerprint: fp, Prompt: []Block{Text("go")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	return c, run
}

func uniqueID(prefix string) string { return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()) }

// writerOn starts a run (see startRun) with a PipelinedWriter of the given window on it,
// both closed when the test ends; ctx bounds the test.
func writerOn(t *testing.T, prefix string, window int) (context.Context, *Client, *Run, *PipelinedWriter) {
	t.Helper()
	sock := liveSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, run := startRun(ctx, t, sock, uniqueID(prefix))
	w, err := run.Pipelined(ctx, window)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return ctx, c, run, w
}

// sixteenEntries is two tool turns, framework state between them, a final answer and the
// terminal record: 16 records.
func sixteenEntries() []Entry {
	var out []Entry
	turn := func(n int, name string) {
		var calls []Block
		for i := 0; i < n; i++ {
			calls = append(calls, ToolUse(fmt.Sprintf("toolu_%s_%d", name, i), "lookup", fmt.Sprintf(`{"term": "%s %d"}`, name, i)))
		}
		out = append(out, Assistant{Content: calls, StopReason: "tool_use", Usage: Usage{InputTokens: 10, OutputTokens: uint64(n)}})
		for i := 0; i < n; i++ {
			out = append(out, ToolResult{ToolUseID: fmt.Sprintf("toolu_%s_%d", name, i), Content: []Block{Text(fmt.Sprintf("%s result %d", name, i))}})
		}
	}
	turn(5, "a")
	out = append(out, State{Namespace: "agent", Key: "step", Type: "text/plain", Data: []byte("one")},
		State{Namespace: "agent", Key: "notes", Type: "text/plain", Data: []byte("n")})
	turn(3, "b")
	out = append(out, State{Namespace: "agent", Key: "step", Deleted: true},
		State{Namespace: "agent", Key: "step", Type: "text/plain", Data: []byte("two")},
		Assistant{Content: []Block{Text("done")}, StopReason: "end_turn"},
		Terminal{Reason: "completed"})
	return out
}

func TestSixteenPipelinedAppendsAreAckedInOrderAndFoldLikeUnaryAppends(t *testing.T) {
	sock := liveSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	entries := sixteenEntries()
	if len(entries) != 16 {
		t.Fatalf("%d entries, want 16", len(entries))
	}

	uc, unary := startRun(ctx, t, sock, uniqueID("go-unary"))
	for i, e := range entries {
		if _, err := unary.appendEntry(ctx, e); err != nil {
			t.Fatalf("unary append %d: %v", i, err)
		}
	}

	pc, piped := startRun(ctx, t, sock, uniqueID("go-piped"))
	w, err := piped.Pipelined(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	pending := make([]*Pending, 0, len(entries))
	for i, e := range entries { // all 16 go out before any answer is waited for
		p, err := w.Append(ctx, e)
		if err != nil {
			t.Fatalf("pipelined append %d: %v", i, err)
		}
		if p.Seq() != uint64(i+2) {
			t.Fatalf("append %d got seq %d, want %d (submission order)", i, p.Seq(), i+2)
		}
		pending = append(pending, p)
	}
	if _, err := pending[15].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for i, p := range pending { // acks settle in order: the last one done means all are
		select {
		case <-p.Done():
		default:
			t.Fatalf("append %d is not settled although the last one is", i)
		}
		acks, err := p.Wait(ctx)
		if err != nil || len(acks) != 1 || acks[0].GetSeq() != uint64(i+2) || acks[0].GetDuplicate() {
			t.Fatalf("append %d: acks %v, err %v", i, acks, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if piped.LastSeq() != 17 || piped.NextIteration() != unary.NextIteration() || len(piped.Unanswered()) != 0 {
		t.Fatalf("run view: last seq %d, next iteration %d (unary %d), unanswered %v",
			piped.LastSeq(), piped.NextIteration(), unary.NextIteration(), piped.Unanswered())
	}

	want, err := uc.Fold(ctx, unary.ID(), true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pc.Fold(ctx, piped.ID(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*pb.FoldResponse{want, got} { // the run id is in the meta record, so in every hash
		f.State.RunId, f.State.LastHash = "", ""
	}
	if !proto.Equal(got, want) {
		t.Fatalf("pipelined fold differs from the unary one:\n%s\nwant\n%s", protojson.Format(got), protojson.Format(want))
	}
}

func TestAnAgentWaitsForItsAssistantAckRunsToolsAndStreamsTheirResultsBehindIt(t *testing.T) {
	ctx, c, run, w := writerOn(t, "go-agent", 16)
	ids := []string{"toolu_x", "toolu_y", "toolu_z"}
	var calls []Block
	for _, id := range ids {
		calls = append(calls, ToolUse(id, "lookup", `{"term": "`+id+`"}`))
	}
	turn, err := w.Append(ctx, Assistant{Content: calls, StopReason: "tool_use"})
	if err != nil {
		t.Fatal(err)
	}
	acks, err := turn.Wait(ctx) // durable before any tool runs
	if err != nil {
		t.Fatal(err)
	}
	stored, err := c.Load(ctx, run.ID(), acks[0].GetSeq())
	if err != nil || len(stored) != 1 || stored[0].GetAssistant() == nil || stored[0].GetHash() != acks[0].GetHash() {
		t.Fatalf("the acked assistant turn is not what the daemon stores: %v, %v", stored, err)
	}
	if got := run.Unanswered(); len(got) != 3 {
		t.Fatalf("unanswered after the assistant ack: %v", got)
	}
	if _, err := run.AppendState(ctx, "agent", "k", "text/plain", []byte("v")); !errors.Is(err, ErrInvalidRequest) ||
		!strings.Contains(err.Error(), "PipelinedWriter is open") {
		t.Fatalf("a unary append beside the writer: %v, want a refusal", err)
	}

	// the tools run side by side; each result is streamed as soon as its tool finishes
	var wg sync.WaitGroup
	results := make(chan *Pending, len(ids))
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := w.Append(ctx, ToolResult{ToolUseID: id, Content: []Block{Text("found " + id)}})
			if err != nil {
				t.Error(err)
				return
			}
			results <- p
		}()
	}
	wg.Wait()
	close(results)
	seqs := map[uint64]bool{}
	for p := range results {
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		seqs[p.Seq()] = true
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 3 || !seqs[3] || !seqs[4] || !seqs[5] || len(run.Unanswered()) != 0 {
		t.Fatalf("result seqs %v, unanswered %v", seqs, run.Unanswered())
	}
	final, err := w.Append(ctx, Assistant{Content: []Block{Text("all found")}, StopReason: "end_turn"}, Terminal{Reason: "completed"})
	if err != nil {
		t.Fatal(err)
	}
	if acks, err := final.Wait(ctx); err != nil || len(acks) != 2 || acks[1].GetSeq() != 7 {
		t.Fatalf("final batch: %v, %v", acks, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	folded, err := c.Fold(ctx, run.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	st := folded.GetState()
	if st.GetPending() != nil || st.GetTerminal().GetReason() != "completed" || st.GetLastSeq() != 7 || st.GetNextIteration() != 3 {
		t.Fatalf("folded: pending %v terminal %v last seq %d next iteration %d",
			st.GetPending(), st.GetTerminal(), st.GetLastSeq(), st.GetNextIteration())
	}
}

func TestARefusedAppendFailsItAndTheAppendsBehindItWhileEarlierOnesStayStored(t *testing.T) {
	ctx, c, run, w := writerOn(t, "go-refused", 8)
	// hold the writer's view of the stream's end until every append below is submitted, so
	// the two behind the refused one are in flight when it fails (not refused up front)
	release := make(chan struct{})
	w.beforeEnd = func() { <-release }
	entries := []Entry{
		Assistant{Content: []Block{ToolUse("toolu_1", "lookup", `{}`), ToolUse("toolu_2", "lookup", `{}`)}, StopReason: "tool_use"},
		ToolResult{ToolUseID: "toolu_1", Content: []Block{Text("one")}},
		State{Namespace: "agent", Key: "k", Type: "text/plain", Data: []byte("v")},
		ToolResult{ToolUseID: "toolu_unknown", Content: []Block{Text("?")}}, // refused: no such call
		ToolResult{ToolUseID: "toolu_2", Content: []Block{Text("two")}},
		State{Namespace: "agent", Key: "k", Type: "text/plain", Data: []byte("w")},
	}
	var pending []*Pending
	for i, e := range entries {
		p, err := w.Append(ctx, e)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		pending = append(pending, p)
	}
	close(release)
	for i, p := range pending[:3] {
		if acks, err := p.Wait(ctx); err != nil || acks[0].GetSeq() != uint64(i+2) {
			t.Fatalf("append %d before the refused one: %v, %v", i, acks, err)
		}
	}
	_, refused := pending[3].Wait(ctx)
	var jerr *Error
	if !errors.Is(refused, ErrInvalidRecord) || !errors.As(refused, &jerr) || errors.Is(refused, ErrNotWritten) {
		t.Fatalf("the refused append: %v, want invalid_record", refused)
	}
	for i, p := range pending[4:] {
		if _, err := p.Wait(ctx); !errors.Is(err, ErrNotWritten) || !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("append %d behind the refused one: %v, want ErrNotWritten wrapping invalid_record", i+4, err)
		}
	}
	// the next Append returns the failure, submitting nothing; the one after goes on from
	// the last acknowledged seq
	if _, err := w.Append(ctx, ToolResult{ToolUseID: "toolu_2"}); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("the Append after the failure: %v, want the invalid_record again", err)
	}
	if run.LastSeq() != 4 {
		t.Fatalf("last seq %d after the refusal, want 4", run.LastSeq())
	}
	p, err := w.Append(ctx, ToolResult{ToolUseID: "toolu_2", Content: []Block{Text("two")}})
	if err != nil {
		t.Fatal(err)
	}
	if acks, err := p.Wait(ctx); err != nil || acks[0].GetSeq() != 5 {
		t.Fatalf("the append after the resync: %v, %v", acks, err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := c.Load(ctx, run.ID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, rec := range stored {
		kinds = append(kinds, strings.TrimPrefix(rec.GetType(), "journald.v1.record."))
	}
	if got := strings.Join(kinds, ","); got != "meta,assistant,tool_result,state,tool_result" {
		t.Fatalf("stored records: %s", got)
	}
	if stored[4].GetToolResult().GetToolUseId() != "toolu_2" {
		t.Fatalf("seq 5 answers %q", stored[4].GetToolResult().GetToolUseId())
	}
}

func TestAppendWaitsWhileTheWindowIsFullAndHonoursItsContext(t *testing.T) {
	ctx, _, _, w := writerOn(t, "go-window", 1)
	release := make(chan struct{})
	w.beforeEnd = func() { <-release }
	// seq 3 while the run is at 1: the daemon waits out its gap wait, then refuses it with
	// seq_gap; until the test lets the writer see that, the one slot stays taken
	gap, err := w.Append(ctx, Raw{Record: &pb.Record{Seq: 3, Payload: &pb.Record_User{User: &pb.UserPayload{ContentJson: []byte(`[]`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if _, err := w.Append(short, State{Namespace: "agent", Key: "k", Type: "text/plain"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append with the window full: %v, want the ctx's deadline", err)
	}
	close(release)
	if _, err := gap.Wait(ctx); !errors.Is(err, ErrSeqGap) {
		t.Fatalf("the append past a gap: %v, want seq_gap", err)
	}
	if err := w.Flush(ctx); !errors.Is(err, ErrSeqGap) {
		t.Fatalf("Flush after the failure: %v, want the seq_gap", err)
	}
	p, err := w.Append(ctx, State{Namespace: "agent", Key: "k", Type: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	if acks, err := p.Wait(ctx); err != nil || acks[0].GetSeq() != 2 {
		t.Fatalf("after the resync: %v, %v", acks, err)
	}
}

func TestCancellingTheWritersContextFailsItsAppendsInFlightAndTheRunWritesOnAfterClose(t *testing.T) {
	sock := liveSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, run := startRun(ctx, t, sock, uniqueID("go-cancel"))
	wctx, stop := context.WithCancel(ctx)
	w, err := run.Pipelined(wctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	// seq 3 while the run is at 1: the daemon holds it for its gap wait, so it is in flight
	gap, err := w.Append(ctx, Raw{Record: &pb.Record{Seq: 3, Payload: &pb.Record_User{User: &pb.UserPayload{ContentJson: []byte(`[]`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := gap.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("the append in flight: %v, want the writer's cancellation", err)
	}
	if _, err := w.Append(ctx, State{Namespace: "agent", Key: "k"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append after the cancellation: %v", err)
	}
	if err := w.Close(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	ack, err := run.AppendState(ctx, "agent", "k", "text/plain", []byte("v"))
	if err != nil || ack.GetSeq() != 2 {
		t.Fatalf("a unary append after Close: %v, %v", ack, err)
	}
}
