// Command quickstart is the README example: start a run, journal one tool call, crash,
// resume, finish.
//
//	journald serve &                       # the daemon (default socket)
//	go run ./examples/quickstart start     # journals the call, then dies with SIGKILL
//	go run ./examples/quickstart resume    # runs the unanswered call, finishes the run
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"syscall"
	"time"

	journald "github.com/journald/journald/clients/go"
	pb "github.com/journald/journald/clients/go/journaldv1"
)

// The agent's configuration. Only its hashes reach the daemon.
var config = journald.Config{
	Provider:     "anthropic",
	Model:        "claude-sonnet-4-5",
	SystemPrompt: []string{"You are a helpful assistant."},
	Tools: []any{map[string]any{
		"name":         "add",
		"description":  "Add two integers",
		"input_schema": map[string]any{"type": "object"},
	}},
	MaxTokens:     1024,
	MaxIterations: 10,
}

func main() {
	socket := flag.String("socket", "", "daemon socket (default: $JOURNALD_SOCKET, $XDG_RUNTIME_DIR/journald/journald.sock, /tmp/journald-<uid>/journald.sock)")
	runID := flag.String("run", "quickstart", "run id")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var opts []journald.Option
	if *socket != "" {
		opts = append(opts, journald.WithSocket(*socket))
	}
	client, err := journald.Connect(ctx, append(opts, journald.WithClientName("quickstart"))...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	fp, err := journald.ComputeFingerprint(config)
	if err != nil {
		log.Fatal(err)
	}

	switch flag.Arg(0) {
	case "start":
		run, err := client.Start(ctx, journald.StartOptions{
			RunID:       *runID,
			Fingerprint: fp,
			Prompt:      []journald.Block{journald.Text("What is 2 + 3?")},
		})
		if err != nil {
			log.Fatal(err)
		}
		// The model asked for a tool: journal its turn before running anything.
		if _, err := run.AppendAssistant(ctx, journald.Assistant{
			Content:    []journald.Block{journald.ToolUse("toolu_1", "add", `{"a": 2, "b": 3}`)},
			StopReason: "tool_use",
			Usage:      journald.Usage{InputTokens: 25, OutputTokens: 12},
		}); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("journaled seq %d; crashing before the tool runs\n", run.LastSeq())
		// A real crash: no Close, no deferred calls. The daemon releases the lease at once.
		_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)

	case "resume":
		run, err := client.Resume(ctx, journald.ResumeOptions{RunID: *runID, Fingerprint: fp})
		if err != nil {
			log.Fatal(err) // e.g. errors.Is(err, journald.ErrLocked), journald.ErrFingerprintDrift
		}
		defer run.Close()
		for _, w := range run.Warnings() {
			fmt.Printf("warning %s: %s\n", w.Code, w.Message)
		}
		// Only the calls the crash left unanswered run again.
		if _, err := run.CompletePending(ctx, func(ctx context.Context, call *pb.ToolCall) ([]journald.Block, bool, error) {
			fmt.Printf("running %s(%s)\n", call.Name, call.InputJson)
			return []journald.Block{journald.Text("5")}, false, nil
		}); err != nil {
			log.Fatal(err)
		}
		if _, err := run.AppendAssistant(ctx, journald.Assistant{
			Content:    []journald.Block{journald.Text("2 + 3 = 5")},
			StopReason: "end_turn",
		}); err != nil {
			log.Fatal(err)
		}
		if _, err := run.AppendTerminal(ctx, "completed", ""); err != nil {
			log.Fatal(err)
		}
		folded, err := run.Fold(ctx, false)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("done: %d messages, %d records, last hash %s\n",
			len(folded.State.Messages), folded.State.LastSeq, folded.State.LastHash)

	default:
		log.Fatal("usage: quickstart [-socket PATH] [-run ID] start|resume")
	}
}
