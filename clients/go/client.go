// Package journald is the Go client of the journald daemon: gRPC over a unix socket,
// from the stubs generated into package journaldv1.
//
// The shape matches the Python client: Connect, Start / Resume a run with a fingerprint
// (the lease lives as long as the Run), append the record kinds with seq handled,
// Fold, CompletePending for the calls a crashed writer left unanswered, typed errors.
package journald

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// TimestampLayout is RFC 3339 UTC with microseconds, the record `ts` form.
const TimestampLayout = "2006-01-02T15:04:05.000000Z"

// Option configures Connect.
type Option func(*options)

type options struct {
	socket          string
	clock           func() time.Time
	clientName      string
	maxMessageBytes int
	messageWindow   uint32
	dial            []grpc.DialOption
	daemonUID       *int
}

// WithSocket dials this socket path instead of DefaultSocketPath().
func WithSocket(path string) Option { return func(o *options) { o.socket = path } }

// WithDaemonUID sets the uid the daemon runs as (default: $JOURNALD_DAEMON_UID, a uid or a
// user name, else this process's uid); Connect refuses a socket owned by anyone else but root.
func WithDaemonUID(uid int) Option { return func(o *options) { o.daemonUID = &uid } }

// WithClock sets the clock that stamps record `ts` and the meta `created` (tests use a
// fixed clock so journals are byte-identical run to run).
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// WithClientName sets the agent name the daemon shows in `locked` errors.
func WithClientName(name string) Option { return func(o *options) { o.clientName = name } }

// DefaultMaxMessageBytes caps a gRPC message both ways: the daemon's own default (16 MiB,
// `journald serve --max-message-bytes`).
const DefaultMaxMessageBytes = 16 << 20

// WithMaxMessageBytes sets the largest gRPC message sent or received (default 16 MiB).
func WithMaxMessageBytes(n int) Option { return func(o *options) { o.maxMessageBytes = n } }

// WithDialOptions adds grpc.DialOptions (interceptors, keepalive, ...).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dial = append(o.dial, opts...) }
}

// Client is a connection to one daemon. It is safe for concurrent use.
type Client struct {
	conn   *grpc.ClientConn
	rpc    pb.JournalServiceClient
	opts   options
	Socket string
}

