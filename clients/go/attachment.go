package journald

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	pb "github.com/journald/journald/clients/go/journaldv1"
)

// Media types of a tool result stored as an attachment (docs/protocol.md#large-tool-results).
const (
	ResultTextType   = "text/plain; charset=utf-8"
	ResultBlocksType = "application/json"
)

// PutAttachment stores bytes once per run, addressed by their SHA-256; put the returned
// BlockJson (the attachment block) into a record's content instead of the bytes.
func (c *Client) PutAttachment(ctx context.Context, runID string, data []byte, mediaType, name string) (*pb.PutAttachmentResponse, error) {
	req := &pb.PutAttachmentRequest{RunId: runID, Data: data, MediaType: mediaType, Name: name}
	return unary(ctx, func(ctx context.Context, o ...grpc.CallOption) (*pb.PutAttachmentResponse, error) {
		return c.rpc.PutAttachment(ctx, req, o...)
	})
}

// GetAttachment reads an attachment's bytes back (verified by the daemon).
func (c *Client) GetAttachment(ctx context.Context, runID, sha256 string) ([]byte, error) {
	resp, err := unary(ctx, func(ctx context.Context, o ...grpc.CallOption) (*pb.GetAttachmentResponse, error) {
		return c.rpc.GetAttachment(ctx, &pb.GetAttachmentRequest{RunId: runID, Sha256: sha256}, o...)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetData(), nil
}

// ResultAttachmentBytes is a tool result's content as attachment bytes: one text block as
// its UTF-8 text, any other content as the canonical JSON of its blocks.
func ResultAttachmentBytes(content []Block) ([]byte, string, error) {
	if len(content) == 1 && len(content[0]) == 2 && content[0]["type"] == "text" {
		if text, ok := content[0]["text"].(string); ok {
			return []byte(text), ResultTextType, nil
		}
	}
	raw, err := Canonical(nonNil(content))
	if err != nil {
		return nil, "", err
	}
	return raw, ResultBlocksType, nil
}

// resultAttachment uploads a tool result's content and returns its attachment block.
func (c *Client) resultAttachment(ctx context.Context, runID, toolUseID string, content []Block) (Block, error) {
	data, mediaType, err := ResultAttachmentBytes(content)
	if err != nil {
		return nil, err
	}
	resp, err := c.PutAttachment(ctx, runID, data, mediaType, toolUseID)
	if err != nil {
		return nil, err
	}
	parsed, err := ParseJSON(resp.GetBlockJson())
	if err != nil {
		return nil, err
	}
	block, ok := parsed.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("journald: PutAttachment answered a block that is not an object")
	}
	return block, nil
}
