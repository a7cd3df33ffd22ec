package journald

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	pb "github.com/journald/journald/clients/go/journaldv1"
	"google.golang.org/protobuf/proto"
)

// The shared vectors in tests/vectors/ pin canonical JSON, fingerprint hashing and record
// encoding byte for byte across Python, Go and TypeScript. JOURNALD_VECTORS overrides the
// directory.
func vectorsDir() string {
	if d := os.Getenv("JOURNALD_VECTORS"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "tests", "vectors")
}

func loadVectors(t *testing.T, name string, into any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vectorsDir(), name))
	if err != nil {
		t.Fatalf("shared vectors missing: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func TestCanonicalVectorsMatchByteForByte(t *testing.T) {
	var file struct {
		Cases []struct {
			Name      string          `json:"name"`
			Value     json.RawMessage `json:"value"`
			Canonical string          `json:"canonical"`
			SHA256    string          `json:"sha256"`
		} `json:"cases"`
	}
	loadVectors(t, "canonical.json", &file)
	if len(file.Cases) == 0 {
		t.Fatal("canonical.json has no cases")
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := CanonicalText(c.Value)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.Canonical {
				t.Fatalf("canonical mismatch\n got %q\nwant %q", got, c.Canonical)
			}
			if SHA256Hex(got) != c.SHA256 {
				t.Fatalf("sha256 %s, want %s", SHA256Hex(got), c.SHA256)
			}
			// The canonical text is a fixed point.
			again, err := CanonicalText([]byte(c.Canonical))
			if err != nil || string(again) != c.Canonical {
				t.Fatalf("canonical text is not a fixed point: %q %v", again, err)
			}
		})
	}
}

func TestFingerprintVectorsMatch(t *testing.T) {
	var file struct {
		Cases []struct {
			Name               string            `json:"name"`
			SystemPrompt       []string          `json:"system_prompt"`
			Tools              []json.RawMessage `json:"tools"`
			SystemPromptSHA256 string            `json:"system_prompt_sha256"`
			ToolsSHA256        string            `json:"tools_sha256"`
		} `json:"cases"`
	}
	loadVectors(t, "fingerprint.json", &file)
	if len(file.Cases) == 0 {
		t.Fatal("fingerprint.json has no cases")
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			sp, err := HashSystemPrompt(c.SystemPrompt)
			if err != nil || sp != c.SystemPromptSHA256 {
				t.Fatalf("system_prompt_sha256 %s (%v), want %s", sp, err, c.SystemPromptSHA256)
			}
			tools := make([]any, len(c.Tools))
			for i, tool := range c.Tools {
				tools[i] = tool
			}
			th, err := HashTools(tools)
			if err != nil || th != c.ToolsSHA256 {
				t.Fatalf("tools_sha256 %s (%v), want %s", th, err, c.ToolsSHA256)
			}
			// The same tools decoded into Go values hash the same.
			decoded := make([]any, len(c.Tools))
			for i, tool := range c.Tools {
				if decoded[i], err = ParseJSON(tool); err != nil {
					t.Fatal(err)
				}
			}
			fp, err := ComputeFingerprint(Config{Provider: "p", Model: "m", SystemPrompt: c.SystemPrompt, Tools: decoded})
			if err != nil || fp.ToolsSha256 != c.ToolsSHA256 || fp.SystemPromptSha256 != c.SystemPromptSHA256 {
				t.Fatalf("ComputeFingerprint %v (%v)", fp, err)
			}
		})
	}
}

func TestRecordVectorsEncodeAndChain(t *testing.T) {
	var file struct {
		Cases []struct {
			Name      string          `json:"name"`
			Record    json.RawMessage `json:"record"`
			Canonical string          `json:"canonical"`
			SHA256    string          `json:"sha256"`
		} `json:"cases"`
		Chain []json.RawMessage `json:"chain"`
	}
	loadVectors(t, "records.json", &file)
	if len(file.Cases) == 0 {
		t.Fatal("records.json has no cases")
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := CanonicalText(c.Record)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.Canonical {
				t.Fatalf("canonical mismatch\n got %q\nwant %q", got, c.Canonical)
			}
			if SHA256Hex(got) != c.SHA256 {
				t.Fatalf("sha256 %s, want %s", SHA256Hex(got), c.SHA256)
			}
		})
	}
	prev := Genesis
	for i, raw := range file.Chain {
		v, err := ParseJSON(raw)
		if err != nil {
			t.Fatal(err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("chain[%d] is not an object", i)
		}
		if obj["prev"] != prev {
			t.Fatalf("chain[%d] prev %v, want %s", i, obj["prev"], prev)
		}
		b, err := Canonical(obj)
		if err != nil {
			t.Fatal(err)
		}
		prev = SHA256Hex(b)
	}
}

func TestStateRecordVectorsCarryTheValueBytesAsStandardBase64(t *testing.T) {
	var file struct {
		Cases []struct {
			Name   string `json:"name"`
			Record struct {
				State *struct {
					Namespace string  `json:"namespace"`
					Key       string  `json:"key"`
					Type      string  `json:"type"`
					Data      *string `json:"data"`
				} `json:"state"`
			} `json:"record"`
		} `json:"cases"`
	}
	loadVectors(t, "records.json", &file)
	seen := 0
	for _, c := range file.Cases {
		st := c.Record.State
		if st == nil || st.Data == nil {
			continue
		}
		seen++
		raw, err := base64.StdEncoding.DecodeString(*st.Data)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		wire, err := proto.Marshal(&pb.StatePayload{Namespace: st.Namespace, Key: st.Key, Type: st.Type, Data: raw})
		if err != nil {
			t.Fatal(err)
		}
		var back pb.StatePayload
		if err := proto.Unmarshal(wire, &back); err != nil {
			t.Fatal(err)
		}
		if got := base64.StdEncoding.EncodeToString(back.GetData()); got != *st.Data {
			t.Fatalf("%s: base64 %q, want %q", c.Name, got, *st.Data)
		}
	}
	if seen < 2 {
		t.Fatalf("records.json has %d inline state cases", seen)
	}
}
