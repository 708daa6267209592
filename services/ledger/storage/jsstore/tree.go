package jsstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/alpd-project/alpd/internal/bus"
)

var tenantToken = bus.TenantToken

// Tile sizes of the persisted tree state. A hash tile holds 256 stored
// hashes (8 KiB, the width of a C2SP tlog tile); a sequence tile holds the
// stream sequences of 512 leaves (4 KiB). Tiles are numbered from 0; only
// the last one of each kind is ever partial.
const (
	hashTile = 256
	seqTile  = 512
)

// errStale: the persisted tree state is missing or disagrees with itself or
// with the stream. The KV bucket is only a cache, so the caller rebuilds
// the tree from the stream.
var errStale = errors.New("ledger tree state is stale")

// snapshot is the "head" value of a person's persisted tree: how many
// leaves the tiles below it cover, the stream sequence of the last one and
// the root, against which a load checks what it reads.
type snapshot struct {
	V       int    `json:"v"`
	Size    int64  `json:"size"`
	LastSeq uint64 `json:"last_seq"`
	Root    []byte `json:"root"`
}

// tree is one person's log as far as this process knows it: tlog's stored
// hashes and each leaf's stream sequence, in tiles loaded from the KV
// bucket on demand. It is not safe for concurrent use: its logState's lock
// guards it.
type tree struct {
	key     string // KV key prefix "<tenant token>.<person>"
	size    int64  // leaves
	lastSeq uint64 // stream sequence of leaf size-1 (0 when empty)

	hashes map[int64][]tlog.Hash
	seqs   map[int64][]uint64
	dirtyH map[int64]bool
	dirtyS map[int64]bool

	// kvSize is the size of the snapshot the tiles not in memory belong to:
	// a tile is fetched from KV only below it.
	kvSize int64
	// savedSize is the size of the last snapshot written or loaded.
	savedSize int64
}

func newTree(key string) *tree {
	return &tree{key: key, hashes: map[int64][]tlog.Hash{}, seqs: map[int64][]uint64{},
		dirtyH: map[int64]bool{}, dirtyS: map[int64]bool{}}
}

func (t *tree) headKey() string         { return t.key + ".head" }
func (t *tree) hashKey(k int64) string  { return t.key + ".h." + strconv.FormatInt(k, 10) }
func (t *tree) seqKey(k int64) string   { return t.key + ".s." + strconv.FormatInt(k, 10) }
func (t *tree) hashCount() int64        { return tlog.StoredHashCount(t.size) }
func (t *tree) dirty() bool             { return len(t.dirtyH)+len(t.dirtyS) > 0 || t.savedSize != t.size }
func tileLen(total, k, width int64) int { return int(min(width, total-k*width)) }

// kvGetter reads one KV value; nil, nil when the key is absent.
type kvGetter func(ctx context.Context, key string) ([]byte, error)

func kvGet(kv jetstream.KeyValue) kvGetter {
	return func(ctx context.Context, key string) ([]byte, error) {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return e.Value(), nil
	}
}

// hashTileAt returns hash tile k, fetching it from KV if it is persisted
// and not in memory.
func (t *tree) hashTileAt(ctx context.Context, get kvGetter, k int64) ([]tlog.Hash, error) {
	if h, ok := t.hashes[k]; ok {
		return h, nil
	}
	want := tlog.StoredHashCount(t.kvSize)
	if k*hashTile >= want {
		return nil, nil // a new tile
	}
	raw, err := get(ctx, t.hashKey(k))
	if err != nil {
		return nil, fmt.Errorf("read tree tile %s: %w", t.hashKey(k), err)
	}
	n := tileLen(want, k, hashTile)
	if len(raw) < n*tlog.HashSize || len(raw)%tlog.HashSize != 0 {
		return nil, fmt.Errorf("%w: tile %s has %d bytes, want at least %d hashes", errStale, t.hashKey(k), len(raw), n)
	}
	hs := make([]tlog.Hash, n, hashTile)
	for i := range hs {
		copy(hs[i][:], raw[i*tlog.HashSize:])
	}
	t.hashes[k] = hs
	return hs, nil
}

