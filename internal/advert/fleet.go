package advert

// The fleet as the API sees it: each Node's FeatureLabel, ReasonAnnotation
// and FailClosedAnnotation, and the version of the plugin pod on it, for
// `cgdelegate nodes`. It only reads: a list of the Nodes' metadata and a
// list of the plugin's pods.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
)

// PluginPodSelector selects the plugin's pods (the chart's
// cgdelegate.selectorLabels).
const PluginPodSelector = "app.kubernetes.io/name=cgdelegate"

// pluginContainer is the plugin's container in its pod.
const pluginContainer = "cgdelegate"

// Absent is what a column says for a label or annotation the Node does not
// carry.
const Absent = "absent"

// FleetNode is one Node as `cgdelegate nodes` prints it.
type FleetNode struct {
	Name string `json:"name"`
	// Supports is FeatureLabel's value ("true"; "false" where NFD writes
	// the feature file), or "absent".
	Supports string `json:"supports"`
	// Reason is ReasonAnnotation's value (a status.Reason), "" when the
	// Node has none.
	Reason string `json:"reason,omitempty"`
	// FailClosed is FailClosedAnnotation's value, "" when none.
	FailClosed string `json:"failClosed,omitempty"`
	// Version is the image tag of the plugin's container in the plugin
	// pod on the Node (the newest, when a rollout runs two); "" when no
	// plugin pod runs there or the pods could not be listed.
	Version string `json:"version,omitempty"`
}

// Fleet is every Node's advertisement, in the API's order.
type Fleet struct {
	Nodes []FleetNode `json:"nodes"`
	// Warnings say what could not be read (the plugin's pods, for the
	// versions), one sentence each.
	Warnings []string `json:"warnings,omitempty"`
}

// FleetReader reads the fleet from the API.
type FleetReader struct {
	client *kubeClient
	from   string
}

// NewFleetReader returns a reader of the API that s finds (a kubeconfig,
// or the pod's service account); an error names the file and the field,
// or everything that is missing.
func NewFleetReader(s ClientSource) (*FleetReader, error) {
	c, from, err := newClientFrom(s)
	if err != nil {
		return nil, err
	}
	return &FleetReader{client: c, from: from}, nil
}

// API is the API server's address; From, where the reader found it (the
// kubeconfig files, or the service account).
func (r *FleetReader) API() string  { return r.client.base }
func (r *FleetReader) From() string { return r.from }

// Read lists the Nodes and the plugin's pods. A failure to list the Nodes
// is an error; one to list the pods (a user who may not) is a warning, and
// the versions are empty.
func (r *FleetReader) Read(ctx context.Context) (Fleet, error) {
	var f Fleet
	err := r.client.list(ctx, "/api/v1/nodes", "", metadataAccept, func(path string, i int, raw json.RawMessage) error {
		var it objectMeta
		if err := json.Unmarshal(raw, &it); err != nil {
			return fmt.Errorf("GET %s: item %d: %w", path, i, err)
		}
		m := it.Metadata
		if m.Name == "" {
			return fmt.Errorf("GET %s: item %d has no metadata.name", path, i)
		}
		n := FleetNode{Name: m.Name, Supports: Absent, Reason: m.Annotations[ReasonAnnotation], FailClosed: m.Annotations[FailClosedAnnotation]}
		if v, ok := m.Labels[FeatureLabel]; ok {
			n.Supports = v
		}
		f.Nodes = append(f.Nodes, n)
		return nil
	})
	if err != nil {
		return Fleet{}, fmt.Errorf("list the nodes: %w", err)
	}
	versions, err := r.versions(ctx)
	if err != nil {
		f.Warnings = append(f.Warnings, fmt.Sprintf("no plugin versions: cannot list the pods %s: %v", PluginPodSelector, err))
	}
	for i := range f.Nodes {
		f.Nodes[i].Version = versions[f.Nodes[i].Name]
	}
	return f, nil
}

// versions maps each node to the image tag of the newest plugin pod on it.
func (r *FleetReader) versions(ctx context.Context) (map[string]string, error) {
	type pod struct {
		Metadata struct {
			CreationTimestamp string `json:"creationTimestamp"`
		} `json:"metadata"`
		Spec struct {
			NodeName   string `json:"nodeName"`
			Containers []struct {
				Name  string `json:"name"`
				Image string `json:"image"`
			} `json:"containers"`
		} `json:"spec"`
	}
	out, newest := map[string]string{}, map[string]string{}
	err := r.client.list(ctx, "/api/v1/pods", PluginPodSelector, "application/json", func(path string, i int, raw json.RawMessage) error {
		var p pod
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("GET %s: item %d: %w", path, i, err)
		}
		node, at := p.Spec.NodeName, p.Metadata.CreationTimestamp // RFC 3339 in UTC: sorts as text
		if node == "" || at < newest[node] {
			return nil
		}
		for _, c := range p.Spec.Containers {
			if c.Name == pluginContainer {
				out[node], newest[node] = imageTag(c.Image), at
			}
		}
		return nil
	})
	return out, err
}

// imageTag is the tag of an image reference (its digest when it has one,
// shortened; "latest" for neither, as the runtime reads it).
func imageTag(ref string) string {
	if at := strings.LastIndex(ref, "@"); at >= 0 {
		d := ref[at+1:]
		if _, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
			d = d[:len(d)-len(hex)] + hex[:12]
		}
		return d
	}
	name := ref[strings.LastIndex(ref, "/")+1:]
	if _, tag, ok := strings.Cut(name, ":"); ok {
		return tag
	}
	return "latest"
}

// The output formats of WriteFleet.
const (
	FleetTable = "table"
	FleetJSON  = "json"
)

// FleetFormats are the formats, table first (the default).
var FleetFormats = []string{FleetTable, FleetJSON}

// WriteFleet writes f to w in format: a table (NODE, SUPPORTS, REASON,
// FAIL-CLOSED, VERSION; "-" for an empty cell), or JSON (Fleet,
// indented).
func WriteFleet(w io.Writer, f Fleet, format string) error {
	switch format {
	case FleetJSON:
		if f.Nodes == nil {
			f.Nodes = []FleetNode{}
		}
		b, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	case FleetTable:
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tSUPPORTS\tREASON\tFAIL-CLOSED\tVERSION")
		// An annotation someone else wrote may hold anything: a cell with
		// a space or a control character is quoted, so the columns hold.
		cell := func(s string) string {
			switch {
			case s == "":
				return "-"
			case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
				return strconv.Quote(s)
			}
			return s
		}
		for _, n := range f.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(n.Name), cell(n.Supports), cell(n.Reason), cell(n.FailClosed), cell(n.Version))
		}
		return tw.Flush()
	}
	return fmt.Errorf("output format %q: want one of %s", format, strings.Join(FleetFormats, ", "))
}

// ValidFleetFormat reports whether format is one of FleetFormats.
func ValidFleetFormat(format string) bool { return slices.Contains(FleetFormats, format) }
