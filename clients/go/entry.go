package journald

import (
	"context"

	pb "github.com/journald/journald/clients/go/journaldv1"
)

// Entry is one record to journal: Assistant, ToolResult, User, Terminal, State or Raw.
// The Run's Append methods write one entry per call; a PipelinedWriter keeps several in
// flight on one stream.
type Entry interface {
	// build turns the entry into its record; nextIteration numbers an assistant turn that
	// does not carry its own iteration.
	build(nextIteration uint64) (built, error)
}

// built is an entry as a record, plus what its ack changes in the Run's view.
type built struct {
	rec *pb.Record
	// assistant: the turn's iteration is done and its tool calls become the unanswered ones
	assistant bool
	calls     []*pb.ToolCall
	// answers is the tool call a tool result closes
	answers string
}

// User is a free-standing interactive follow-up (only the new blocks).
type User struct {
	Content []Block
}

// Terminal ends the run: Reason is one of completed, suspended, error, budget,
// max_iterations.
type Terminal struct {
	Reason, Message string
}

// State is one value of framework state under (Namespace, Key), or with Deleted its
// removal (an empty Key removes every key of the namespace).
type State struct {
	Namespace, Key, Type string
	Data                 []byte
	Deleted              bool
}

// Raw is a record built by the caller; seq and ts are filled when zero. It leaves the
// Run's iteration and unanswered calls as they are.
type Raw struct {
	Record *pb.Record
}

func (a Assistant) build(nextIteration uint64) (built, error) {
	content, err := Canonical(nonNil(a.Content))
	if err != nil {
		return built{}, err
	}
	var calls []*pb.ToolCall
	for _, b := range a.Content {
		if b["type"] != "tool_use" {
			continue
		}
		id, _ := b["id"].(string)
		name, _ := b["name"].(string)
		calls = append(calls, &pb.ToolCall{Id: id, Name: name, InputJson: inputText(b["input"])})
	}
	iteration := a.Iteration
	if iteration == 0 {
		iteration = nextIteration
	}
	rec := &pb.Record{Payload: &pb.Record_Assistant{Assistant: &pb.AssistantPayload{
		Message:    &pb.Message{Role: "assistant", ContentJson: content},
		Iteration:  iteration,
		StopReason: a.StopReason,
		Usage: &pb.Usage{
			InputTokens: a.Usage.InputTokens, OutputTokens: a.Usage.OutputTokens,
			CacheReadTokens: a.Usage.CacheReadTokens, CacheCreationTokens: a.Usage.CacheCreationTokens,
		},
	}}}
	return built{rec: rec, assistant: true, calls: calls}, nil
}

func (t ToolResult) build(uint64) (built, error) {
	content, err := Canonical(nonNil(t.Content))
	if err != nil {
		return built{}, err
	}
	rec := &pb.Record{Payload: &pb.Record_ToolResult{ToolResult: &pb.ToolResultPayload{
		ToolUseId: t.ToolUseID, ContentJson: content, IsError: t.IsError, Remote: t.Remote,
	}}}
	return built{rec: rec, answers: t.ToolUseID}, nil
}

func (u User) build(uint64) (built, error) {
	raw, err := Canonical(nonNil(u.Content))
	if err != nil {
		return built{}, err
	}
	return built{rec: &pb.Record{Payload: &pb.Record_User{User: &pb.UserPayload{ContentJson: raw}}}}, nil
}

func (t Terminal) build(uint64) (built, error) {
	return built{rec: &pb.Record{Payload: &pb.Record_Terminal{Terminal: &pb.TerminalPayload{
		Reason: t.Reason, Message: t.Message,
	}}}}, nil
}

func (s State) build(uint64) (built, error) {
	data := s.Data
	if data == nil || s.Deleted {
		data = []byte{}
	}
	return built{rec: &pb.Record{Payload: &pb.Record_State{State: &pb.StatePayload{
		Namespace: s.Namespace, Key: s.Key, Type: s.Type, Data: data, Deleted: s.Deleted,
	}}}}, nil
}

func (r Raw) build(uint64) (built, error) {
	if r.Record == nil {
		return built{}, &Error{Code: CodeInvalidRecord, Message: "Raw entry without a record: set Raw.Record"}
	}
	return built{rec: r.Record}, nil
}

// stamp fills a record's seq (when zero), its client-side ts (so a retry after a lost ack
// is byte-identical and answered as a duplicate) and the trace of ctx (when unset).
func (r *Run) stamp(ctx context.Context, rec *pb.Record, seq uint64) {
	if rec.Seq == 0 {
		rec.Seq = seq
	}
	if rec.Ts == "" {
		rec.Ts = r.c.now()
	}
	if rec.Trace == nil {
		rec.Trace = recordTrace(ctx)
	}
}

// ackedLocked moves the Run's view past one acknowledged entry. Caller holds r.mu.
func (r *Run) ackedLocked(b built, ack *pb.Ack) {
	r.lastSeq, r.lastHash = ack.GetSeq(), ack.GetHash()
	if b.assistant {
		r.nextIteration = b.rec.GetAssistant().GetIteration() + 1
		r.unanswered = b.calls
	}
	if b.answers != "" {
		kept := r.unanswered[:0:0]
		for _, c := range r.unanswered {
			if c.GetId() != b.answers {
				kept = append(kept, c)
			}
		}
		r.unanswered = kept
	}
}
