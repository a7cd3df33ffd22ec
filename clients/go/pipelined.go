package journald

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// A PipelinedWriter sends appends on one AppendStream without waiting for each answer, so
// the daemon can commit several in one durable write, and hands every append its own acks.
//
// The ordering rules (docs/protocol.md#pipelined-writers): seqs are assigned when Append is
// called, in call order; the daemon answers in order. When an append fails, the daemon ends
// the stream after it: that append fails with the daemon's typed error, every append sent
// behind it fails with ErrNotWritten (their seqs are void), the writer's next seq goes back
// to the last acknowledged one + 1, and the failure is returned once more by the next Append
// or Flush, so a caller that never waits on a Pending still sees it. A stream that breaks
// with a bare UNAVAILABLE is opened again and the unanswered appends are re-sent with their
// original bytes (twice at most, like a unary append): the daemon answers the ones it had
// stored as duplicates and stores the rest, so nothing is stored twice.

// ErrNotWritten is matched (errors.Is) by the error of an append that was voided because an
// append before it on the same PipelinedWriter failed: nothing of it was written. The error
// also wraps the failure that voided it.
var ErrNotWritten = errors.New("journald: not written")

func errWriterClosed(runID string) error {
	return &Error{Code: CodeLeaseLost, Status: codes.FailedPrecondition, Metadata: map[string]string{"run_id": runID},
		Message: "run " + runID + ": this PipelinedWriter is closed; open a new one with Run.Pipelined"}
}

func errWriterOpen(runID string) error {
	return &Error{Code: CodeInvalidRequest, Status: codes.InvalidArgument, Metadata: map[string]string{"run_id": runID},
		Message: "run " + runID + ": a PipelinedWriter is open on this run; append through it, or Close it " +
			"first (two writers would number the same seqs)"}
}

