package ociimage

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ErrReference is wrapped when a push target is not an image reference.
var ErrReference = errors.New("image reference")

// PushOptions say how to reach the registry.
type PushOptions struct {
	// PlainHTTP talks HTTP, not HTTPS, to the registry (a registry
	// without TLS). Loopback and localhost registries get HTTP anyway.
	PlainHTTP bool
	// Remote are more go-containerregistry options (a transport, an
	// authenticator); the default authenticates with the Docker config
	// (~/.docker/config.json) as `docker login` writes it.
	Remote []remote.Option
}

// PushArchive uploads the one image or image index of the archive at path
// (as Release.Write or WriteLayout wrote it) to ref (host[:port]/repo:tag):
// every blob, each image manifest, then the index under the tag. It
// returns the digest of what ref now names, the same as in the archive.
func PushArchive(ctx context.Context, path, ref string, opts PushOptions) (v1.Hash, error) {
	f, err := os.Open(path)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	a, cleanup, err := ReadArchive(f, "")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%s: %w", path, err)
	}
	defer cleanup()
	return Push(ctx, a, ref, opts)
}

// Push uploads an archived image or index to ref.
func Push(ctx context.Context, a Archived, ref string, opts PushOptions) (v1.Hash, error) {
	var nameOpts []name.Option
	if opts.PlainHTTP {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%w: %q: %w", ErrReference, ref, err)
	}
	ropts := append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts.Remote...)
	digest, err := a.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if a.Index != nil {
		err = remote.WriteIndex(r, a.Index, ropts...)
	} else {
		err = remote.Write(r, a.Image, ropts...)
	}
	if err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", r, err)
	}
	return digest, nil
}
