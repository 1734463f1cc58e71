package manifests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Where the chart and its renderings are, relative to the module root.
const (
	ChartDir     = "contrib/helm/cgdelegate"
	PlainDir     = "contrib/kubernetes"
	EmbeddedDir  = "integration/internal/manifests/shipped"
	ReleaseName  = "cgdelegate"
	Namespace    = "kube-system"
	usernsPolicy = "writable-cgroups-userns-policy.yaml"
	// PlacementPolicy is the MutatingAdmissionPolicy of placement, which
	// the chart renders only where the API server serves
	// MutatingAdmissionPolicyAPI (Kubernetes 1.36+).
	PlacementPolicy = "placement-policy.yaml"
	// MutatingAdmissionPolicyAPI is the API placement needs, as helm's
	// .Capabilities.APIVersions (and --api-versions) name it.
	MutatingAdmissionPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
)

// embedded are the rendered files the package also keeps in EmbeddedDir.
var embedded = []string{DaemonSetFile, ConfigMapFile}

// header starts every generated file; usernsHeader the user-namespace
// policy, which the defaults do not render.
const (
	header = "# Rendered from contrib/helm/cgdelegate with its default values in\n" +
		"# namespace " + Namespace + " by `make manifests`: edit the chart, not this file.\n#\n"
	usernsHeader = "# Rendered from contrib/helm/cgdelegate with its default values and\n" +
		"# admissionPolicy.requireUserNamespace=true by `make manifests`: edit the\n" +
		"# chart, not this file.\n#\n"
	placementHeader = "# Rendered from contrib/helm/cgdelegate with its default values, for an\n" +
		"# API server that serves " + MutatingAdmissionPolicyAPI + "\n" +
		"# (Kubernetes 1.36+), by `make manifests`: edit the chart, not this file.\n" +
		"# Optional: apply it on 1.36+ (docs/deploying.md, \"Placement\").\n#\n"
)

// ErrRender is wrapped by every Split and Generate problem with helm's
// output.
var ErrRender = errors.New("render")

// Helm runs `go tool helm args...` in the module root and returns its
// standard output; its standard error is in the error. helm is built
// without cgo, as `make chart` builds it, so there is one build of it.
func Helm(ctx context.Context, root string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "helm"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go tool helm %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// Template renders the chart in root with the given extra helm arguments
// (e.g. --set k=v) and splits the output by template file.
func Template(ctx context.Context, root string, args ...string) (map[string][]byte, error) {
	out, err := Helm(ctx, root, append([]string{"template", ReleaseName, ChartDir, "--namespace", Namespace}, args...)...)
	if err != nil {
		return nil, err
	}
	return Split(out)
}

// Split splits `helm template` output into its template files, by the
// "# Source: <chart>/templates/<file>" line helm puts before each
// document. The documents of one template are joined with "---"; each
// file ends in one newline. NOTES.txt is not in helm template's output.
func Split(out []byte) (map[string][]byte, error) {
	files := map[string][]string{}
	var order []string
	for i, doc := range strings.Split("\n"+string(out), "\n---\n") {
		doc = strings.TrimSpace(doc)
		if doc == "" || doc == "---" {
			continue
		}
		first, rest, _ := strings.Cut(doc, "\n")
		src, ok := strings.CutPrefix(first, "# Source: ")
		if !ok {
			return nil, fmt.Errorf("%w: document %d starts with %q, want a # Source: line", ErrRender, i, first)
		}
		dir, name := path.Split(src)
		if path.Base(path.Clean(dir)) != "templates" || name == "" {
			return nil, fmt.Errorf("%w: document %d: source %q is not a chart template", ErrRender, i, src)
		}
		if !slices.Contains(order, name) {
			order = append(order, name)
		}
		files[name] = append(files[name], strings.TrimSpace(rest))
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no documents", ErrRender)
	}
	m := make(map[string][]byte, len(files))
	for _, name := range order {
		m[name] = []byte(strings.Join(files[name], "\n---\n") + "\n")
	}
	return m, nil
}

// Generate renders everything `make manifests` writes, by path relative to
// the module root: every template the default values render, as
// contrib/kubernetes/<template>; the user-namespace policy, which is off by
// default, rendered with admissionPolicy.requireUserNamespace=true; the
// placement policy, which helm template renders only with the API named
// (--api-versions, as helm install on a 1.36+ cluster finds it), so that the
// default install applies to any Kubernetes 1.30+; and the copies of the
// DaemonSet and ConfigMap the package embeds.
//
// Helm hooks (the pre-delete Job that withdraws the node label, and its
// RBAC) are left out: kubectl apply would create them at once, and nothing
// runs them at kubectl delete. docs/deploying.md says what to run instead.
func Generate(ctx context.Context, root string) (map[string][]byte, error) {
	def, err := Template(ctx, root, "--no-hooks")
	if err != nil {
		return nil, err
	}
	if _, ok := def[usernsPolicy]; ok {
		return nil, fmt.Errorf("%w: %s rendered with the default values; admissionPolicy.requireUserNamespace should default to false", ErrRender, usernsPolicy)
	}
	userns, err := Template(ctx, root, "--set", "admissionPolicy.requireUserNamespace=true", "--show-only", "templates/"+usernsPolicy)
	if err != nil {
		return nil, err
	}
	def[usernsPolicy] = userns[usernsPolicy]
	if _, ok := def[PlacementPolicy]; ok {
		return nil, fmt.Errorf("%w: %s rendered without the API server's %s", ErrRender, PlacementPolicy, MutatingAdmissionPolicyAPI)
	}
	placement, err := Template(ctx, root, "--api-versions", MutatingAdmissionPolicyAPI, "--show-only", "templates/"+PlacementPolicy)
	if err != nil {
		return nil, err
	}
	def[PlacementPolicy] = placement[PlacementPolicy]
	out := map[string][]byte{}
	for name, data := range def {
		h := header
		switch name {
		case usernsPolicy:
			h = usernsHeader
		case PlacementPolicy:
			h = placementHeader
		}
		out[filepath.Join(PlainDir, name)] = append([]byte(h), data...)
	}
	for _, name := range embedded {
		data, ok := def[name]
		if !ok {
			return nil, fmt.Errorf("%w: the default values render no %s", ErrRender, name)
		}
		out[filepath.Join(EmbeddedDir, name)] = append([]byte(header), data...)
	}
	return out, nil
}
