package journald

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"

	pb "github.com/journald/journald/clients/go/journaldv1"
)

// LeaseSet holds the writer leases of many runs over one Leases stream
// (docs/protocol.md#many-leases-on-one-stream): a process holding many runs at once (a server
// with a conversation per goroutine, an agent pool) pays one gRPC stream for all of them
// instead of one Open stream per run. Start and Resume take the same options, gates and typed
// refusals as Client.Start and Client.Resume and return an ordinary *Run; only the way its
// lease is held differs: Run.Close releases it over the set's stream, and Run.Ended is closed
// when the daemon ends that one lease (the others go on). If the stream itself breaks
// (daemon restart), every lease of the set ends with it and the next Start or Resume opens a
// new stream. Close ends every lease of the set at once.
type LeaseSet struct {
	c *Client

	mu     sync.Mutex
	stream *leaseStream
	runs   map[*Run]struct{}
	closed bool
}

// leaseStream is one Leases call: requests are sent under sendMu, answers are read by one
// goroutine that routes each to the request it answers or to the lease it ends.
type leaseStream struct {
	call interface {
		Send(*pb.LeasesRequest) error
		Recv() (*pb.LeasesResponse, error)
		CloseSend() error
	}
	cancel context.CancelFunc
	c      *Client
	done   chan struct{} // closed when the reader has stopped

	sendMu  sync.Mutex // one sender at a time (gRPC's rule), apart from mu so the reader never waits on a send
	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan answer
	leases  map[string]*Run // by run id: the runs whose lease is on this stream
	failure error           // why the stream ended, once it has
}

// CloseTimeout bounds how long LeaseSet.Close waits for the daemon to release every lease.
const CloseTimeout = 30 * time.Second

// answer is a response to one request, with the Run its granted lease made: the reader makes
// it as it reads the grant, so an `ended` right behind the grant finds it.
type answer struct {
	resp *pb.LeasesResponse
	run  *Run
}

// LeaseSet returns an empty set on this client; its stream opens with the first Start or
// Resume.
func (c *Client) LeaseSet() *LeaseSet {
	return &LeaseSet{c: c, runs: map[*Run]struct{}{}}
}

func errSetClosed() error {
	return &Error{Code: CodeLeaseLost, Status: ErrLeaseLost.Status,
		Message: "this lease set is closed; open the runs with a new one"}
}

func (s *LeaseSet) current() (*leaseStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errSetClosed()
	}
	if s.stream != nil && !s.stream.broken() {
		return s.stream, nil
	}
	// The stream outlives any one call's context: it ends with Close (or the process).
	ctx, cancel := context.WithCancel(context.Background())
	call, err := s.c.rpc.Leases(ctx)
	if err != nil {
		cancel()
		return nil, fromGRPC(err, nil)
	}
	ls := &leaseStream{call: call, cancel: cancel, c: s.c, done: make(chan struct{}),
		waiting: map[uint64]chan answer{}, leases: map[string]*Run{}}
	go ls.read(call.Trailer)
	s.stream = ls
	return ls, nil
}

func (ls *leaseStream) broken() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.failure != nil
}

// ask sends one request and waits for its answer (nil when ctx ended first).
func (ls *leaseStream) ask(ctx context.Context, req *pb.LeasesRequest) (answer, error) {
	ch := make(chan answer, 1)
	ls.mu.Lock()
	if ls.failure != nil {
		err := ls.failure
		ls.mu.Unlock()
		return answer{}, err
	}
	ls.nextID++
	req.RequestId = ls.nextID
	ls.waiting[req.RequestId] = ch
	ls.mu.Unlock()
	ls.sendMu.Lock()
	err := ls.call.Send(req)
	ls.sendMu.Unlock()
	if err != nil {
		<-ls.done
		return answer{}, ls.failed()
	}
	select {
	case got, ok := <-ch:
		if !ok {
			return answer{}, ls.failed()
		}
		return got, nil
	case <-ctx.Done():
		ls.mu.Lock()
		delete(ls.waiting, req.RequestId)
		ls.mu.Unlock()
		return answer{}, ctx.Err()
	}
}

func (ls *leaseStream) failed() error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.failure
}

func (ls *leaseStream) read(trailer func() metadata.MD) {
	defer close(ls.done)
	var failure error
	for {
		resp, err := ls.call.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				failure = &Error{Code: CodeLeaseLost, Status: ErrLeaseLost.Status,
					Message: "the daemon finished the Leases stream (it is shutting down); every lease on it ended"}
			} else {
				failure = fromGRPC(err, trailer())
			}
			break
		}
		ls.route(resp)
	}
	ls.mu.Lock()
	ls.failure = failure
	waiting, leases := ls.waiting, ls.leases
	ls.waiting, ls.leases = map[uint64]chan answer{}, map[string]*Run{}
	ls.mu.Unlock()
	for _, r := range leases {
		r.endOnSet(&pb.LeaseEnded{Reason: "stream_closed"}, failure)
	}
	for _, ch := range waiting {
		close(ch)
	}
}

