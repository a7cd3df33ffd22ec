package journald

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestClosingARunLetsItBeReopenedAtOnceTenTimesWithoutLocked needs a live daemon:
// JOURNALD_TEST_SOCKET names its socket (tests/integration/client/test_polyglot.py sets it).
// Run.Close calls Release before cancelling the stream, so a re-open right after never
// sees `locked`; the self-locked retry is off against a daemon that has Release.
func TestClosingARunLetsItBeReopenedAtOnceTenTimesWithoutLocked(t *testing.T) {
	sock := os.Getenv("JOURNALD_TEST_SOCKET")
	if sock == "" {
		t.Skip("JOURNALD_TEST_SOCKET is not set (needs a running daemon)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, WithSocket(sock), WithClientName("go-reopen"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fp, err := ComputeFingerprint(Config{
		Provider: "anthropic", Model: "claude-test", SystemPrompt: []string{"reopen"},
		MaxTokens: 16, MaxIterations: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	runID := fmt.Sprintf("go-reopen-%d", time.Now().UnixNano())
	run, err := c.Start(ctx, StartOptions{RunID: runID, Fingerprint: fp, Prompt: []Block{Text("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	run.Close()
	for i := 0; i < 10; i++ {
		run, err = c.Resume(ctx, ResumeOptions{RunID: runID, Fingerprint: fp})
		if err != nil {
			t.Fatalf("re-open %d: %v", i, err)
		}
		if _, err := run.AppendUser(ctx, []Block{Text(fmt.Sprintf("round %d", i))}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		run.Close()
		if got := run.EndReason().GetReason(); got != "released" {
			t.Fatalf("round %d: the lease ended with %q, not by Release", i, got)
		}
	}
	if releaseUnsupported.Load() {
		t.Fatal("the daemon answered Release with UNIMPLEMENTED")
	}
	folded, err := c.Fold(ctx, runID, false)
	if err != nil {
		t.Fatal(err)
	}
	if folded.GetState().GetLastSeq() != 11 {
		t.Fatalf("last seq %d, want 11", folded.GetState().GetLastSeq())
	}
}
