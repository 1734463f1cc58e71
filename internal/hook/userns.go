package hook

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// delegateUserNS hands the container cgroup to the host IDs the container's
// process user (spec process.user, root unless the pod says otherwise) maps
// to. That is the UID runc's systemd cgroup driver hands it to as well
// (it chowns only the UID), so with either driver the two never disagree.
// Without a user namespace, or when the user maps to host root, nothing
// changes.
func delegateUserNS(r *run) error {
	spec, err := readSpec(r.state.Bundle)
	if err != nil {
		return err
	}
	uid, gid, userns, err := hostOwner(spec, r.pidDir)
	if err != nil {
		return fmt.Errorf("container %q: %w", r.state.ID, err)
	}
	if !userns || (uid == 0 && gid == 0) {
		return nil
	}
	if err := r.fs.Delegate(r.cgroup, uid, gid); err != nil {
		return fmt.Errorf("delegate cgroup %q of user-namespaced container %q to %d:%d: %w", r.cgroup, r.state.ID, uid, gid, err)
	}
	return nil
}

// readSpec reads <bundle>/config.json.
func readSpec(bundle string) (*specs.Spec, error) {
	file := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w; the runtime must pass the bundle directory in the OCI state", ErrBundleConfig, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBundleConfig, file, err)
	}
	return &spec, nil
}

// hostOwner returns the host UID and GID that the container's process user
// maps to, and whether the container has a user namespace at all. Mappings
// come from the spec; a container that joins an existing user namespace by
// path may carry none, and then the init's <proc>/<pid>/{uid,gid}_map are
// read.
func hostOwner(spec *specs.Spec, pidDir string) (uid, gid int, userns bool, err error) {
	if spec.Linux == nil {
		return 0, 0, false, nil
	}
	userns = len(spec.Linux.UIDMappings) > 0 || len(spec.Linux.GIDMappings) > 0 ||
		slices.ContainsFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.UserNamespace })
	if !userns {
		return 0, 0, false, nil
	}
	uids, gids := spec.Linux.UIDMappings, spec.Linux.GIDMappings
	if len(uids) == 0 {
		if uids, err = readIDMap(filepath.Join(pidDir, "uid_map")); err != nil {
			return 0, 0, true, err
		}
	}
	if len(gids) == 0 {
		if gids, err = readIDMap(filepath.Join(pidDir, "gid_map")); err != nil {
			return 0, 0, true, err
		}
	}
	var user specs.User
	if spec.Process != nil {
		user = spec.Process.User
	}
	var ok bool
	if uid, ok = mapID(uids, user.UID); !ok {
		return 0, 0, true, fmt.Errorf("%w: no uid mapping covers container uid %d (the process user) in %v; map it to a host UID (linux.uidMappings)", ErrUnmappedRoot, user.UID, uids)
	}
	if gid, ok = mapID(gids, user.GID); !ok {
		return 0, 0, true, fmt.Errorf("%w: no gid mapping covers container gid %d (the process group) in %v; map it to a host GID (linux.gidMappings)", ErrUnmappedRoot, user.GID, gids)
	}
	return uid, gid, true, nil
}

// mapID returns the host ID that container ID id maps to.
func mapID(maps []specs.LinuxIDMapping, id uint32) (int, bool) {
	for _, m := range maps {
		if id >= m.ContainerID && uint64(id) < uint64(m.ContainerID)+uint64(m.Size) {
			return int(m.HostID + (id - m.ContainerID)), true
		}
	}
	return 0, false
}

// readIDMap reads a /proc/<pid>/uid_map or gid_map file.
func readIDMap(file string) ([]specs.LinuxIDMapping, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read ID map: %w", err)
	}
	defer f.Close()
	maps, err := parseIDMap(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return maps, nil
}

// parseIDMap parses the "container host size" lines of an ID map.
func parseIDMap(r io.Reader) ([]specs.LinuxIDMapping, error) {
	var maps []specs.LinuxIDMapping
	s := bufio.NewScanner(r)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 {
			return nil, fmt.Errorf("bad ID map line %q", s.Text())
		}
		var v [3]uint32
		for i, f := range fields {
			n, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("bad ID map line %q: %w", s.Text(), err)
			}
			v[i] = uint32(n)
		}
		maps = append(maps, specs.LinuxIDMapping{ContainerID: v[0], HostID: v[1], Size: v[2]})
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(maps) == 0 {
		return nil, errors.New("empty ID map")
	}
	return maps, nil
}
