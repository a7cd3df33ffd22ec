package journald

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var ioEOF = io.EOF

// Block is one content block, e.g. {"type":"text","text":"hi"}.
type Block = map[string]any

// Text is a text block.
func Text(text string) Block { return Block{"type": "text", "text": text} }

// ToolUse is a tool_use block; inputJSON is the raw JSON text the model produced.
func ToolUse(id, name, inputJSON string) Block {
	return Block{"type": "tool_use", "id": id, "name": name, "input": inputJSON}
}

// Usage is the token usage of one model call.
type Usage struct {
	InputTokens, OutputTokens, CacheReadTokens, CacheCreationTokens uint64
}

// Assistant is an assistant record: written after each model call, before any tool runs.
type Assistant struct {
	Content []Block
	// Iteration is 1-based; 0 means the run's next iteration.
	Iteration  uint64
	StopReason string
	Usage      Usage
}

// ToolResult is a tool_result record: written as each tool completes.
type ToolResult struct {
	ToolUseID string
	Content   []Block
	IsError   bool
	Remote    bool
	// AsAttachment stores Content as an attachment of the run first (one text block as its
	// UTF-8 text, anything else as the canonical JSON of the blocks) and journals the result
	// as that attachment's block, so output larger than --max-record-bytes (up to the 8 MiB
	// attachment limit) stays out of the record. Honoured by Run.AppendToolResult.
	AsAttachment bool
}

// ToolFunc runs one tool call. A non-nil error is journaled as an is_error result with
// the error text, so the call is closed for real.
type ToolFunc func(ctx context.Context, call *pb.ToolCall) (content []Block, isError bool, err error)

// Run is an open run holding the writer lease. Appends are serialized; seqs are handled.
type Run struct {
	c      *Client
	lease  *pb.Lease
	cancel context.CancelFunc
	done   chan struct{}

	mu            sync.Mutex
	lastSeq       uint64
	lastHash      string
	nextIteration uint64
	unanswered    []*pb.ToolCall
	ended         *pb.LeaseEnded
	endErr        error
	writer        *PipelinedWriter // the open pipelined writer, if any
	set           *leaseStream     // the LeaseSet stream holding the lease (nil: an Open stream)
	endOnce       sync.Once
}

func newRun(c *Client, lease *pb.Lease, cancel context.CancelFunc) *Run {
	r := &Run{
		c: c, lease: lease, cancel: cancel, done: make(chan struct{}),
		lastSeq: lease.GetLastSeq(), lastHash: lease.GetLastHash(),
		nextIteration: lease.GetState().GetNextIteration(),
	}
	if r.nextIteration == 0 {
		r.nextIteration = 1
	}
	r.unanswered = append(r.unanswered, lease.GetState().GetPending().GetUnanswered()...)
	openRuns.Store(r.ID(), struct{}{})
	return r
}

func (r *Run) watch(stream grpc.ServerStreamingClient[pb.OpenResponse]) {
	defer close(r.done)
	defer openRuns.Delete(r.ID())
	for {
		m, err := stream.Recv()
		if err != nil {
			r.mu.Lock()
			if !errors.Is(err, io.EOF) {
				r.endErr = fromGRPC(err, stream.Trailer())
			}
			r.mu.Unlock()
			return
		}
		if e := m.GetEnded(); e != nil {
			r.mu.Lock()
			r.ended = e
			r.mu.Unlock()
		}
	}
}

// ID is the run id.
func (r *Run) ID() string { return r.lease.GetRunId() }

// Lease is the first Open message: lease id, last seq/hash, folded state, warnings.
func (r *Run) Lease() *pb.Lease { return r.lease }

// State is the folded state at open time.
func (r *Run) State() *pb.RunState { return r.lease.GetState() }

// Warnings are the notices that came with the open (e.g. "open_tool_calls").
func (r *Run) Warnings() []*pb.Warning { return r.lease.GetWarnings() }

// LastSeq is the seq of the last acknowledged record.
func (r *Run) LastSeq() uint64 { r.mu.Lock(); defer r.mu.Unlock(); return r.lastSeq }

// LastHash is the hash of the last acknowledged record.
func (r *Run) LastHash() string { r.mu.Lock(); defer r.mu.Unlock(); return r.lastHash }

// NextIteration is the iteration the next assistant record gets by default.
func (r *Run) NextIteration() uint64 { r.mu.Lock(); defer r.mu.Unlock(); return r.nextIteration }

