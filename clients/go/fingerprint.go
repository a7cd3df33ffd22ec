package journald

import (
	pb "github.com/journald/journald/clients/go/journaldv1"
)

// HashSystemPrompt is the SHA-256 hex of the system prompt blocks as a canonical JSON
// array of strings (docs/protocol.md#fingerprint). The prompt itself never leaves the process.
func HashSystemPrompt(blocks []string) (string, error) {
	items := make([]any, len(blocks))
	for i, b := range blocks {
		items[i] = b
	}
	raw, err := Canonical(items)
	if err != nil {
		return "", err
	}
	return SHA256Hex(raw), nil
}

// HashTools is the SHA-256 hex of the tool definitions as a canonical JSON array, in
// declared order. Each tool is a JSON object: a map, or json.RawMessage text.
func HashTools(tools []any) (string, error) {
	raw, err := Canonical(tools)
	if err != nil {
		return "", err
	}
	return SHA256Hex(raw), nil
}

// Config is the raw agent configuration a fingerprint is computed from.
type Config struct {
	Provider      string
	Model         string
	SystemPrompt  []string
	Tools         []any
	Thinking      string // "off" when empty
	MaxTokens     uint64
	MaxIterations uint64
}

// ComputeFingerprint hashes a configuration locally (only hashes go to the daemon).
func ComputeFingerprint(c Config) (*pb.Fingerprint, error) {
	sp, err := HashSystemPrompt(c.SystemPrompt)
	if err != nil {
		return nil, err
	}
	tools := c.Tools
	if tools == nil {
		tools = []any{}
	}
	th, err := HashTools(tools)
	if err != nil {
		return nil, err
	}
	thinking := c.Thinking
	if thinking == "" {
		thinking = "off"
	}
	return &pb.Fingerprint{
		Provider:           c.Provider,
		Model:              c.Model,
		SystemPromptSha256: sp,
		ToolsSha256:        th,
		Thinking:           thinking,
		MaxTokens:          c.MaxTokens,
		MaxIterations:      c.MaxIterations,
	}, nil
}
