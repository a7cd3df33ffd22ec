package journald

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Message windows: the daemon answers an Open or a Fold with at most MessageWindow of the
// newest messages, so the answer stays under its max message size however long the run is
// (RunState.MessagesOffset says how many came before). Start, Resume and Fold fetch the
// earlier messages through History before they return, so State().Messages and
// FoldResponse.State.Messages (and GovernedMessages) hold every message, as before.

// DefaultMessageWindow is how many of the newest messages an Open or Fold asks for.
const DefaultMessageWindow = 1000

// PageBytes is about how many bytes of messages one History call brings when fetching the
// messages before a window: the page's message count follows the sizes seen so far (the
// window's, then each page's); a page over the daemon's max message size is asked again at
// half the count.
const PageBytes = 4 << 20

// FirstPage is the message count of the first History call when no window sizes it.
const FirstPage = 1000

// perPage is how many messages like msgs make about PageBytes (0: no messages to tell).
func perPage(msgs []*pb.Message) uint64 {
	if len(msgs) == 0 {
		return 0
	}
	size := 0
	for _, m := range msgs {
		size += len(m.GetContentJson()) + len(m.GetRole()) + 8 // 8: field framing
	}
	return max(1, uint64(PageBytes)*uint64(len(msgs))/uint64(max(1, size)))
}

// CodeConversationChanged is raised by the client itself (never by the daemon): a
// compaction or restore replaced the conversation between reading a window and paging the
// messages before it. Fold again.
const CodeConversationChanged = "conversation_changed"

// ErrConversationChanged matches CodeConversationChanged with errors.Is.
var ErrConversationChanged = &Error{Code: CodeConversationChanged}

// WithMessageWindow sets how many of the newest messages an Open or Fold asks the daemon
// for (default DefaultMessageWindow); 0 asks for every message in one answer, which fails
// with response_too_large when the state is over the daemon's max message size.
func WithMessageWindow(n uint32) Option { return func(o *options) { o.messageWindow = n } }

// earlier pages messages [0, offset) of a list (view) through History. first is the
// window's first message (nil: empty window): the last page reaches it, to check the pages
// still line up with the window (an append may only have grown it).
func (c *Client) earlier(
	ctx context.Context, runID string, view pb.HistoryView, offset uint64, first *pb.Message, page uint64,
) ([]*pb.Message, error) {
	end := offset
	if first != nil {
		end++
	}
	changed := func() error {
		return &Error{
			Code: CodeConversationChanged,
			Message: fmt.Sprintf("run %s: the conversation changed (a compaction or restore) while the %d "+
				"messages before the window were being read; read the state again (Fold)", runID, offset),
			Metadata: map[string]string{"run_id": runID},
		}
	}
	var got []*pb.Message
	ceiling, at := uint64(1)<<62, uint64(0)
	for at < end {
		req := &pb.HistoryRequest{RunId: runID, Offset: at, Limit: min(page, end-at), View: view}
		resp, err := unary(ctx, func(ctx context.Context, o ...grpc.CallOption) (*pb.HistoryResponse, error) {
			return c.rpc.History(ctx, req, o...)
		})
		if errors.Is(err, ErrResponseTooLarge) && page > 1 {
			page /= 2
			ceiling = page
			continue
		}
		if err != nil {
			return nil, err
		}
		if resp.GetOffset() != at || resp.GetNextOffset() <= at || resp.GetTotal() < offset {
			return nil, changed()
		}
		got = append(got, resp.GetMessages()...)
		at = resp.GetNextOffset()
		if n := perPage(resp.GetMessages()); n > 0 {
			page = n
		}
		page = min(page, ceiling)
	}
	if first == nil && at != offset {
		return nil, changed()
	}
	if first != nil && (uint64(len(got)) <= offset || !extends(got[offset], first)) {
		return nil, changed()
	}
	return got[:offset], nil
}

// extends reports whether now is held, or held grown by later blocks.
func extends(now, held *pb.Message) bool {
	if now.GetRole() != held.GetRole() {
		return false
	}
	if bytes.Equal(now.GetContentJson(), held.GetContentJson()) {
		return true
	}
	var grown, before []any
	if json.Unmarshal(now.GetContentJson(), &grown) != nil || json.Unmarshal(held.GetContentJson(), &before) != nil {
		return false
	}
	return len(grown) >= len(before) && reflect.DeepEqual(grown[:len(before)], before)
}

// complete puts the messages before a window in front of it: msgs is the window, *offset
// where it starts (set to 0 once complete).
func (c *Client) complete(
	ctx context.Context, runID string, view pb.HistoryView, msgs *[]*pb.Message, offset *uint64,
) error {
	if *offset == 0 {
		return nil
	}
	var first *pb.Message
	page := uint64(FirstPage)
	if len(*msgs) > 0 {
		first = proto.Clone((*msgs)[0]).(*pb.Message)
		page = perPage(*msgs)
	}
	before, err := c.earlier(ctx, runID, view, *offset, first, page)
	if err != nil {
		return err
	}
	*msgs = append(before, *msgs...)
	*offset = 0
	return nil
}

// completeState completes the state's message window.
func (c *Client) completeState(ctx context.Context, runID string, st *pb.RunState) error {
	if st == nil {
		return nil
	}
	return c.complete(ctx, runID, pb.HistoryView_HISTORY_VIEW_STATE, &st.Messages, &st.MessagesOffset)
}
