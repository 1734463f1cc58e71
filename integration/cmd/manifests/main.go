// Command manifests writes the plain manifests of contrib/kubernetes (and
// the copies integration/internal/manifests embeds) rendered from the Helm
// chart contrib/helm/cgdelegate with its default values: `make manifests`.
// Run it from the module root.
package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/cgdelegate/cgdelegate/integration/internal/manifests"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	files, err := manifests.Generate(ctx, ".")
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(name, files[name], 0o644); err != nil {
			return err
		}
		fmt.Println(name)
	}
	return nil
}
