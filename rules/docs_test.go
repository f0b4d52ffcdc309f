package rules_test

import (
	"os"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/rules"
)

// TestDocsFormatExampleLoads parses every YAML block of docs/rules.md, the
// file a new user copies first. Its format example once set count_rejected
// for the whole domain beside a token_bucket rule, so a node given it
// refused to start ("count_rejected applies to fixed_window and
// sliding_log, not to token_bucket").
func TestDocsFormatExampleLoads(t *testing.T) {
	data, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for i, part := range strings.Split(string(data), "```yaml\n")[1:] {
		end := strings.Index(part, "```")
		if end < 0 {
			t.Fatalf("yaml block %d of docs/rules.md is not closed", i+1)
		}
		blocks++
		if _, err := rules.Parse("docs/rules.md", []byte(part[:end])); err != nil {
			t.Errorf("yaml block %d of docs/rules.md: %v", i+1, err)
		}
	}
	if blocks == 0 {
		t.Fatal("docs/rules.md has no yaml block")
	}
}