// Unanswered is the tool calls of the trailing assistant turn not yet answered.
func (r *Run) Unanswered() []*pb.ToolCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*pb.ToolCall(nil), r.unanswered...)
}

// Ended is closed when the lease stream finishes (Close, daemon shutdown, deletion).
func (r *Run) Ended() <-chan struct{} { return r.done }

// EndReason says why the daemon ended the lease (nil while it is held or after Close).
func (r *Run) EndReason() *pb.LeaseEnded { r.mu.Lock(); defer r.mu.Unlock(); return r.ended }

// ReleaseTimeout bounds the Release call of Run.Close.
const ReleaseTimeout = 2 * time.Second

// Close releases the lease: it closes the open PipelinedWriter, if any (waiting for the
// appends in flight), calls Release (so the run can be opened again at once, by this
// process or another), then cancels the Open stream and waits for it to finish. Release
// errors are ignored: the daemon may be gone, and cancelling the stream releases the lease
// too, only a moment later.
func (r *Run) Close() error {
	r.closeWriter()
	if r.set != nil { // released over the set's stream, which goes on with the others
		select {
		case <-r.done:
		default:
			r.set.release(r)
		}
		return nil
	}
	r.release()
	r.cancel()
	<-r.done
	return nil
}

// closeWriter closes the open pipelined writer, if any, waiting for the appends in flight.
func (r *Run) closeWriter() {
	r.mu.Lock()
	w := r.writer
	r.mu.Unlock()
	if w != nil {
		_ = w.Close()
	}
}

// endOnSet ends a LeaseSet run's lease (released, ended by the daemon, or with its stream).
func (r *Run) endOnSet(e *pb.LeaseEnded, err error) {
	r.endOnce.Do(func() {
		r.mu.Lock()
		r.ended, r.endErr = e, err
		r.mu.Unlock()
		openRuns.Delete(r.ID())
		close(r.done)
	})
}

