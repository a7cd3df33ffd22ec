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