func errInvalidRequest(format string, args ...any) error {
	return &Error{Code: CodeInvalidRequest, Status: codes.InvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// Pending is one append submitted to a PipelinedWriter.
type Pending struct {
	seq     uint64
	entries []built
	req     *pb.AppendRequest
	done    chan struct{}
	acks    []*pb.Ack
	err     error
}

// Seq is the seq of the append's first record.
func (p *Pending) Seq() uint64 { return p.seq }

// Done is closed once the append is acknowledged or has failed.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait returns the append's acks (one per entry, in order) once its records are durable,
// or its failure: the daemon's typed error, or ErrNotWritten for an append voided by a
// failure before it. A ctx that ends first returns ctx.Err() and leaves the append as is.
func (p *Pending) Wait(ctx context.Context) ([]*pb.Ack, error) {
	select {
	case <-p.done:
		return p.acks, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *Pending) settle(acks []*pb.Ack, err error) {
	p.acks, p.err = acks, err
	close(p.done)
}

// pipe is one AppendStream and its receiving goroutine.
type pipe struct {
	stream  grpc.BidiStreamingClient[pb.AppendStreamRequest, pb.AppendStreamResponse]
	cancel  context.CancelFunc
	done    chan struct{} // closed when its receiver returns
	attempt int           // how many times the appends it carries were re-sent in a row
}

// PipelinedWriter keeps up to a window of appends in flight on one run. It is safe for
// concurrent use; while it is open, the Run's own Append methods refuse (seqs would clash).
type PipelinedWriter struct {
	run    *Run
	ctx    context.Context // the writer's lifetime: every stream is opened under it
	cancel context.CancelFunc
	slots  chan struct{} // one token per append in flight

	// sendMu orders the appends: it is held from the seq assignment to the queueing on the
	// outbox, and while a broken stream's appends are re-queued or voided.
	sendMu sync.Mutex
	// wireMu is held while a message is put on the stream (gRPC sends one at a time); an
	// Append that finds it held leaves its append in the outbox for the holder to send.
	wireMu sync.Mutex
	mu     sync.Mutex // guards the fields below; taken before run.mu, never after
	stream *pipe      // nil until the next Append opens one
	// inflight holds the appends submitted and not yet answered, in seq order.
	inflight []*Pending
	// outbox holds the appends of inflight not yet put on the stream, in seq order: what
	// is there when a message goes out is coalesced into it.
	outbox        []*Pending
	nextSeq       uint64
	nextIteration uint64
	failed        error // returned (once) by the next Append or Flush
	closed        bool

	// beforeEnd, when a test sets it, runs when a stream ends, before its appends are
	// settled: a test holds it to submit appends behind a failing one deterministically.
	beforeEnd func()
}

// Pipelined opens a writer that keeps up to window appends in flight on one AppendStream.
// ctx bounds the writer's whole life: cancelling it fails every append in flight. Close
// the writer (or the Run) to wait for the last acks and end the stream.
func (r *Run) Pipelined(ctx context.Context, window int) (*PipelinedWriter, error) {
	if window < 1 {
		return nil, errInvalidRequest("a PipelinedWriter needs a window of at least 1 append, not %d", window)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writer != nil {
		return nil, errWriterOpen(r.ID())
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &PipelinedWriter{
		run: r, ctx: wctx, cancel: cancel, slots: make(chan struct{}, window),
		nextSeq: r.lastSeq + 1, nextIteration: r.nextIteration,
	}
	if err := w.openLocked(0); err != nil {
		cancel()
		return nil, err
	}
	r.writer = w
	return w, nil
}

// Append submits entries as one append (one durable write, consecutive seqs) and returns
// at once; it blocks only while the window is full (bounded by ctx). ctx's span, if any,
// is stamped into the records. It returns the failure of an earlier append that no Append
// or Flush has returned yet, without submitting anything.
func (w *PipelinedWriter) Append(ctx context.Context, entries ...Entry) (*Pending, error) {
	if len(entries) == 0 {
		return nil, errInvalidRequest("an append needs at least one entry")
	}
	if err := w.ctx.Err(); err != nil { // the writer is over: nothing to send, nothing to report
		return nil, err
	}
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-w.ctx.Done():
		return nil, w.ctx.Err()
	}
	w.sendMu.Lock()
	p, err := w.enqueue(ctx, entries)
	w.sendMu.Unlock()
	if err != nil {
		<-w.slots
		return nil, err
	}
	w.sendQueued()
	return p, nil
}

// coalescedMessageBytes bounds the appends put into one stream message (a quarter of the
// daemon's default 16 MiB message limit); an append above it still goes alone.
const coalescedMessageBytes = 4 << 20

// sendQueued puts the outbox on the stream: every append queued when a message goes out
// goes into it (docs/protocol.md#coalesced-stream-messages), so nothing waits for company:
// an append that finds the wire free is sent at once, alone if nothing is queued. If
// another goroutine holds the wire, it sends this one's append after its own message.
func (w *PipelinedWriter) sendQueued() {
	for {
		if !w.wireMu.TryLock() {
			return // the holder looks at the outbox again after its message
		}
		w.mu.Lock()
		batch, p := w.outbox, w.stream
		batches := w.run.lease.GetAppendStreamBatches()
		w.outbox = nil
		w.mu.Unlock()
		if p != nil { // nil: the stream ended; its receiver re-queues or voids what is in flight
			for _, msg := range streamMessages(batch, batches) {
				// A failed Send means the stream has ended: its receiver sees why and settles.
				_ = p.stream.Send(msg)
			}
		}
		w.wireMu.Unlock()
		w.mu.Lock()
		more := len(w.outbox) > 0
		w.mu.Unlock()
		if !more {
			return
		}
	}
}

// streamMessages groups queued appends into stream messages: one append each for a daemon
// that does not take batches, else as many as fit coalescedMessageBytes.
func streamMessages(batch []*Pending, batches bool) []*pb.AppendStreamRequest {
	var out []*pb.AppendStreamRequest
	var group []*pb.AppendRequest
	size := 0
	flush := func() {
		switch len(group) {
		case 0:
		case 1:
			out = append(out, &pb.AppendStreamRequest{Append: group[0]})
		default:
			out = append(out, &pb.AppendStreamRequest{Appends: group})
		}
		group, size = nil, 0
	}
	for _, q := range batch {
		n := proto.Size(q.req)
		if !batches || (len(group) > 0 && size+n > coalescedMessageBytes) {
			flush()
		}
		group = append(group, q.req)
		size += n
	}
	flush()
	return out
}

// enqueue builds and stamps the records at the next seqs and queues them on the stream
// (opened here if there is none). Caller holds w.sendMu.
func (w *PipelinedWriter) enqueue(ctx context.Context, entries []Entry) (*Pending, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errWriterClosed(w.run.ID())
	}
	if err := w.failed; err != nil {
		w.failed = nil
		return nil, err
	}
	if err := w.ctx.Err(); err != nil {
		return nil, err
	}
	seq, iteration := w.nextSeq, w.nextIteration
	p := &Pending{done: make(chan struct{})}
	records := make([]*pb.Record, 0, len(entries))
	for _, e := range entries {
		b, err := e.build(iteration)
		if err != nil {
			return nil, err
		}
		w.run.stamp(ctx, b.rec, seq)
		if b.assistant {
			iteration = b.rec.GetAssistant().GetIteration() + 1
		}
		seq = b.rec.Seq + 1
		p.entries = append(p.entries, b)
		records = append(records, b.rec)
	}
	if w.stream == nil {
		if err := w.openLocked(0); err != nil {
			return nil, err
		}
	}
	p.seq = records[0].Seq
	p.req = &pb.AppendRequest{RunId: w.run.ID(), LeaseId: w.run.lease.GetLeaseId(), Records: records}
	w.nextSeq, w.nextIteration = seq, iteration
	w.inflight = append(w.inflight, p)
	w.outbox = append(w.outbox, p)
	return p, nil
}

// Flush waits until every append submitted before it is answered (bounded by ctx) and
// returns the failure of an append that no Append or Flush has returned yet.
func (w *PipelinedWriter) Flush(ctx context.Context) error {
	w.mu.Lock()
	var tail *Pending
	if n := len(w.inflight); n > 0 {
		tail = w.inflight[n-1]
	}
	w.mu.Unlock()
	if tail != nil {
		select {
		case <-tail.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.failed
	w.failed = nil
	return err
}

// Close flushes (bounded by the writer's ctx), ends the stream and hands appends back to
// the Run. It returns what that Flush returned; closing again returns nil.
func (w *PipelinedWriter) Close() error {
	err := w.Flush(w.ctx)
	w.sendMu.Lock()
	w.mu.Lock()
	already := w.closed
	w.closed = true
	p := w.stream
	w.stream = nil
	if len(w.inflight) > 0 { // submitted after the flush, or the ctx ended first
		w.failLocked(errWriterClosed(w.run.ID()))
	}
	w.mu.Unlock()
	w.sendMu.Unlock()
	if p != nil {
		w.wireMu.Lock() // gRPC forbids CloseSend during a Send
		_ = p.stream.CloseSend()
		w.wireMu.Unlock()
		p.cancel()
		<-p.done
	}
	w.cancel()
	w.run.mu.Lock()
	if w.run.writer == w {
		w.run.writer = nil
	}
	w.run.mu.Unlock()
	if already {
		return nil
	}
	return err
}

// openLocked starts a new AppendStream and its receiver. Caller holds w.mu (and w.sendMu,
// or owns w before anyone else can see it).
func (w *PipelinedWriter) openLocked(attempt int) error {
	sctx, cancel := context.WithCancel(w.ctx)
	s, err := w.run.c.rpc.AppendStream(sctx)
	if err != nil {
		cancel()
		return fromGRPC(err, nil)
	}
	p := &pipe{stream: s, cancel: cancel, done: make(chan struct{}), attempt: attempt}
	w.stream = p
	go w.receive(p)
	return nil
}

func (w *PipelinedWriter) receive(p *pipe) {
	defer close(p.done)
	for {
		resp, err := p.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = &Error{Code: "unavailable", Status: codes.Unavailable, Message: "the daemon ended the append " +
					"stream of run " + w.run.ID() + " before answering every append"}
			}
			w.ended(p, fromGRPC(err, p.stream.Trailer()))
			return
		}
		answers := resp.GetResponses()
		if len(answers) == 0 {
			answers = []*pb.AppendResponse{resp.GetResponse()}
		}
		for _, answer := range answers {
			if err := w.acked(p, answer.GetAcks()); err != nil {
				w.ended(p, err)
				return
			}
		}
	}
}

// acked settles the oldest append in flight with its acks and moves the Run's view past it.
func (w *PipelinedWriter) acked(p *pipe, acks []*pb.Ack) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.inflight) == 0 {
		return &Error{Code: CodeInternal, Status: codes.Internal, Message: "the daemon answered an append that run " +
			w.run.ID() + " did not send on this stream; this is a daemon bug"}
	}
	head := w.inflight[0]
	if len(acks) != len(head.entries) {
		return &Error{Code: CodeInternal, Status: codes.Internal, Message: fmt.Sprintf(
			"append of seq %d answered with %d acks for %d records; this is a daemon bug", head.seq, len(acks), len(head.entries))}
	}
	w.inflight = w.inflight[1:]
	w.run.mu.Lock()
	for i, ack := range acks {
		w.run.ackedLocked(head.entries[i], ack)
	}
	w.run.mu.Unlock()
	p.attempt = 0
	head.settle(acks, nil)
	<-w.slots
	return nil
}

// ended handles the end of stream p: nothing in flight, nothing to do (the next Append
// opens a new stream); a bare UNAVAILABLE, re-send what is in flight on a new stream;
// anything else fails the oldest append in flight and voids the rest.
func (w *PipelinedWriter) ended(p *pipe, err error) {
	if w.beforeEnd != nil {
		w.beforeEnd()
	}
	resend := false
	defer func() { // last, once both locks are given back
		if resend {
			w.sendQueued()
		}
	}()
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stream != p { // closed, or already replaced
		return
	}
	p.cancel()
	w.stream = nil
	if len(w.inflight) == 0 {
		return
	}
	if cerr := w.ctx.Err(); cerr != nil {
		err = cerr
	} else if retryInPlace(err, p.attempt) {
		w.mu.Unlock()
		perr := pause(w.ctx, p.attempt)
		w.mu.Lock()
		if perr == nil && !w.closed {
			if err = w.openLocked(p.attempt + 1); err == nil {
				// every append in flight goes again, in order, on the new stream
				w.outbox, resend = append([]*Pending(nil), w.inflight...), true
				return
			}
		} else if perr != nil {
			err = perr
		}
	}
	w.failLocked(err)
}

// failLocked fails the oldest append in flight with err, voids the ones behind it, keeps
// err for the next Append or Flush and resyncs the next seq to the last acknowledged one.
// Caller holds w.mu.
func (w *PipelinedWriter) failLocked(err error) {
	head := w.inflight[0]
	head.settle(nil, err)
	for _, q := range w.inflight[1:] {
		q.settle(nil, fmt.Errorf("%w: seq %d was sent behind seq %d, which failed: %w", ErrNotWritten, q.seq, head.seq, err))
	}
	for range w.inflight {
		<-w.slots
	}
	w.inflight, w.outbox = nil, nil
	if w.failed == nil {
		w.failed = err
	}
	w.run.mu.Lock()
	w.nextSeq, w.nextIteration = w.run.lastSeq+1, w.run.nextIteration
	w.run.mu.Unlock()
}