func (t *tree) seqTileAt(ctx context.Context, get kvGetter, k int64) ([]uint64, error) {
	if s, ok := t.seqs[k]; ok {
		return s, nil
	}
	if k*seqTile >= t.kvSize {
		return nil, nil
	}
	raw, err := get(ctx, t.seqKey(k))
	if err != nil {
		return nil, fmt.Errorf("read tree tile %s: %w", t.seqKey(k), err)
	}
	n := tileLen(t.kvSize, k, seqTile)
	if len(raw) < n*8 || len(raw)%8 != 0 {
		return nil, fmt.Errorf("%w: tile %s has %d bytes, want at least %d sequences", errStale, t.seqKey(k), len(raw), n)
	}
	ss := make([]uint64, n, seqTile)
	for i := range ss {
		ss[i] = binary.BigEndian.Uint64(raw[i*8:])
	}
	t.seqs[k] = ss
	return ss, nil
}

// reader is a tlog.HashReader over the tree's stored hashes.
func (t *tree) reader(ctx context.Context, get kvGetter) tlog.HashReader {
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		count := t.hashCount()
		for i, x := range indexes {
			if x < 0 || x >= count {
				return nil, fmt.Errorf("stored hash %d of a tree with %d", x, count)
			}
			tile, err := t.hashTileAt(ctx, get, x/hashTile)
			if err != nil {
				return nil, err
			}
			if int(x%hashTile) >= len(tile) {
				return nil, fmt.Errorf("%w: stored hash %d missing", errStale, x)
			}
			out[i] = tile[x%hashTile]
		}
		return out, nil
	})
}

// seqOf returns the stream sequence of leaf i.
func (t *tree) seqOf(ctx context.Context, get kvGetter, i int64) (uint64, error) {
	if i < 0 || i >= t.size {
		return 0, fmt.Errorf("leaf %d of a log of %d", i, t.size)
	}
	tile, err := t.seqTileAt(ctx, get, i/seqTile)
	if err != nil {
		return 0, err
	}
	if int(i%seqTile) >= len(tile) {
		return 0, fmt.Errorf("%w: sequence of leaf %d missing", errStale, i)
	}
	return tile[i%seqTile], nil
}

// leafHash returns the hash of leaf i.
func (t *tree) leafHash(ctx context.Context, get kvGetter, i int64) (tlog.Hash, error) {
	hs, err := t.reader(ctx, get).ReadHashes([]int64{tlog.StoredHashIndex(0, i)})
	if err != nil {
		return tlog.Hash{}, err
	}
	return hs[0], nil
}

// root is the RFC 6962 root of the first n leaves.
func (t *tree) root(ctx context.Context, get kvGetter, n int64) (tlog.Hash, error) {
	return tlog.TreeHash(n, t.reader(ctx, get))
}

// apply appends the leaf stored at stream sequence seq as leaf t.size.
func (t *tree) apply(ctx context.Context, get kvGetter, seq uint64, leaf []byte) error {
	if seq <= t.lastSeq {
		return fmt.Errorf("leaf at sequence %d after %d", seq, t.lastSeq)
	}
	// The last tiles must be in memory before they grow.
	base := t.hashCount()
	if _, err := t.hashTileAt(ctx, get, base/hashTile); err != nil {
		return err
	}
	if _, err := t.seqTileAt(ctx, get, t.size/seqTile); err != nil {
		return err
	}
	add, err := tlog.StoredHashes(t.size, leaf, t.reader(ctx, get))
	if err != nil {
		return fmt.Errorf("stored hashes of leaf %d: %w", t.size, err)
	}
	for i, h := range add {
		x := base + int64(i)
		k := x / hashTile
		tile, err := t.hashTileAt(ctx, get, k)
		if err != nil {
			return err
		}
		if len(tile) != int(x%hashTile) {
			return fmt.Errorf("%w: hash tile %d holds %d hashes, appending %d", errStale, k, len(tile), x%hashTile)
		}
		t.hashes[k] = append(tile, h)
		t.dirtyH[k] = true
	}
	k := t.size / seqTile
	tile := t.seqs[k]
	if len(tile) != int(t.size%seqTile) {
		return fmt.Errorf("%w: sequence tile %d holds %d, appending %d", errStale, k, len(tile), t.size%seqTile)
	}
	t.seqs[k] = append(tile, seq)
	t.dirtyS[k] = true
	t.size++
	t.lastSeq = seq
	return nil
}

// reset forgets everything: the tree is rebuilt from the stream.
func (t *tree) reset() {
	*t = *newTree(t.key)
}

