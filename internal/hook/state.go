package hook

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// maxStateSize bounds what is read from stdin; a state is a few KiB.
const maxStateSize = 4 << 20

// ReadState decodes the OCI state a runtime passes to a hook on stdin and
// checks the fields the hook needs: a pid and an absolute bundle path.
func ReadState(r io.Reader) (specs.State, error) {
	var st specs.State
	data, err := io.ReadAll(io.LimitReader(r, maxStateSize+1))
	if err != nil {
		return st, fmt.Errorf("%w: read: %w", ErrBadState, err)
	}
	if len(data) > maxStateSize {
		return st, fmt.Errorf("%w: more than %d bytes; run this only as an OCI hook", ErrBadState, maxStateSize)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("%w: %w; run this only as an OCI hook, which gets the container state as JSON on stdin", ErrBadState, err)
	}
	switch {
	case st.Pid <= 0:
		return st, fmt.Errorf("%w: container %q has pid %d; inject the hook at createRuntime, when the container process exists", ErrBadState, st.ID, st.Pid)
	case !filepath.IsAbs(st.Bundle):
		return st, fmt.Errorf("%w: container %q has bundle %q, want an absolute path", ErrBadState, st.ID, st.Bundle)
	}
	return st, nil
}