// Connect dials the daemon's unix socket and waits until its health service reports
// SERVING (bounded by ctx; 10 s when ctx has no deadline).
func Connect(ctx context.Context, opts ...Option) (*Client, error) {
	o := options{clock: time.Now, maxMessageBytes: DefaultMaxMessageBytes, messageWindow: DefaultMessageWindow}
	for _, f := range opts {
		f(&o)
	}
	if o.socket == "" {
		o.socket = DefaultSocketPath()
	}
	if o.clientName == "" {
		o.clientName = "journald-go"
	}
	// who owns the socket is checked before anything is dialed (docs/protocol.md#peer-identity)
	if err := checkSocket(o.socket, o.daemonUID); err != nil {
		return nil, err
	}
	target, err := Target(o.socket)
	if err != nil {
		return nil, err
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(unaryTrace),
		grpc.WithChainStreamInterceptor(streamTrace),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(o.maxMessageBytes), grpc.MaxCallSendMsgSize(o.maxMessageBytes),
		),
	}, o.dial...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("journald: dial %s: %w", target, err)
	}
	c := &Client{conn: conn, rpc: pb.NewJournalServiceClient(conn), opts: o, Socket: o.socket}
	if err := c.waitReady(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) waitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	health := healthpb.NewHealthClient(c.conn)
	for {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("status %s", resp.GetStatus())
			}
			return fmt.Errorf("journald: daemon at %s is not serving: %w", c.Socket, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close closes the connection (and with it every lease still open on it).
func (c *Client) Close() error { return c.conn.Close() }

// RPC is the generated stub, for the calls this wrapper does not cover.
func (c *Client) RPC() pb.JournalServiceClient { return c.rpc }

func (c *Client) now() string { return c.opts.clock().UTC().Format(TimestampLayout) }

// unary runs one unary call and turns a failure into an *Error.
func unary[T any](ctx context.Context, call func(context.Context, ...grpc.CallOption) (T, error)) (T, error) {
	var trailer metadata.MD
	resp, err := call(ctx, grpc.Trailer(&trailer))
	if err != nil {
		var zero T
		return zero, fromGRPC(err, trailer)
	}
	return resp, nil
}

// Fold returns a run's folded state (and the governed message view when governed), with
// every message: the newest arrive with the answer, the earlier ones are paged through
// History (see WithMessageWindow).
func (c *Client) Fold(ctx context.Context, runID string, governed bool) (*pb.FoldResponse, error) {
	req := &pb.FoldRequest{RunId: runID, Governed: governed, MessageWindow: c.opts.messageWindow}
	resp, err := unary(ctx, func(ctx context.Context, o ...grpc.CallOption) (*pb.FoldResponse, error) {
		return c.rpc.Fold(ctx, req, o...)
	})
	if err != nil {
		return nil, err
	}
	if err := c.completeState(ctx, runID, resp.GetState()); err != nil {
		return nil, err
	}
	gov := pb.HistoryView_HISTORY_VIEW_GOVERNED
	if err := c.complete(ctx, runID, gov, &resp.GovernedMessages, &resp.GovernedOffset); err != nil {
		return nil, err
	}
	return resp, nil
}

// Verify checks a run's hash chain and record schemas end to end.
func (c *Client) Verify(ctx context.Context, runID string) (*pb.VerifyResponse, error) {
	return unary(ctx, func(ctx context.Context, o ...grpc.CallOption) (*pb.VerifyResponse, error) {
		return c.rpc.Verify(ctx, &pb.VerifyRequest{RunId: runID}, o...)
	})
}

// Load returns a run's records from fromSeq (0 = all), with their canonical bytes.
func (c *Client) Load(ctx context.Context, runID string, fromSeq uint64) ([]*pb.Record, error) {
	stream, err := c.rpc.Load(ctx, &pb.LoadRequest{RunId: runID, FromSeq: fromSeq})
	if err != nil {
		return nil, fromGRPC(err, nil)
	}
	var out []*pb.Record
	for {
		m, err := stream.Recv()
		if errors.Is(err, ioEOF) {
			return out, nil
		}
		if err != nil {
			return nil, fromGRPC(err, stream.Trailer())
		}
		out = append(out, m.GetRecord())
	}
}

// StartOptions creates a run.
type StartOptions struct {
	RunID       string
	Fingerprint *pb.Fingerprint
	Interactive bool
	// Prompt is the initial user prompt as content blocks (e.g. []Block{Text("...")}).
	Prompt []Block
	Labels map[string]string
}

// ResumeOptions resumes an existing run.
type ResumeOptions struct {
	RunID       string
	Fingerprint *pb.Fingerprint
	Interactive bool
	// Force waives fingerprint drift (never a provider change).
	Force bool
}

// Start creates a run and takes its writer lease (OPEN_MODE_CREATE).
func (c *Client) Start(ctx context.Context, o StartOptions) (*Run, error) {
	req, err := c.startRequest(ctx, o)
	if err != nil {
		return nil, err
	}
	return c.open(ctx, req)
}

// startRequest is the OpenRequest of Start (shared with LeaseSet.Start).
func (c *Client) startRequest(ctx context.Context, o StartOptions) (*pb.OpenRequest, error) {
	prompt := o.Prompt
	if prompt == nil {
		prompt = []Block{}
	}
	promptJSON, err := Canonical(prompt)
	if err != nil {
		return nil, err
	}
	return &pb.OpenRequest{
		RunId:       o.RunID,
		Mode:        pb.OpenMode_OPEN_MODE_CREATE,
		Fingerprint: o.Fingerprint,
		Interactive: o.Interactive,
		PromptJson:  promptJSON,
		Labels:      o.Labels,
		Created:     c.now(),
		Trace:       recordTrace(ctx),
	}, nil
}

// Resume reopens an existing run and takes its writer lease (OPEN_MODE_RESUME). The
// resume gates apply: completed, interactivity, provider, then drift unless Force.
func (c *Client) Resume(ctx context.Context, o ResumeOptions) (*Run, error) {
	return c.open(ctx, resumeRequest(o))
}

// resumeRequest is the OpenRequest of Resume (shared with LeaseSet.Resume).
func resumeRequest(o ResumeOptions) *pb.OpenRequest {
	return &pb.OpenRequest{
		RunId:       o.RunID,
		Mode:        pb.OpenMode_OPEN_MODE_RESUME,
		Fingerprint: o.Fingerprint,
		Interactive: o.Interactive,
		Force:       o.Force,
	}
}

func (c *Client) clientInfo() *pb.ClientInfo {
	host, _ := os.Hostname()
	cwd, _ := os.Getwd()
	return &pb.ClientInfo{Name: c.opts.clientName, Pid: uint32(os.Getpid()), Host: host, Cwd: cwd}
}

// openRuns holds the run ids this process has a lease on (a Run not yet closed).
var openRuns sync.Map

// releaseUnsupported is set once a daemon answered Release with UNIMPLEMENTED (a daemon
// older than Release): Run.Close then releases only by cancelling the stream, which the
// daemon sees a moment later.
var releaseUnsupported atomic.Bool

// open opens the lease stream. Run.Close calls Release, so a re-open right after it never
// sees `locked`. Only against an old daemon without Release does the lease end a moment
// after Close returns: there, a `locked` error naming this very process as the holder of
// a run it no longer has open is that window, and is retried for up to 3 s. Any other
// error, or a lock held by anyone else, returns at once.
func (c *Client) open(ctx context.Context, req *pb.OpenRequest) (*Run, error) {
	info := c.clientInfo()
	deadline := time.Now().Add(3 * time.Second)
	for {
		run, err := c.openOnce(ctx, req, info)
		var jerr *Error
		if err == nil || !releaseUnsupported.Load() ||
			!errors.As(err, &jerr) || jerr.Code != CodeLocked ||
			jerr.Metadata["holder_pid"] != strconv.Itoa(int(info.Pid)) ||
			jerr.Metadata["holder_host"] != info.Host || time.Now().After(deadline) {
			return run, err
		}
		if _, held := openRuns.Load(req.RunId); held {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Client) openOnce(ctx context.Context, req *pb.OpenRequest, info *pb.ClientInfo) (*Run, error) {
	req.Client = info
	req.MessageWindow = c.opts.messageWindow
	// The lease lives as long as this stream, which must outlive ctx: it is cancelled by
	// Run.Close (or by the process dying, which the daemon sees at once).
	streamCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stream, err := c.rpc.Open(streamCtx, req)
	if err != nil {
		cancel()
		return nil, fromGRPC(err, nil)
	}
	type first struct {
		m   *pb.OpenResponse
		err error
	}
	ch := make(chan first, 1)
	go func() {
		m, err := stream.Recv()
		ch <- first{m, err}
	}()
	var f first
	select {
	case f = <-ch:
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	if f.err != nil {
		cancel()
		return nil, fromGRPC(f.err, stream.Trailer())
	}
	lease := f.m.GetLease()
	if lease == nil {
		cancel()
		return nil, fmt.Errorf("journald: Open for %s answered without a lease", req.RunId)
	}
	if err := c.completeState(ctx, req.RunId, lease.GetState()); err != nil {
		cancel()
		return nil, err
	}
	r := newRun(c, lease, cancel)
	go r.watch(stream)
	return r, nil
}
