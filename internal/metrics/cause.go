package metrics

import "github.com/cgdelegate/cgdelegate/internal/refusal"

// Causes is every value of the cause label of cgdelegate_refusals_total,
// refusal.Other ("other") last.
var Causes = func() []string {
	out := make([]string, len(refusal.Causes))
	for i, c := range refusal.Causes {
		out[i] = string(c)
	}
	return out
}()

// Cause is a refusal's cause label: the cause the deciding package gave it
// (refusal.New), "other" when it has none.
func Cause(err error) string { return string(refusal.CauseOf(err)) }
