//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package keystore

import "context"

// lockSupported reports whether lockExclusive excludes other processes.
const lockSupported = false

// lockExclusive is a no-op where flock is not available: only one process
// may use a key file there (see FileStore).
func lockExclusive(context.Context, string) (func(), error) { return func() {}, nil }
