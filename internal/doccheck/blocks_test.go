package doccheck

import (
	"reflect"
	"testing"
)

func TestBlocks(t *testing.T) {
	md := "# A\n\ntext\n<!-- refused: no -->\n<!-- manifest: t/a.yaml -->\n```yaml\nkind: Pod\n```\n\n" +
		"~~~\n```not a fence end\n~~~\n\n    ```sh\n    echo\n    ```\n````md\n```yaml\nx\n```\n````\n"
	got, err := Blocks(md)
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Line: 6, Info: "yaml", Marks: []string{"refused: no", "manifest: t/a.yaml"}, Text: "kind: Pod\n"},
		{Line: 10, Text: "```not a fence end\n"},
		{Line: 17, Info: "md", Text: "```yaml\nx\n```\n"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Blocks =\n%#v\nwant\n%#v", got, want)
	}
	if v, ok := got[0].Mark("refused"); !ok || v != "no" {
		t.Errorf(`Mark("refused") = %q, %v`, v, ok)
	}
	if _, ok := got[0].Mark("part of"); ok {
		t.Error(`Mark("part of") found on a block without it`)
	}
	if _, err := Blocks("```yaml\nkind: Pod\n"); err == nil {
		t.Error("an unclosed block: no error")
	}
}
