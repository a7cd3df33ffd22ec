// Command agent is the Go side of the cross-language end-to-end test
// (tests/integration/client/test_polyglot.py) and a small demo of the client.
//
//	agent -socket S -run R start    start R, journal an assistant turn with two tool calls
//	                                and the first call's result, print READY, then block
//	                                (the test kills it with SIGKILL: no Close, no goodbye)
//	agent -socket S -run R errors   reach locked, fingerprint_drift and invalid_record
//	                                against the daemon; print one JSON line per error
//
// Timestamps come from a fixed clock (one second per stamp from -t0), so the journal is
// byte-identical run after run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	journald "github.com/journald/journald/clients/go"
	pb "github.com/journald/journald/clients/go/journaldv1"
	"go.opentelemetry.io/otel/trace"
)

// The agents of the polyglot test share one W3C trace (each writes under its own span):
// records carry it, and every RPC sends it as `traceparent`.
const (
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanID  = "00f067aa0ba902b7"
)

func withSpan(ctx context.Context) context.Context {
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex(spanID)
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
}

// Config is the agent configuration shared by every language in the polyglot test: the
// TypeScript agent computes the same fingerprint from the same values.
var config = journald.Config{
	Provider:      "anthropic",
	Model:         "claude-test-1",
	SystemPrompt:  []string{"You are a careful research agent.", "Answer with sources: <cite>, & never guess."},
	Tools:         []any{weatherTool, lookupTool},
	Thinking:      "off",
	MaxTokens:     4096,
	MaxIterations: 8,
}

var weatherTool = map[string]any{
	"name":        "get_weather",
	"description": "Weather for a city (°C)",
	"input_schema": map[string]any{
		"type":       "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required":   []any{"city"},
	},
}

var lookupTool = map[string]any{
	"name":        "lookup",
	"description": "Look a term up",
	"input_schema": map[string]any{
		"type":       "object",
		"properties": map[string]any{"term": map[string]any{"type": "string"}},
		"required":   []any{"term"},
	},
}

func fixedClock(t0 time.Time) func() time.Time {
	next := t0
	return func() time.Time {
		now := next
		next = next.Add(time.Second)
		return now
	}
}

func main() {
	socket := flag.String("socket", "", "daemon socket (default: the daemon's rules)")
	runID := flag.String("run", "polyglot-1", "run id")
	t0 := flag.String("t0", "2026-11-30T12:00:00Z", "first timestamp of the fixed clock")
	flag.Parse()
	start, err := time.Parse(time.RFC3339, *t0)
	if err != nil {
		fail(err)
	}
	opts := []journald.Option{journald.WithClock(fixedClock(start)), journald.WithClientName("go-agent")}
	if *socket != "" {
		opts = append(opts, journald.WithSocket(*socket))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := journald.Connect(ctx, opts...)
	if err != nil {
		fail(err)
	}
	switch flag.Arg(0) {
	case "start":
		err = startAndHang(withSpan(ctx), client, *runID)
	case "errors":
		err = reachErrors(ctx, client, *runID)
	default:
		err = fmt.Errorf("usage: agent [-socket S] [-run R] start|errors")
	}
	if err != nil {
		fail(err)
	}
}

func startAndHang(ctx context.Context, client *journald.Client, runID string) error {
	fp, err := journald.ComputeFingerprint(config)
	if err != nil {
		return err
	}
	run, err := client.Start(ctx, journald.StartOptions{
		RunID:       runID,
		Fingerprint: fp,
		Prompt:      []journald.Block{journald.Text("Compare the weather in Paris and Zürich, then define föhn.")},
		Labels:      map[string]string{"suite": "polyglot", "writer": "go"},
	})
	if err != nil {
		return err
	}
	if _, err := run.AppendAssistant(ctx, journald.Assistant{
		Content: []journald.Block{
			journald.Text("I'll check both cities."),
			journald.ToolUse("toolu_paris", "get_weather", `{"city": "Paris"}`),
			journald.ToolUse("toolu_zurich", "get_weather", `{"city": "Zürich"}`),
		},
		StopReason: "tool_use",
		Usage:      journald.Usage{InputTokens: 120, OutputTokens: 40, CacheReadTokens: 100},
	}); err != nil {
		return err
	}
	if _, err := run.AppendToolResult(ctx, journald.ToolResult{
		ToolUseID: "toolu_paris",
		Content:   []journald.Block{journald.Text("Paris: 14 °C, light rain")},
	}); err != nil {
		return err
	}
	fmt.Printf("READY %d\n", run.LastSeq())
	// Hold the lease until killed. The daemon releases it when this process dies.
	select {}
}

type outcome struct {
	Case    string            `json:"case"`
	Code    string            `json:"code"`
	Typed   bool              `json:"typed"`
	Message string            `json:"message"`
	Diff    []string          `json:"diff,omitempty"`
	Meta    map[string]string `json:"metadata,omitempty"`
}

func report(name string, err error, sentinel *journald.Error) {
	var jerr *journald.Error
	o := outcome{Case: name}
	if errors.As(err, &jerr) {
		o.Code, o.Message, o.Diff, o.Meta = jerr.Code, jerr.Message, jerr.Diff, jerr.Metadata
	} else if err != nil {
		o.Message = err.Error()
	}
	o.Typed = errors.Is(err, sentinel)
	line, _ := json.Marshal(o)
	fmt.Println(string(line))
}

// reachErrors provokes three typed errors against the real daemon.
func reachErrors(ctx context.Context, client *journald.Client, runID string) error {
	fp, err := journald.ComputeFingerprint(config)
	if err != nil {
		return err
	}
	holder, err := client.Start(ctx, journald.StartOptions{RunID: runID, Fingerprint: fp,
		Prompt: []journald.Block{journald.Text("errors")}})
	if err != nil {
		return err
	}
	// locked: a second writer while the first holds the lease.
	_, err = client.Resume(ctx, journald.ResumeOptions{RunID: runID, Fingerprint: fp})
	report("locked", err, journald.ErrLocked)
	// invalid_record: a record with no payload is refused, nothing written.
	_, err = holder.AppendRaw(ctx, &pb.Record{})
	report("invalid_record", err, journald.ErrInvalidRecord)
	if err := holder.Close(); err != nil {
		return err
	}
	// fingerprint_drift: resume with another model and system prompt.
	drifted := config
	drifted.Model = "claude-test-2"
	drifted.SystemPrompt = []string{"You are somebody else."}
	fp2, err := journald.ComputeFingerprint(drifted)
	if err != nil {
		return err
	}
	// Right after Close the daemon may not have seen the cancel yet: the client retries a
	// `locked` that names this process itself, so this gets the drift error, not locked.
	_, err = client.Resume(ctx, journald.ResumeOptions{RunID: runID, Fingerprint: fp2})
	report("fingerprint_drift", err, journald.ErrFingerprintDrift)
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "agent:", err)
	os.Exit(1)
}
