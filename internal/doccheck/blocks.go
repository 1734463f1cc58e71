package doccheck

import (
	"fmt"
	"regexp"
	"strings"
)

// Block is a fenced code block of a Markdown page.
type Block struct {
	// Line is the 1-based line of the opening fence.
	Line int
	// Info is the fence's info string, e.g. "yaml", "sh" or "".
	Info string
	// Marks are the HTML comments on the lines right before the fence, in
	// order, without "<!--" and "-->", e.g. "manifest: PATH".
	Marks []string
	// Text is the block's content: its lines, each with its newline.
	Text string
}

// Mark returns the value of the block's mark "name: value", or "name"
// alone (value ""), and whether the block has it.
func (b Block) Mark(name string) (string, bool) {
	for _, m := range b.Marks {
		if m == name {
			return "", true
		}
		if v, ok := strings.CutPrefix(m, name+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

var (
	openFence = regexp.MustCompile("^\\s{0,3}(```+|~~~+)\\s*([^`\\s]*)")
	comment   = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)
)

// Blocks returns the fenced code blocks of a Markdown page, in order. A block
// that is never closed is an error naming its line.
func Blocks(md string) ([]Block, error) {
	var blocks []Block
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		m := openFence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := Block{Line: i + 1, Info: m[2]}
		for j := i - 1; j >= 0; j-- {
			c := comment.FindStringSubmatch(strings.TrimSpace(lines[j]))
			if c == nil {
				break
			}
			b.Marks = append([]string{c[1]}, b.Marks...)
		}
		var text strings.Builder
		j := i + 1
		for ; j < len(lines); j++ {
			if t := strings.TrimSpace(lines[j]); strings.HasPrefix(t, m[1]) && strings.Trim(t, m[1][:1]) == "" {
				break
			}
			text.WriteString(lines[j] + "\n")
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: the code block is never closed", i+1)
		}
		b.Text = text.String()
		blocks = append(blocks, b)
		i = j
	}
	return blocks, nil
}
