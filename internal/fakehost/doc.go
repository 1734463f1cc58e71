// Package fakehost builds a fake host made of files in one directory: a
// mount table at proc/1/mountinfo, a cgroup tree whose plain files stand in
// for cgroupfs, a /proc with cgroup namespace links, a /sys, a bundle and
// the plugin's output files. The hook tests, the nri tests, the in-process
// runtime tests (integration/internal/inproc) and the in-process demo all use it, so
// they describe hosts the same way.
//
// Use it only from tests and the in-process demo: New sets
// github.com/opencontainers/cgroups TestMode for the whole process. Never
// import it from the plugin or the hook. Tests whose subject is parsing one
// specific mountinfo line keep that line as an inline fixture instead.
//
// New (or NewInDir) returns a healthy host: cgroup2 with nsdelegate at the
// cgroup root. Tests then break one thing each: Remount changes the mount
// table as a remount would, SetPodBounds or SetCgroupNS change one file.
package fakehost
