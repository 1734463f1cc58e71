// Package config holds cgdelegate's configuration: one documented struct in
// three parts by when its keys take effect (Reloadable, Pinning,
// StartOnly), its defaults, YAML decoding, Validate, and the list of the
// keys that need a restart (RestartKeys, RestartChanges).
//
// Use it to turn a config file or an NRI Configure blob into a Config that
// the rest of the plugin can trust. It does no host I/O beyond reading the
// file it is given.
//
// Values are read as YAML 1.2 scalars, exactly as written: guard: off is the
// string "off", never the YAML 1.1 boolean false. A key that is present is
// used as it is, so maxDepth: 0 or cgroupRoot: "" is an error, not a
// request for the default; only an absent key takes the default.
package config
