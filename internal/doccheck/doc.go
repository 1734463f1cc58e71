// Package doccheck checks the documentation (README.md, CHANGELOG.md,
// docs/*.md, docs/*/*.md and the READMEs under contrib/) in its tests: the
// relative links, that the manifests the pages show are the ones the VM
// suite applies, that docs/troubleshooting.md has an entry for every
// refusal cause and every error the code defines, and that the names a
// page gives exist in the code. Its one piece of code, Blocks, reads a page's
// fenced code blocks and the marks before them; contrib/kubernetes uses it
// to check every YAML block of the docs against the chart's admission
// policy (TestDocsManifests).
//
// Every relative link must point to a file or directory that exists, and
// every #anchor, in the same file or as file.md#anchor, must match a heading
// of the target, slugged as GitHub slugs headings: lowercase, spaces to '-',
// punctuation other than '-' and '_' dropped, and a repeated heading suffixed
// -1, -2, and so on. Links in fenced code blocks and in code spans are not
// links. External links (http:, https:, mailto: and any other scheme) are not
// checked: the test runs without a network.
//
// A page shows a tested manifest as a fenced block right after the line
// <!-- manifest: PATH -->, PATH from the module's root; the block must equal
// the file byte for byte, and every file of
// integration/guest/testdata/stories/ and the AppArmor profile
// internal/lsmprofile/cgdelegate-engines must be shown on some page.
//
// docs/troubleshooting.md needs a heading naming each cause of
// refusal.Causes in a code span (### `policy`: ...), and the text of each
// package-level sentinel under internal/, delegate/ and cmd/ in some code
// span of the page: errors.New("text"), also made a refusal where it is
// declared (refusal.New(refusal.Pinning, errors.New("text")), or a helper
// of its package that does so, pinningRefusal("text")); a refusal's entry
// is under its cause's heading.
//
// A page (but CHANGELOG.md, which names what releases removed) names only
// what the code has: every `make X` in its code spans and fenced blocks is
// a rule of the Makefile; every boot name (ctd24-...) in
// them is a variant of integration/internal/variant, and every code span
// that reads as a scenario (one identifier starting Cluster, Kubelet or
// Pinning, the words five or more scenarios share) and every name in
// CGD_SCENARIOS=... is a scenario there; every key of the project's
// domains (*.cgdelegate.io, cgdelegate.io/..., *.noderesource.dev), in
// prose too, is in a string of the Go code or the chart's templates. A
// name a page must keep after a rename (a dated measurement) is written in
// plain text, outside code.
//
// The user's guide (docs/*.md and docs/*/*.md but docs/development.md,
// docs/critest.md and docs/security.md, whose test column names each
// attack's test) does not narrate the test harness: it names no scenario
// (one of a single word, Restarts, only in a code span), no boot and none
// of the words "VM suite", "the emulator", "TCG", "qemu", "guest" outside
// marks and link destinations; docs/development.md says how the suite
// proves each step, and the guide links there.
//
// docs/metrics.md has a row for every metric a recorder with every option
// registers, with its type and its labels, and its table of refusal
// causes is refusal.Causes in order; a page (but CHANGELOG.md) names only
// those metrics
// (a histogram's _bucket, _sum and _count too), and a label matcher
// (cgdelegate_cpus{pool="exclusive"}) only their labels and the values
// they export.
//
// The tables that document the code's names are checked both ways:
// docs/configuration.md's key table has one row for every config key
// (optIn's as optIn.<key>) and no other, each with the key's default as
// the first code span of its default cell; its table of cgdelegate's flags
// lists exactly the plugin's flags but -version, and every one-dash flag
// in a code span of that page is a flag of one of the binaries (cmd/, the
// hook's options); docs/deploying.md's table of the chart's values names
// only values of values.yaml, and every one of them (a row for a map
// covers what is below it).
//
// Use it by running go test ./...; add a page to the check by putting it in
// docs/. It does not check the prose, the wording of the quick-start commands
// or that a page is linked from anywhere.
package doccheck