// loadSnapshot reads the persisted head and checks it against its own
// tiles (the root recomputed from the stored hashes). A missing head is an
// empty tree; an inconsistent one is errStale.
func (t *tree) loadSnapshot(ctx context.Context, get kvGetter) error {
	raw, err := get(ctx, t.headKey())
	if err != nil {
		return fmt.Errorf("read tree head %s: %w", t.headKey(), err)
	}
	if raw == nil {
		return nil
	}
	var s snapshot
	if err := json.Unmarshal(raw, &s); err != nil || s.V != 1 || s.Size < 0 || len(s.Root) != tlog.HashSize || (s.Size > 0) != (s.LastSeq > 0) {
		return fmt.Errorf("%w: head %s is malformed", errStale, t.headKey())
	}
	t.size, t.lastSeq, t.kvSize, t.savedSize = s.Size, s.LastSeq, s.Size, s.Size
	if s.Size == 0 {
		return nil
	}
	root, err := t.root(ctx, get, s.Size)
	if err != nil {
		return err
	}
	if root != tlog.Hash(s.Root) {
		return fmt.Errorf("%w: tiles of %s do not give the root of its head", errStale, t.key)
	}
	if seq, err := t.seqOf(ctx, get, s.Size-1); err != nil || seq != s.LastSeq {
		return fmt.Errorf("%w: sequence tiles of %s disagree with its head", errStale, t.key)
	}
	return nil
}

// kvWrite is one value of a snapshot.
type kvWrite struct {
	key   string
	value []byte
}

// snapshotWrites returns the writes that persist what changed since the
// last snapshot (dirty tiles first, the head last, so a head never names
// tiles that are not written yet) and marks the tree clean. If writing
// fails, markDirty puts the tiles back.
func (t *tree) snapshotWrites(ctx context.Context, get kvGetter) ([]kvWrite, error) {
	if !t.dirty() {
		return nil, nil
	}
	root, err := t.root(ctx, get, t.size)
	if err != nil {
		return nil, err
	}
	var out []kvWrite
	for k := range t.dirtyH {
		tile := t.hashes[k]
		buf := make([]byte, 0, len(tile)*tlog.HashSize)
		for _, h := range tile {
			buf = append(buf, h[:]...)
		}
		out = append(out, kvWrite{t.hashKey(k), buf})
	}
	for k := range t.dirtyS {
		tile := t.seqs[k]
		buf := make([]byte, 0, len(tile)*8)
		for _, s := range tile {
			buf = binary.BigEndian.AppendUint64(buf, s)
		}
		out = append(out, kvWrite{t.seqKey(k), buf})
	}
	head, _ := json.Marshal(snapshot{V: 1, Size: t.size, LastSeq: t.lastSeq, Root: root[:]})
	out = append(out, kvWrite{t.headKey(), head})
	clear(t.dirtyH)
	clear(t.dirtyS)
	t.savedSize = t.size
	return out, nil
}

// markDirty puts back the tiles of failed snapshot writes.
func (t *tree) markDirty(failed []kvWrite) {
	for _, w := range failed {
		var k int64
		switch {
		case parseTileKey(w.key, t.key+".h.", &k):
			t.dirtyH[k] = true
		case parseTileKey(w.key, t.key+".s.", &k):
			t.dirtyS[k] = true
		default:
			t.savedSize = -1 // the head: write it again
		}
	}
}

func parseTileKey(key, prefix string, k *int64) bool {
	if len(key) <= len(prefix) || key[:len(prefix)] != prefix {
		return false
	}
	n, err := strconv.ParseInt(key[len(prefix):], 10, 64)
	*k = n
	return err == nil
}

// Snapshot renders the KV snapshot (tiles and head, keyed as in the trees
// bucket) of a log whose leaves are stored at the given stream sequences:
// what a store writes after appending them. It lets tools and benchmarks
// that build logs offline leave them as a running ledger would.
func Snapshot(tenant, person string, leaves [][]byte, seqs []uint64) (map[string][]byte, error) {
	if len(leaves) != len(seqs) {
		return nil, errors.New("ledger: snapshot needs one sequence per leaf")
	}
	t := newTree(tenantToken(tenant) + "." + person)
	none := func(context.Context, string) ([]byte, error) { return nil, nil }
	for i, leaf := range leaves {
		if err := t.apply(context.Background(), none, seqs[i], leaf); err != nil {
			return nil, err
		}
	}
	writes, err := t.snapshotWrites(context.Background(), none)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(writes))
	for _, w := range writes {
		out[w.key] = w.value
	}
	return out, nil
}