func (ls *leaseStream) route(resp *pb.LeasesResponse) {
	ls.mu.Lock()
	var ended, granted *Run
	var ch chan answer
	switch {
	case resp.GetEnded() != nil:
		ended = ls.leases[resp.GetRunId()]
		delete(ls.leases, resp.GetRunId())
	default:
		ch = ls.waiting[resp.GetRequestId()]
		delete(ls.waiting, resp.GetRequestId())
		if lease := resp.GetLease(); lease != nil {
			granted = newRun(ls.c, lease, func() {})
			granted.set = ls
			ls.leases[resp.GetRunId()] = granted
		} else if resp.GetReleased() != nil {
			ended = ls.leases[resp.GetRunId()]
			delete(ls.leases, resp.GetRunId())
		}
	}
	ls.mu.Unlock()
	if ended != nil {
		if e := resp.GetEnded(); e != nil {
			ended.endOnSet(e, nil)
		} else {
			ended.endOnSet(&pb.LeaseEnded{Reason: "released"}, nil)
		}
	}
	if ch != nil {
		ch <- answer{resp, granted}
	} else if granted != nil { // its caller gave up waiting: nobody will hold it
		go ls.release(granted)
	}
}

// acquire takes one run's lease over the stream and makes its Run.
func (s *LeaseSet) acquire(ctx context.Context, req *pb.OpenRequest) (*Run, error) {
	ls, err := s.current()
	if err != nil {
		return nil, err
	}
	req.Client = s.c.clientInfo()
	req.MessageWindow = s.c.opts.messageWindow
	got, err := ls.ask(ctx, &pb.LeasesRequest{Op: &pb.LeasesRequest_Acquire{Acquire: req}})
	if err != nil {
		return nil, err
	}
	if d := got.resp.GetRefused(); d != nil {
		return nil, fromDetail(d)
	}
	r := got.run
	if r == nil {
		return nil, fmt.Errorf("journald: the Leases stream answered the acquire of %s without a lease", req.RunId)
	}
	select {
	case <-r.done: // ended (or its stream broke) as it was granted
		return nil, &Error{Code: CodeLeaseLost, Status: ErrLeaseLost.Status,
			Message: fmt.Sprintf("the lease of run %s ended as it was granted; open it again", req.RunId)}
	default:
	}
	lease := r.lease
	if err := s.c.completeState(ctx, r.ID(), lease.GetState()); err != nil {
		_ = r.Close()
		return nil, err
	}
	s.mu.Lock()
	s.runs[r] = struct{}{}
	s.mu.Unlock()
	return r, nil
}

// release ends one run's lease over the stream (bounded by ReleaseTimeout; the lease ends
// with the stream at the latest).
func (ls *leaseStream) release(r *Run) {
	ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
	defer cancel()
	_, _ = ls.ask(ctx, &pb.LeasesRequest{Op: &pb.LeasesRequest_Release{
		Release: &pb.ReleaseRequest{RunId: r.ID(), LeaseId: r.lease.GetLeaseId()}}})
	ls.mu.Lock()
	if ls.leases[r.ID()] == r {
		delete(ls.leases, r.ID())
	}
	ls.mu.Unlock()
	r.endOnSet(&pb.LeaseEnded{Reason: "released"}, nil)
}

// Start is Client.Start over the set's stream.
func (s *LeaseSet) Start(ctx context.Context, o StartOptions) (*Run, error) {
	req, err := s.c.startRequest(ctx, o)
	if err != nil {
		return nil, err
	}
	return s.acquire(ctx, req)
}

// Resume is Client.Resume over the set's stream.
func (s *LeaseSet) Resume(ctx context.Context, o ResumeOptions) (*Run, error) {
	return s.acquire(ctx, resumeRequest(o))
}

// Runs returns the runs of the set whose lease is still held.
func (s *LeaseSet) Runs() []*Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Run, 0, len(s.runs))
	for r := range s.runs {
		select {
		case <-r.done:
			delete(s.runs, r)
		default:
			out = append(out, r)
		}
	}
	return out
}

// Close ends every lease of the set at once: it closes each run's pipelined writer, then
// half-closes the stream, on which the daemon releases every lease and finishes the stream
// once each run can be opened again (the stream is cancelled after CloseTimeout).
func (s *LeaseSet) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ls := s.stream
	runs := s.runs
	s.runs = map[*Run]struct{}{}
	s.mu.Unlock()
	for r := range runs {
		r.closeWriter()
	}
	if ls == nil {
		return nil
	}
	ls.sendMu.Lock()
	_ = ls.call.CloseSend()
	ls.sendMu.Unlock()
	select {
	case <-ls.done:
	case <-time.After(CloseTimeout):
		ls.cancel()
		<-ls.done
	}
	ls.cancel()
	return nil
}