func (r *Run) release() {
	select {
	case <-r.done:
		return // the lease stream already ended
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
	defer cancel()
	_, err := r.c.rpc.Release(ctx, &pb.ReleaseRequest{RunId: r.ID(), LeaseId: r.lease.GetLeaseId()})
	if status.Code(err) == codes.Unimplemented {
		releaseUnsupported.Store(true)
	}
}

// Fold returns the run's current folded state from the daemon.
func (r *Run) Fold(ctx context.Context, governed bool) (*pb.FoldResponse, error) {
	return r.c.Fold(ctx, r.ID(), governed)
}

// AppendAssistant journals a model call. Its tool_use blocks become the unanswered calls.
func (r *Run) AppendAssistant(ctx context.Context, a Assistant) (*pb.Ack, error) {
	return r.appendEntry(ctx, a)
}

// AppendToolResult journals one tool's result (with AsAttachment, its content uploaded as
// an attachment first: docs/protocol.md#large-tool-results).
func (r *Run) AppendToolResult(ctx context.Context, t ToolResult) (*pb.Ack, error) {
	if t.AsAttachment {
		block, err := r.c.resultAttachment(ctx, r.ID(), t.ToolUseID, t.Content)
		if err != nil {
			return nil, err
		}
		t.Content, t.AsAttachment = []Block{block}, false
	}
	return r.appendEntry(ctx, t)
}

// AppendUser journals a free-standing interactive follow-up (only the new blocks).
func (r *Run) AppendUser(ctx context.Context, content []Block) (*pb.Ack, error) {
	return r.appendEntry(ctx, User{Content: content})
}

// AppendTerminal journals the end of the run: reason is one of completed, suspended,
// error, budget, max_iterations.
func (r *Run) AppendTerminal(ctx context.Context, reason, message string) (*pb.Ack, error) {
	return r.appendEntry(ctx, Terminal{Reason: reason, Message: message})
}

// AppendState journals one value of framework state under (namespace, key): opaque typed
// bytes that the fold indexes (latest per key, in RunState.State) and that never join the
// conversation, so it is accepted even while tool calls are open. For a large value, store
// the bytes with PutAttachment and journal a StatePayload with Sha256 and Size via AppendRaw.
func (r *Run) AppendState(ctx context.Context, namespace, key, valueType string, data []byte) (*pb.Ack, error) {
	return r.appendEntry(ctx, State{Namespace: namespace, Key: key, Type: valueType, Data: data})
}

// DeleteState journals the removal of a key of framework state; an empty key removes every
// key of the namespace.
func (r *Run) DeleteState(ctx context.Context, namespace, key string) (*pb.Ack, error) {
	return r.appendEntry(ctx, State{Namespace: namespace, Key: key, Deleted: true})
}

// AppendRaw journals a record built by the caller (seq and ts are filled when zero).
func (r *Run) AppendRaw(ctx context.Context, rec *pb.Record) (*pb.Ack, error) {
	return r.appendEntry(ctx, Raw{Record: rec})
}

// appendEntry writes one entry at last_seq+1 and moves the Run's view past it. Appends of
// one Run are serialized; while a PipelinedWriter is open, appends go through it.
func (r *Run) appendEntry(ctx context.Context, e Entry) (*pb.Ack, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writer != nil {
		return nil, errWriterOpen(r.ID())
	}
	b, err := e.build(r.nextIteration)
	if err != nil {
		return nil, err
	}
	ack, err := r.appendLocked(ctx, b.rec)
	if err != nil {
		return nil, err
	}
	r.ackedLocked(b, ack)
	return ack, nil
}

// appendLocked sends one record at last_seq+1 and retries it, byte-identical, while the
// daemon is unreachable (the daemon answers a stored retry as a duplicate). Caller holds
// r.mu.
func (r *Run) appendLocked(ctx context.Context, rec *pb.Record) (*pb.Ack, error) {
	r.stamp(ctx, rec, r.lastSeq+1)
	req := &pb.AppendRequest{RunId: r.ID(), LeaseId: r.lease.GetLeaseId(), Records: []*pb.Record{rec}}
	var resp *pb.AppendResponse
	var err error
	for attempt := 0; ; attempt++ {
		var trailer metadata.MD
		resp, err = r.c.rpc.Append(ctx, req, grpc.Trailer(&trailer))
		if err == nil {
			break
		}
		err = fromGRPC(err, trailer)
		if !retryInPlace(err, attempt) {
			return nil, err
		}
		if err := pause(ctx, attempt); err != nil {
			return nil, err
		}
	}
	if len(resp.GetAcks()) != 1 {
		return nil, fmt.Errorf("journald: append of seq %d answered with %d acks", rec.Seq, len(resp.GetAcks()))
	}
	return resp.GetAcks()[0], nil
}

// maxRetries is how often an append that met a bare UNAVAILABLE is sent again.
const maxRetries = 2

// retryInPlace says whether an append failure is worth resending unchanged: the daemon was
// unreachable (a bare UNAVAILABLE, not the backend's), at most maxRetries times.
func retryInPlace(err error, attempt int) bool {
	var jerr *Error
	return attempt < maxRetries && errors.As(err, &jerr) && jerr.Status == codes.Unavailable &&
		jerr.Code != CodeBackendUnavailable
}

// pause waits before retry number attempt+1 (100 ms, then 200 ms), or until ctx ends.
func pause(ctx context.Context, attempt int) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(100*(attempt+1)) * time.Millisecond):
		return nil
	}
}

// CompletePending runs only the calls of the pending turn that are still unanswered (as
// the daemon's fold says) through fn, one after another, journaling each result as soon
// as it completes. A call whose fn returns an error is journaled as an is_error result, so
// every call is closed for real. It returns the acks in order.
func (r *Run) CompletePending(ctx context.Context, fn ToolFunc) ([]*pb.Ack, error) {
	folded, err := r.Fold(ctx, false)
	if err != nil {
		return nil, err
	}
	var acks []*pb.Ack
	for _, call := range folded.GetState().GetPending().GetUnanswered() {
		content, isError, ferr := fn(ctx, call)
		if ferr != nil {
			content, isError = []Block{Text(ferr.Error())}, true
		}
		ack, err := r.AppendToolResult(ctx, ToolResult{ToolUseID: call.GetId(), Content: content, IsError: isError})
		if err != nil {
			return acks, err
		}
		acks = append(acks, ack)
	}
	return acks, nil
}

func nonNil(blocks []Block) []Block {
	if blocks == nil {
		return []Block{}
	}
	return blocks
}

// inputText is a tool_use input as raw JSON text (a string is taken as is).
func inputText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		raw, err := json.Marshal(x)
		if err != nil {
			return ""
		}
		return string(raw)
	}
}
