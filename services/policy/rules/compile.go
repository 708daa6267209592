package rules

import (
	"container/list"
	"crypto/sha256"
	"iter"
	"strings"
	"sync"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	xast "github.com/cedar-policy/cedar-go/x/exp/ast"
)

// Compiled is a party's set ready for evaluation: cedar-go policies (each
// already compiled to an evaluator by cedar-go when parsed) in source
// order, with what a denial reports. Immutable; share it freely.
type Compiled struct {
	Party  Party
	Hash   string
	ids    []cedar.PolicyID
	reason []string
	forbid []bool
	pol    []*cedar.Policy
	index  map[cedar.PolicyID]int
	// reads is what of a field the set's policies look at; DecideMessage
	// reuses this set's answer for fields that agree on it.
	reads fieldMask
}

// Compile turns a validated set into its evaluator. Callers on the hot
// path go through Cache so this runs once per (party, set version).
func Compile(s *Set) *Compiled {
	c := &Compiled{Party: s.Party, Hash: s.Hash, index: make(map[cedar.PolicyID]int, len(s.Policies))}
	for i, p := range s.Policies {
		id := cedar.PolicyID(p.ID)
		c.ids = append(c.ids, id)
		c.reason = append(c.reason, p.Reason)
		c.forbid = append(c.forbid, p.Effect == cedar.Forbid)
		c.pol = append(c.pol, s.parsed[i])
		c.index[id] = i
		c.reads |= fieldReads((*xast.Policy)(s.parsed[i].AST()))
	}
	return c
}

// fieldMask is the set of a field's attributes a policy set reads.
type fieldMask uint8

const (
	readsType fieldMask = 1 << iota
	readsClass
	readsFreeText
	readsCommits
	readsAll // pointer, the resource as a whole, or a field entity literal
)

// project zeroes what the set does not read, so two fields with equal
// projections get the same answer from this set.
func (m fieldMask) project(f Field) Field {
	if m&readsAll != 0 {
		return f
	}
	var p Field
	if m&readsType != 0 {
		p.Type = f.Type
	}
	if m&readsClass != 0 {
		p.Class = f.Class
	}
	if m&readsFreeText != 0 {
		p.FreeText = f.FreeText
	}
	if m&readsCommits != 0 {
		p.Commits = f.Commits
	}
	return p
}

// fieldReads reports, conservatively, which field attributes a policy can
// see: attributes read as resource.<name> (or tested with has); anything
// else that touches the resource — a constrained resource scope, the
// variable used on its own, a field entity literal — counts as reading
// everything.
func fieldReads(p *xast.Policy) fieldMask {
	switch p.Resource.(type) {
	case xast.ScopeTypeAll, xast.ScopeTypeIs:
	default:
		return readsAll
	}
	var m fieldMask
	uses, viaAttr := 0, 0
	attr := func(arg xast.IsNode, name types.String) {
		if v, ok := arg.(xast.NodeTypeVariable); !ok || v.Name != "resource" {
			return
		}
		viaAttr++
		switch name {
		case "type":
			m |= readsType
		case "class":
			m |= readsClass
		case "freetext":
			m |= readsFreeText
		case "commits":
			m |= readsCommits
		default:
			m |= readsAll
		}
	}
	for _, cond := range p.Conditions {
		xast.Inspect(xast.NewNode(cond.Body), func(n xast.IsNode) bool {
			switch n := n.(type) {
			case xast.NodeTypeAccess:
				attr(n.Arg, n.Value)
			case xast.NodeTypeHas:
				attr(n.Arg, n.Value)
			case xast.NodeTypeVariable:
				if n.Name == "resource" {
					uses++
				}
			case xast.NodeValue:
				if strings.Contains(string(n.Value.MarshalCedar()), string(entityField)+"::") {
					m |= readsAll
				}
			}
			return true
		})
	}
	if uses > viaAttr {
		m |= readsAll
	}
	return m
}

// All implements cedar.PolicyIterator in source order, so evaluation and
// the order of denials are deterministic (a cedar.PolicySet is a map).
func (c *Compiled) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for i, p := range c.pol {
			if !yield(c.ids[i], p) {
				return
			}
		}
	}
}

// Cache holds compiled sets keyed by party and content hash, bounded LRU.
// Keying by content means the many people still on the default template
// share one compiled set, and a new version is a new key: nothing to
// invalidate. Safe for concurrent use.
type Cache struct {
	engine *Engine
	max    int

	mu    sync.Mutex
	order *list.List // front = most recently used; values are cacheEntry
	byKey map[cacheKey]*list.Element
}

type cacheKey struct {
	party Party
	hash  [sha256.Size]byte
}

type cacheEntry struct {
	key  cacheKey
	comp *Compiled
}

// NewCache builds a cache of at most max compiled sets over engine.
func NewCache(engine *Engine, max int) *Cache {
	if max < 1 {
		max = 1
	}
	return &Cache{engine: engine, max: max, order: list.New(), byKey: make(map[cacheKey]*list.Element)}
}

// Get returns the compiled form of party's set text, validating and
// compiling it on a miss. Stored sets were validated on write, so a miss
// failing here means the entity model changed under them.
func (c *Cache) Get(party Party, text []byte) (*Compiled, error) {
	k := cacheKey{party: party, hash: sha256.Sum256(text)}
	c.mu.Lock()
	if el, ok := c.byKey[k]; ok {
		c.order.MoveToFront(el)
		c.mu.Unlock()
		return el.Value.(cacheEntry).comp, nil
	}
	c.mu.Unlock()

	// Validate outside the lock: it is the expensive part, and two
	// goroutines compiling the same text at once only waste work.
	set, err := c.engine.Validate(party, text)
	if err != nil {
		return nil, err
	}
	comp := Compile(set)

	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		c.order.MoveToFront(el)
		return el.Value.(cacheEntry).comp, nil
	}
	c.byKey[k] = c.order.PushFront(cacheEntry{key: k, comp: comp})
	for c.order.Len() > c.max {
		last := c.order.Back()
		delete(c.byKey, last.Value.(cacheEntry).key)
		c.order.Remove(last)
	}
	return comp, nil
}

// Len is the number of compiled sets held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
