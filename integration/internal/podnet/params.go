package podnet

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParamPrefix starts the kernel parameters that tell a guest which node of
// the plan it is. They are apart from the variant's cgd.* parameters: the
// nodes of one variant boot the same variant.
const ParamPrefix = "cgdnet."

// ErrParams is wrapped by every problem with the guest's cgdnet.*
// parameters.
var ErrParams = errors.New("pod network kernel parameters")

// KernelParams are node's parameters for its kernel command line:
// cgdnet.nodes (how many nodes the default plan has), cgdnet.node (its
// name), and, for the guest's shell, cgdnet.ip (its address with the
// prefix length) and cgdnet.host (the host's address). The plan must be
// DefaultPlan(len(p.Nodes)): the guest rebuilds it from the count.
func (p Plan) KernelParams(node string) (string, error) {
	n, err := p.Node(node)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%snodes=%d %snode=%s %sip=%s/%d %shost=%s",
		ParamPrefix, len(p.Nodes), ParamPrefix, n.Name, ParamPrefix, n.IP, p.Host.Bits(), ParamPrefix, p.Host.Addr()), nil
}

// FromKernelParams rebuilds the plan and the node from a kernel command
// line written with KernelParams, and checks that its addresses are the
// plan's.
func FromKernelParams(cmdline string) (Plan, Node, error) {
	vals := map[string]string{}
	for _, f := range strings.Fields(cmdline) {
		if kv, ok := strings.CutPrefix(f, ParamPrefix); ok {
			k, v, _ := strings.Cut(kv, "=")
			if _, dup := vals[k]; dup {
				return Plan{}, Node{}, fmt.Errorf("%w: %s%s given twice", ErrParams, ParamPrefix, k)
			}
			vals[k] = v
		}
	}
	if len(vals) == 0 {
		return Plan{}, Node{}, fmt.Errorf("%w: none on the command line", ErrParams)
	}
	count, err := strconv.Atoi(vals["nodes"])
	if err != nil || count < 1 || count > 200 {
		return Plan{}, Node{}, fmt.Errorf("%w: %snodes=%q: want a node count from 1 to 200", ErrParams, ParamPrefix, vals["nodes"])
	}
	p := DefaultPlan(count)
	n, err := p.Node(vals["node"])
	if err != nil {
		return Plan{}, Node{}, fmt.Errorf("%w: %snode=%q: %w", ErrParams, ParamPrefix, vals["node"], err)
	}
	want, _ := p.KernelParams(n.Name)
	for _, f := range strings.Fields(want) {
		k, v, _ := strings.Cut(strings.TrimPrefix(f, ParamPrefix), "=")
		if vals[k] != v {
			return Plan{}, Node{}, fmt.Errorf("%w: %s%s=%q, want %q for node %s of %d", ErrParams, ParamPrefix, k, vals[k], v, n.Name, count)
		}
	}
	return p, n, nil
}
