// Package topologytest builds synthetic sysfs CPU topology trees for tests:
// the files internal/cpumanager/topology discovery reads, written from
// literal descriptions ([Machine], [Core], [Node]) rather than from a
// topology model, so a test that discovers a tree and compares the result
// with an expected model compares two independent descriptions.
//
// Use it in tests of any package that needs a host topology: [Tree.FS]
// feeds topology.DiscoverFS, [Tree.Write] puts the tree in a directory for
// code that takes a sysfs root path. The named machines ([DualSocketHT],
// [NPS4], [EPYC256], [Offline], [Hybrid], [NoNUMA]) are the shared
// fixtures; build a [Machine] literal for anything else.
//
// Do not use it for real captured sysfs trees: those are .tar.gz files
// under internal/cpumanager/topology/testdata, made by testdata/capture.sh.
// Nothing here reads the host. The package does not import
// internal/cpumanager/topology, so that package's own tests can use it.
package topologytest
