package journald

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
)

// nextChange reads one notice, failing the test when the stream closes or ctx ends first.
func nextChange(ctx context.Context, t *testing.T, l *ListChanges, what string) ListChange {
	t.Helper()
	select {
	case n, ok := <-l.Changes():
		if !ok {
			t.Fatalf("%s: the stream closed (%v)", what, l.Err())
		}
		return n
	case <-ctx.Done():
		t.Fatalf("%s: no notice before the deadline", what)
	}
	return ListChange{}
}

// untilNamed reads notices until one names runID (every notice is bounded by ctx).
func untilNamed(ctx context.Context, t *testing.T, l *ListChanges, runID, what string) {
	t.Helper()
	for {
		n := nextChange(ctx, t, l, what)
		if n.Ready {
			t.Fatalf("%s: a second ready notice %+v", what, n)
		}
		if n.All || slices.Contains(n.RunIDs, runID) {
			return
		}
	}
}

// TestListChangesNamesARunWrittenAndDeletedAndClosesOnCancel needs a live daemon:
// JOURNALD_TEST_SOCKET names its socket (tests/integration/client/test_polyglot.py sets it).
// The first notice is ready; a run created, appended to and deleted is named; cancelling the
// context closes Changes with no error.
func TestListChangesNamesARunWrittenAndDeletedAndClosesOnCancel(t *testing.T) {
	sock := os.Getenv("JOURNALD_TEST_SOCKET")
	if sock == "" {
		t.Skip("JOURNALD_TEST_SOCKET is not set (needs a running daemon)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Connect(ctx, WithSocket(sock), WithClientName("go-list-changes"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	follow, stop := context.WithCancel(ctx)
	defer stop()
	changes, err := c.ListChanges(follow)
	if err != nil {
		t.Fatal(err)
	}
	if first := nextChange(ctx, t, changes, "the first notice"); !first.Ready || len(first.RunIDs) != 0 {
		t.Fatalf("first notice %+v, want ready with no run ids", first)
	}
	fp, err := ComputeFingerprint(Config{
		Provider: "anthropic", Model: "claude-test", SystemPrompt: []string{"list changes"},
		MaxTokens: 16, MaxIterations: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	runID := fmt.Sprintf("go-changes-%d", time.Now().UnixNano())
	run, err := c.Start(ctx, StartOptions{RunID: runID, Fingerprint: fp, Prompt: []Block{Text("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.AppendUser(ctx, []Block{Text("more")}); err != nil {
		t.Fatal(err)
	}
	if err := run.Close(); err != nil {
		t.Fatal(err)
	}
	untilNamed(ctx, t, changes, runID, "the run written")
	if _, err := c.RPC().Delete(ctx, &pb.DeleteRequest{RunId: runID}); err != nil {
		t.Fatal(err)
	}
	untilNamed(ctx, t, changes, runID, "the run deleted")

	stop()
	for {
		select {
		case _, ok := <-changes.Changes():
			if !ok {
				if changes.Err() != nil {
					t.Fatalf("closed on cancel with %v, want nil", changes.Err())
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("Changes stayed open after the context was cancelled")
		}
	}
}

// TestListChangesFromADaemonWithoutTheRPCClosesWithUnimplemented: a daemon older than
// ListChanges (a stub here that implements nothing) closes Changes at once, and Err is the
// mapped *Error a caller tells apart to fall back to polling List.
func TestListChangesFromADaemonWithoutTheRPCClosesWithUnimplemented(t *testing.T) {
	sock := serveOnUnixSocket(t, "jd-old", &pb.UnimplementedJournalServiceServer{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, WithSocket(sock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	changes, err := c.ListChanges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case n, ok := <-changes.Changes():
		if ok {
			t.Fatalf("a notice %+v from a daemon without ListChanges", n)
		}
	case <-ctx.Done():
		t.Fatal("Changes stayed open")
	}
	if code := ErrorCode(changes.Err()); code != "unimplemented" {
		t.Fatalf("Err() = %v (code %q), want unimplemented", changes.Err(), code)
	}
}
