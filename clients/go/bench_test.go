package journald

import (
	"context"
	"os"
	"testing"
	"time"
)

// Appends per second of one writer, unary against pipelined, on a live daemon
// (JOURNALD_TEST_SOCKET): go test -run '^$' -bench Appends -benchtime 2000x .
// Never part of the test run; the figures depend on the daemon's backend and disk.

func benchRun(b *testing.B) (context.Context, *Run) {
	sock := os.Getenv("JOURNALD_TEST_SOCKET")
	if sock == "" {
		b.Skip("JOURNALD_TEST_SOCKET is not set (needs a running daemon)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	c, err := Connect(ctx, WithSocket(sock))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	fp, err := ComputeFingerprint(Config{Provider: "anthropic", Model: "claude-test", MaxTokens: 16, MaxIterations: 4})
	if err != nil {
		b.Fatal(err)
	}
	run, err := c.Start(ctx, StartOptions{RunID: uniqueID("go-bench"), Fingerprint: fp})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { run.Close() })
	return ctx, run
}

func BenchmarkUnaryAppends(b *testing.B) {
	ctx, run := benchRun(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := run.AppendState(ctx, "bench", "k", "text/plain", []byte("value")); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPipelinedAppendsWindow16(b *testing.B) {
	ctx, run := benchRun(b)
	w, err := run.Pipelined(ctx, 16)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := w.Append(ctx, State{Namespace: "bench", Key: "k", Type: "text/plain", Data: []byte("value")}); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}
