package journald

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestManyRunsHeldOverOneLeaseSetAppendReleaseAndReopenAtOnce needs a live daemon:
// JOURNALD_TEST_SOCKET names its socket (tests/integration/client/test_polyglot.py sets it).
// Eight runs share one Leases stream: each appends, a refusal of one acquire leaves the others
// held, a closed run is open to anyone at once, and closing the set frees every run.
func TestManyRunsHeldOverOneLeaseSetAppendReleaseAndReopenAtOnce(t *testing.T) {
	sock := os.Getenv("JOURNALD_TEST_SOCKET")
	if sock == "" {
		t.Skip("JOURNALD_TEST_SOCKET is not set (needs a running daemon)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Connect(ctx, WithSocket(sock), WithClientName("go-lease-set"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fp, err := ComputeFingerprint(Config{
		Provider: "anthropic", Model: "claude-test", SystemPrompt: []string{"lease set"},
		MaxTokens: 16, MaxIterations: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	set := c.LeaseSet()
	base := fmt.Sprintf("go-set-%d", time.Now().UnixNano())
	var runs []*Run
	for i := 0; i < 8; i++ {
		run, err := set.Start(ctx, StartOptions{
			RunID: fmt.Sprintf("%s-%d", base, i), Fingerprint: fp, Prompt: []Block{Text("hi")},
		})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		runs = append(runs, run)
	}
	for i, run := range runs {
		if _, err := run.AppendUser(ctx, []Block{Text(fmt.Sprintf("to run %d", i))}); err != nil {
			t.Fatalf("append to run %d: %v", i, err)
		}
	}
	// a second acquire of a held run is refused, typed, and holds nothing
	other := c.LeaseSet()
	defer other.Close()
	if _, err := other.Resume(ctx, ResumeOptions{RunID: runs[0].ID(), Fingerprint: fp}); !errors.Is(err, ErrLocked) {
		t.Fatalf("resuming a held run through another set: %v, want locked", err)
	}
	if _, err := set.Resume(ctx, ResumeOptions{RunID: base + "-missing", Fingerprint: fp}); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("resuming a missing run: %v, want session_not_found", err)
	}
	if _, err := runs[1].AppendUser(ctx, []Block{Text("still held")}); err != nil {
		t.Fatalf("a refusal on the stream ended another lease: %v", err)
	}
	// a closed run is released over the stream and open to anyone at once
	runs[2].Close()
	if got := runs[2].EndReason().GetReason(); got != "released" {
		t.Fatalf("closed run ended with %q, want released", got)
	}
	again, err := c.Resume(ctx, ResumeOptions{RunID: runs[2].ID(), Fingerprint: fp})
	if err != nil {
		t.Fatalf("re-open of a released run: %v", err)
	}
	again.Close()
	if n := len(set.Runs()); n != 7 {
		t.Fatalf("the set holds %d runs, want 7", n)
	}
	// closing the set ends every lease; each run can be opened again at once
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	for i, run := range runs {
		select {
		case <-run.Ended():
		default:
			t.Fatalf("run %d still held after the set closed", i)
		}
	}
	for i, run := range runs {
		r, err := c.Resume(ctx, ResumeOptions{RunID: run.ID(), Fingerprint: fp})
		if err != nil {
			t.Fatalf("re-open of run %d after the set closed: %v", i, err)
		}
		want := uint64(2)
		if i == 1 {
			want = 3
		}
		if got := r.LastSeq(); got != want {
			t.Fatalf("run %d: last seq %d, want %d", i, got, want)
		}
		r.Close()
	}
	if _, err := set.Start(ctx, StartOptions{RunID: base + "-late", Fingerprint: fp}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("start on a closed set: %v, want lease_lost", err)
	}
}
