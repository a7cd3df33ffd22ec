package journald

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
)

// A record the daemon refuses arrives as ErrInvalidRecord whose Metadata names the field, the
// seq and the run (docs/protocol.md#error-codes), and the run writes on at the same seq.
func TestARefusedRecordCarriesItsFieldSeqAndRunIDAndTheRunWritesOn(t *testing.T) {
	sock := liveSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, run := startRun(ctx, t, sock, uniqueID("go-refused"))
	for _, c := range []struct{ content, says string }{
		{`[{"type":"text","text":"a","text":"b"}]`, "the key 'text' appears twice"},
		{`[{"type":"text","text":"\ud800"}]`, "lone UTF-16 surrogate"},
		{`[{"type":"text","text":"a","n":NaN}]`, "NaN is not a JSON number"},
	} {
		rec := &pb.Record{Payload: &pb.Record_User{User: &pb.UserPayload{ContentJson: []byte(c.content)}}}
		_, err := run.AppendRaw(ctx, rec)
		var jerr *Error
		if !errors.As(err, &jerr) || !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("%s: got %v, want invalid_record", c.content, err)
		}
		want := map[string]string{"field": "user.content_json", "seq": "2", "run_id": run.ID()}
		for k, v := range want {
			if jerr.Metadata[k] != v {
				t.Fatalf("%s: metadata %v, want %s=%s", c.content, jerr.Metadata, k, v)
			}
		}
		if !strings.Contains(jerr.Message, c.says) {
			t.Fatalf("%s: message %q does not say %q", c.content, jerr.Message, c.says)
		}
	}
	ack, err := run.AppendUser(ctx, []Block{Text("the run writes on")})
	if err != nil || ack.GetSeq() != 2 {
		t.Fatalf("append after the refusals: %v, %v", ack, err)
	}
}

// A tool result over --max-record-bytes is refused with advice that names AsAttachment; the
// same result with AsAttachment is stored as an attachment and journaled as its block
// (docs/protocol.md#large-tool-results).
func TestAToolResultOverTheRecordLimitIsRefusedAndGoesInAsAnAttachment(t *testing.T) {
	sock := liveSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, run := startRun(ctx, t, sock, uniqueID("go-big-result"))
	call := ToolUse("read_1", "read_file", `{"path":"big.log"}`)
	if _, err := run.AppendAssistant(ctx, Assistant{Content: []Block{call}, StopReason: "tool_use"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("log line\n", 5*1024*1024/9)
	_, err := run.AppendToolResult(ctx, ToolResult{ToolUseID: "read_1", Content: []Block{Text(big)}})
	var jerr *Error
	if !errors.As(err, &jerr) || !errors.Is(err, ErrInvalidRecord) || !strings.Contains(jerr.Message, "as_attachment") {
		t.Fatalf("an oversized result: got %v, want invalid_record advising as_attachment", err)
	}
	ack, err := run.AppendToolResult(ctx, ToolResult{ToolUseID: "read_1", Content: []Block{Text(big)}, AsAttachment: true})
	if err != nil || ack.GetSeq() != 3 {
		t.Fatalf("as an attachment: %v, %v", ack, err)
	}
	recs, err := c.Load(ctx, run.ID(), 3)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ParseJSON(recs[0].GetToolResult().GetContentJson())
	if err != nil {
		t.Fatal(err)
	}
	block := parsed.([]any)[0].(map[string]any)
	if block["type"] != "attachment" || block["media_type"] != ResultTextType {
		t.Fatalf("the journaled result is %v, want one attachment block", block)
	}
	data, err := c.GetAttachment(ctx, run.ID(), block["sha256"].(string))
	if err != nil || string(data) != big {
		t.Fatalf("the attachment holds %d bytes (%v), want the %d of the result", len(data), err, len(big))
	}
}
