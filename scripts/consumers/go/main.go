// A program outside the journald checkout that uses the Go client as a dependency, the way
// clients/go/README.md tells a user to add it. scripts/check_client_packages.sh builds it in
// an empty module and runs it on tests/vectors/fingerprint.json: it exits non-zero unless
// the module computes every vector's hashes and knows every ErrorCode of the proto.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	journald "github.com/journald/journald/clients/go"
	pb "github.com/journald/journald/clients/go/journaldv1"
)

type vectorCase struct {
	Name               string          `json:"name"`
	SystemPrompt       []string        `json:"system_prompt"`
	Tools              json.RawMessage `json:"tools"`
	SystemPromptSHA256 string          `json:"system_prompt_sha256"`
	ToolsSHA256        string          `json:"tools_sha256"`
}

func main() {
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(err)
	}
	var doc struct {
		Cases []vectorCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		fail(err)
	}
	for _, c := range doc.Cases {
		prompt, err := journald.HashSystemPrompt(c.SystemPrompt)
		if err != nil {
			fail(err)
		}
		parsed, err := journald.ParseJSON(c.Tools)
		if err != nil {
			fail(err)
		}
		tools, err := journald.HashTools(parsed.([]any))
		if err != nil {
			fail(err)
		}
		if prompt != c.SystemPromptSHA256 || tools != c.ToolsSHA256 {
			fail(fmt.Errorf("vector %s: got %s / %s", c.Name, prompt, tools))
		}
	}
	for name, number := range pb.ErrorCode_value {
		word := strings.ToLower(strings.TrimPrefix(name, "ERROR_CODE_"))
		if number != 0 && journald.Sentinels[word] == nil {
			fail(fmt.Errorf("no sentinel for %s", name))
		}
	}
	fmt.Printf("go module outside the checkout: %d fingerprint vectors, %d error codes\n",
		len(doc.Cases), len(journald.Sentinels))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "consumer:", err)
	os.Exit(1)
}
