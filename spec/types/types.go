// Package types holds ALP's built-in message types: one JSON Schema
// (2020-12) file per type and version, named "<name>.v<N>.json" for the
// type "<name>/v<N>". The files are the format other brokers read, so they
// live in the public spec tree; this package only embeds them in the binary
// (README.md describes the x-alp-* keywords they carry).
package types

import (
	"embed"
	"io/fs"
)

//go:embed *.json
var files embed.FS

// Files returns the built-in schema files, read-only.
func Files() fs.FS { return files }
