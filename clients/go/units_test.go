package journald

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestDefaultSocketPathFollowsTheDaemonRules(t *testing.T) {
	uid := strconv.Itoa(os.Getuid())
	t.Setenv("JOURNALD_SOCKET", "/x/y.sock")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/7")
	t.Setenv("TMPDIR", "/var/tmp")
	if got := DefaultSocketPath(); got != "/x/y.sock" {
		t.Fatalf("explicit: %s", got)
	}
	t.Setenv("JOURNALD_SOCKET", "")
	if got := DefaultSocketPath(); got != "/run/user/7/journald/journald.sock" {
		t.Fatalf("runtime dir: %s", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got := DefaultSocketPath(); got != "/var/tmp/journald-"+uid+"/journald.sock" {
		t.Fatalf("tmpdir: %s", got)
	}
	t.Setenv("TMPDIR", "")
	if got := DefaultSocketPath(); got != "/tmp/journald-"+uid+"/journald.sock" {
		t.Fatalf("default: %s", got)
	}
	if got, _ := Target("/a/b.sock"); got != "unix:///a/b.sock" {
		t.Fatalf("target: %s", got)
	}
}

func TestTheErrorTrailerPicksTheTypedError(t *testing.T) {
	raw, err := proto.Marshal(&pb.ErrorDetail{
		Code: "fingerprint_drift", Message: "drifted", Metadata: map[string]string{"run_id": "r"},
		Diff: []string{"model: a -> b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := fromGRPC(status.Error(codes.FailedPrecondition, "drifted"), metadata.Pairs(ErrorTrailer, string(raw)))
	if !errors.Is(got, ErrFingerprintDrift) || errors.Is(got, ErrLocked) {
		t.Fatalf("not fingerprint_drift: %v", got)
	}
	var jerr *Error
	if !errors.As(got, &jerr) || jerr.Diff[0] != "model: a -> b" || jerr.Metadata["run_id"] != "r" ||
		jerr.Status != codes.FailedPrecondition {
		t.Fatalf("facts lost: %+v", jerr)
	}
	if len(Sentinels) != len(pb.ErrorCode_name)-1 {
		t.Fatalf("expected one sentinel per ErrorCode but UNSPECIFIED (%d), have %d",
			len(pb.ErrorCode_name)-1, len(Sentinels))
	}
	for name := range pb.ErrorCode_value {
		word := strings.ToLower(strings.TrimPrefix(name, "ERROR_CODE_"))
		if name != "ERROR_CODE_UNSPECIFIED" && Sentinels[word] == nil {
			t.Fatalf("no sentinel for %s (%q)", name, word)
		}
	}
}

func TestAnAttachmentNotFoundTrailerIsItsSentinel(t *testing.T) {
	raw, err := proto.Marshal(&pb.ErrorDetail{Code: CodeAttachmentNotFound, Message: "no such attachment"})
	if err != nil {
		t.Fatal(err)
	}
	got := fromGRPC(status.Error(codes.NotFound, "gone"), metadata.Pairs(ErrorTrailer, string(raw)))
	if !errors.Is(got, ErrAttachmentNotFound) || errors.Is(got, ErrCheckpointNotFound) {
		t.Fatalf("not attachment_not_found: %v", got)
	}
	if Sentinels["attachment_not_found"] != ErrAttachmentNotFound || ErrAttachmentNotFound.Status != codes.NotFound {
		t.Fatal("attachment_not_found is not in the table as NOT_FOUND")
	}
}

func TestTheEdgeCodesAreTheirOwnSentinels(t *testing.T) {
	for code, want := range map[string]*Error{
		"invalid_request":       ErrInvalidRequest,
		"invalid_checkpoint_id": ErrInvalidCheckpointID,
		"invalid_digest":        ErrInvalidDigest,
		"response_too_large":    ErrResponseTooLarge,
	} {
		raw, err := proto.Marshal(&pb.ErrorDetail{Code: code, Message: "refused"})
		if err != nil {
			t.Fatal(err)
		}
		got := fromGRPC(status.Error(want.Status, "refused"), metadata.Pairs(ErrorTrailer, string(raw)))
		if !errors.Is(got, want) || errors.Is(got, ErrInvalidRecord) || Sentinels[code] != want {
			t.Fatalf("%s: not its own sentinel: %v", code, got)
		}
	}
}

func TestABareInternalIsTheTransportFailingAndRetriedAsUnavailable(t *testing.T) {
	for _, c := range []codes.Code{codes.Internal, codes.Unknown} {
		got := fromGRPC(status.Error(c, "Internal error from Core"), nil)
		var jerr *Error
		if !errors.As(got, &jerr) || jerr.Code != "unavailable" || jerr.Status != codes.Unavailable ||
			!strings.Contains(jerr.Message, "Internal error from Core") || !retryInPlace(got, 0) {
			t.Fatalf("bare %v became %#v, want a retried unavailable", c, got)
		}
	}
	raw, _ := proto.Marshal(&pb.ErrorDetail{Code: CodeInternal, Message: "a daemon bug"})
	own := fromGRPC(status.Error(codes.Internal, "a daemon bug"), metadata.Pairs(ErrorTrailer, string(raw)))
	if !errors.Is(own, ErrInternal) || retryInPlace(own, 0) {
		t.Fatalf("the daemon's own internal became %#v, want ErrInternal, not retried", own)
	}
}

func TestWithoutTheTrailerTheStatusIsTheFallback(t *testing.T) {
	got := fromGRPC(status.Error(codes.FailedPrecondition, "nope"), nil)
	if ErrorCode(got) != "failed_precondition" {
		t.Fatalf("code %q", ErrorCode(got))
	}
	if fromGRPC(context.Canceled, nil) != context.Canceled {
		t.Fatal("cancellation must pass through")
	}
}

func TestCanonicalRefusesFloatsAndInvalidUTF8(t *testing.T) {
	if _, err := Canonical(map[string]any{"x": 1.5}); err == nil {
		t.Fatal("float accepted")
	}
	if _, err := CanonicalText([]byte(`[1e3]`)); err == nil {
		t.Fatal("exponent accepted")
	}
	if _, err := Canonical("\xff"); err == nil {
		t.Fatal("invalid UTF-8 accepted")
	}
	for _, bad := range []string{`"\ud800"`, `"\udc00"`, `"a\ud83dx"`, "\"\xff\""} {
		if _, err := CanonicalText([]byte(bad)); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
	if got, err := CanonicalText([]byte(`["\ud83d\ude00","\\ud800","\u00e9"]`)); err != nil || string(got) != `["😀","\\ud800","é"]` {
		t.Fatalf("valid escapes: %s %v", got, err)
	}
	got, err := Canonical(map[string]any{"b": []string{"<&>"}, "a": uint64(1 << 60), "\u2028": "\u2029"})
	if err != nil || string(got) != `{"a":1152921504606846976,"b":["<&>"],"`+"\u2028"+`":"`+"\u2029"+`"}` {
		t.Fatalf("%s %v", got, err)
	}
}

func TestAnOTelSpanBecomesATraceparentAndTheRecordTrace(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
	md := TraceMetadata(ctx)
	if got := md.Get("traceparent"); len(got) != 1 || got[0] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent %v", got)
	}
	out, _ := metadata.FromOutgoingContext(withTrace(ctx))
	if len(out.Get("traceparent")) != 1 {
		t.Fatalf("outgoing metadata %v", out)
	}
	if rt := recordTrace(ctx); rt.GetTraceId() != tid.String() || rt.GetSpanId() != sid.String() {
		t.Fatalf("record trace %v", rt)
	}
	if len(TraceMetadata(context.Background())) != 0 || recordTrace(context.Background()) != nil {
		t.Fatal("no span must add nothing")
	}
}

func TestTimestampsAreRFC3339UTCWithMicroseconds(t *testing.T) {
	ts := time.Date(2026, 11, 30, 13, 0, 0, 7000, time.FixedZone("CET", 3600)).UTC().Format(TimestampLayout)
	if ts != "2026-11-30T12:00:00.000007Z" {
		t.Fatal(ts)
	}
}
