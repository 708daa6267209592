//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package keystore

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// lockSupported reports whether lockExclusive excludes other processes.
const lockSupported = true

// lockExclusive opens (creating it with mode 0600 if needed) the lock file
// at path and takes an exclusive flock on it, which release drops. flock
// locks belong to an open file description, so each call excludes every
// other call, in this process or another, until released. While another
// holder keeps the lock it waits: blocked in flock if ctx can never be
// cancelled, otherwise polling so that ctx can end the wait.
func lockExclusive(ctx context.Context, path string) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	err = flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		if ctx.Done() == nil {
			err = flock(fd, syscall.LOCK_EX)
		} else {
			err = pollLock(ctx, fd)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		flock(fd, syscall.LOCK_UN)
		f.Close()
	}, nil
}

func pollLock(ctx context.Context, fd int) error {
	delay := 200 * time.Microsecond
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		err := flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		delay = min(2*delay, 20*time.Millisecond)
		t.Reset(delay)
	}
}

func flock(fd, how int) error {
	for {
		if err := syscall.Flock(fd, how); err != syscall.EINTR {
			return err
		}
	}
}
