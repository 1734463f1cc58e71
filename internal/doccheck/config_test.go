package doccheck

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cgdelegate/cgdelegate/internal/config"
)

// restartMark is the line before a page's list of a part's keys that need
// a restart: <!-- restart-keys: pinning -->.
var restartMark = regexp.MustCompile(`^\s*<!-- restart-keys: (\S+) -->\s*$`)

var keySpan = regexp.MustCompile("`([^`]+)`")

// restartLists reads the lists after every restart-keys mark of a page:
// the code spans of the line after the mark, by part.
func restartLists(page string) map[config.Part][]string {
	lists := make(map[config.Part][]string)
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		m := restartMark.FindStringSubmatch(sc.Text())
		if m == nil || !sc.Scan() {
			continue
		}
		var keys []string
		for _, span := range keySpan.FindAllStringSubmatch(sc.Text(), -1) {
			keys = append(keys, span[1])
		}
		lists[config.Part(m[1])] = keys
	}
	return lists
}

// TestConfigurationRestartKeys: docs/configuration.md lists the keys that
// need a restart, part by part, exactly as the code's check
// (config.RestartKeys) has them, and its table has a row for every key.
func TestConfigurationRestartKeys(t *testing.T) {
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	lists := restartLists(page)
	for _, part := range []config.Part{config.PartPinning, config.PartStartOnly} {
		if got, want := lists[part], config.RestartKeys(part); !slices.Equal(got, want) {
			t.Errorf("docs/configuration.md lists the %s keys that need a restart as %q; the code has %q", part, got, want)
		}
		delete(lists, part)
	}
	for part := range lists {
		t.Errorf("docs/configuration.md has a restart-keys list for %q, not a part that needs a restart", part)
	}
	for _, k := range config.Keys() {
		if !strings.Contains(page, "\n| `"+k.Name+"` |") && !strings.Contains(page, "\n| `"+k.Name+".") {
			t.Errorf("docs/configuration.md has no table row for the key %s", k.Name)
		}
	}
}

func TestRestartLists(t *testing.T) {
	page := "text\n<!-- restart-keys: pinning -->\n  `a`, `b`\n\n<!-- restart-keys: start-only -->\n`c`\n`d`\n"
	got := restartLists(page)
	want := map[config.Part][]string{config.PartPinning: {"a", "b"}, config.PartStartOnly: {"c"}}
	if len(got) != len(want) || !slices.Equal(got[config.PartPinning], want[config.PartPinning]) || !slices.Equal(got[config.PartStartOnly], want[config.PartStartOnly]) {
		t.Fatalf("restartLists = %q, want %q", got, want)
	}
}
