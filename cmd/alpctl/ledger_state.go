package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// ledgerState is what alpctl remembers between runs: for each ledger
// origin, the last checkpoint it verified. It is the person's own evidence
// — a checkpoint held outside the broker — against which the next export
// must prove consistency. Without it, an operator could rewrite history
// and re-sign, and a verifier looking only at today's export would not see
// it.
type ledgerState struct {
	Version int                         `json:"version"`
	Ledgers map[string]rememberedLedger `json:"ledgers"`
}

type rememberedLedger struct {
	// Checkpoint is the signed checkpoint text as verified, so it can be
	// shown to others (or passed back with --since).
	Checkpoint string `json:"checkpoint"`
	Size       uint64 `json:"size"`
	Seen       string `json:"seen"`
}

const ledgerStateVersion = 1

// defaultLedgerStatePath follows the XDG base directory spec.
func defaultLedgerStatePath() string {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "alpctl", "ledgers.json")
}

// loadLedgerState reads the state file; a missing file is an empty state.
// A damaged file is an error, never silently reset: forgetting a
// checkpoint is exactly what an attacker would want.
func loadLedgerState(path string) (*ledgerState, error) {
	st := &ledgerState{Version: ledgerStateVersion, Ledgers: map[string]rememberedLedger{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state %s: %w", path, err)
	}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("state %s is damaged (%v); move it aside only if you know why", path, err)
	}
	if st.Version != ledgerStateVersion {
		return nil, fmt.Errorf("state %s has version %d, this alpctl knows %d", path, st.Version, ledgerStateVersion)
	}
	if st.Ledgers == nil {
		st.Ledgers = map[string]rememberedLedger{}
	}
	return st, nil
}

// checkpoint returns the remembered checkpoint of origin, if any.
func (s *ledgerState) checkpoint(origin string) (*ledgerlog.Checkpoint, error) {
	r, ok := s.Ledgers[origin]
	if !ok {
		return nil, nil
	}
	cp, err := ledgerlog.CheckpointText([]byte(r.Checkpoint))
	if err != nil || cp.Origin != origin || cp.Size != r.Size {
		return nil, fmt.Errorf("remembered checkpoint of %s is damaged: %v", origin, err)
	}
	return &cp, nil
}

func (s *ledgerState) remember(cp ledgerlog.Checkpoint, signed []byte, now time.Time) {
	s.Ledgers[cp.Origin] = rememberedLedger{Checkpoint: string(signed), Size: cp.Size, Seen: now.UTC().Format(time.RFC3339)}
}

// save writes the state atomically (temporary file, fsync, rename, fsync
// of the directory), readable only by its owner.
func (s *ledgerState) save(path string) (err error) {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".ledgers-*.json")
	if err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
