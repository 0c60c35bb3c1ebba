package store

import (
	"slices"
	"sync"
	"sync/atomic"
)

// graph is the in-memory picture the feed needs without touching SQLite:
// who is connected to whom, and the time of everyone's newest moment.
//
// People are interned to dense int32 indexes so that 10,000 people with 150
// connections each cost 6 MB of slices rather than 1.5 million map entries.
type graph struct {
	mu    sync.RWMutex
	index map[string]int32
	nodes []*node
}

// node is one person. newest and checked are atomics so that posts and feeds
// update them without the graph lock.
type node struct {
	id      string
	newest  atomic.Int64 // unix ms of the newest moment, 0 for none
	checked atomic.Int64 // store clock (unix ms) when newest was last known true
	conns   []int32      // guarded by graph.mu

	headMu  sync.Mutex           // serialises head loads and updates
	head    atomic.Pointer[head] // nil: not cached
	stamp   fileStamp            // guarded by headMu: the file when head was loaded
	stamped bool                 // guarded by headMu: stamp can reveal the next write

	usage mediaUsage // the person's storage against their quota (media.go)
}

func newGraph() *graph {
	return &graph{index: make(map[string]int32)}
}

// add interns id and returns its node.
func (g *graph) add(id string, newest, checked int64) *node {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addLocked(id, newest, checked)
}

func (g *graph) addLocked(id string, newest, checked int64) *node {
	if i, ok := g.index[id]; ok {
		return g.nodes[i]
	}
	n := &node{id: id}
	n.newest.Store(newest)
	n.checked.Store(checked)
	i := int32(len(g.nodes))
	g.nodes = append(g.nodes, n)
	g.index[id] = i
	return n
}

func (g *graph) node(id string) *node {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if i, ok := g.index[id]; ok {
		return g.nodes[i]
	}
	return nil
}

// connect links a and b both ways; unknown ids are ignored.
func (g *graph) connect(a, b string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ia, oka := g.index[a]
	ib, okb := g.index[b]
	if !oka || !okb {
		return
	}
	g.nodes[ia].conns = insertSorted(g.nodes[ia].conns, ib)
	g.nodes[ib].conns = insertSorted(g.nodes[ib].conns, ia)
}

func (g *graph) disconnect(a, b string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ia, oka := g.index[a]
	ib, okb := g.index[b]
	if !oka || !okb {
		return
	}
	g.nodes[ia].conns = deleteSorted(g.nodes[ia].conns, ib)
	g.nodes[ib].conns = deleteSorted(g.nodes[ib].conns, ia)
}

// remove takes id out of the graph and off every side of its connections,
// and returns its node (nil if unknown). Indexes are dense, so the slot
// keeps the node (without connections; its head is dropped by the caller)
// until the next start: a deletion costs a few hundred bytes, and
// deletions are rare.
func (g *graph) remove(id string) *node {
	g.mu.Lock()
	defer g.mu.Unlock()
	i, ok := g.index[id]
	if !ok {
		return nil
	}
	n := g.nodes[i]
	for _, j := range n.conns {
		g.nodes[j].conns = deleteSorted(g.nodes[j].conns, i)
	}
	n.conns = nil
	delete(g.index, id)
	return n
}

// connected reports whether a and b are connected.
func (g *graph) connected(a, b string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	ia, oka := g.index[a]
	ib, okb := g.index[b]
	if !oka || !okb {
		return false
	}
	_, found := slices.BinarySearch(g.nodes[ia].conns, ib)
	return found
}

// count returns the number of connections of id.
func (g *graph) count(id string) int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if i, ok := g.index[id]; ok {
		return len(g.nodes[i].conns)
	}
	return 0
}

// circle appends the node of id to dst and, when withConns is set, the
// nodes of everyone connected to id.
func (g *graph) circle(id string, withConns bool, dst []*node) []*node {
	g.mu.RLock()
	defer g.mu.RUnlock()
	i, ok := g.index[id]
	if !ok {
		return dst
	}
	n := g.nodes[i]
	dst = append(dst, n)
	if !withConns {
		return dst
	}
	for _, j := range n.conns {
		dst = append(dst, g.nodes[j])
	}
	return dst
}

// raiseNewest sets n.newest to at least at.
func (n *node) raiseNewest(at int64) {
	for {
		old := n.newest.Load()
		if at <= old || n.newest.CompareAndSwap(old, at) {
			return
		}
	}
}

func insertSorted(s []int32, v int32) []int32 {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}

func deleteSorted(s []int32, v int32) []int32 {
	i, found := slices.BinarySearch(s, v)
	if !found {
		return s
	}
	return slices.Delete(s, i, i+1)
}

// nodePool recycles the slices candidates gathers nodes into (151 pointers).
var nodePool = sync.Pool{New: func() any { s := make([]*node, 0, 160); return &s }}
