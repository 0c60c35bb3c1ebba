package store

import (
	"slices"
	"sync"
	"sync/atomic"
)

// graph is who is connected to whom and everyone's newest moment time, for
// the feed. Dense int32 indexes: 10,000 people x 150 connections in 6 MB.
// Connections load on first use (Store.loadConns): all at start held up
// people-10k's start (bench/THRESHOLDS.md); changes leave an unloaded
// node's list alone.
type graph struct {
	mu    sync.RWMutex
	index map[string]int32
	nodes []*node
	// changes counts the connection changes applied (connect, disconnect,
	// remove). A list read from the directory is installed only if none
	// was applied while it was read: see Store.loadConns.
	changes uint64
}

// node is one person. newest and checked are atomics so that posts and feeds
// update them without the graph lock.
type node struct {
	id      string
	newest  atomic.Int64 // unix ms of the newest moment, 0 for none
	checked atomic.Int64 // store clock (unix ms) when newest was last known true
	conns   []int32      // guarded by graph.mu; sorted; meaningful once loaded
	loaded  bool         // guarded by graph.mu: conns were read from the directory

	headMu  sync.Mutex           // serialises head loads and updates
	head    atomic.Pointer[head] // nil: not cached
	stamp   fileStamp            // guarded by headMu: the file when head was loaded
	stamped bool                 // guarded by headMu: stamp can reveal the next write

	usage mediaUsage // the person's storage against their quota (person_media.go)
}

func newGraph() *graph {
	return &graph{index: make(map[string]int32)}
}

// add interns id and returns its node. A new node's connections are not
// loaded: whoever needs them reads them from the directory.
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

// connect links a and b both ways, on the sides that are loaded; unknown
// ids are ignored. Like disconnect and remove, it runs after the change
// committed (under Store.connMu), and applying it twice changes nothing.
func (g *graph) connect(a, b string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.changes++
	ia, oka := g.index[a]
	ib, okb := g.index[b]
	if !oka || !okb {
		return
	}
	if na := g.nodes[ia]; na.loaded {
		na.conns = insertSorted(na.conns, ib)
	}
	if nb := g.nodes[ib]; nb.loaded {
		nb.conns = insertSorted(nb.conns, ia)
	}
}

func (g *graph) disconnect(a, b string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.changes++
	ia, oka := g.index[a]
	ib, okb := g.index[b]
	if !oka || !okb {
		return
	}
	if na := g.nodes[ia]; na.loaded {
		na.conns = deleteSorted(na.conns, ib)
	}
	if nb := g.nodes[ib]; nb.loaded {
		nb.conns = deleteSorted(nb.conns, ia)
	}
}

// remove takes id off every loaded list (a binary search each, under 1 ms
// for 10,000 people; id's own list may be empty if loaded after the delete)
// and returns its node, nil if unknown. Its slot stays until the next start.
func (g *graph) remove(id string) *node {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.changes++
	i, ok := g.index[id]
	if !ok {
		return nil
	}
	n := g.nodes[i]
	for _, m := range g.nodes {
		if m.loaded {
			m.conns = deleteSorted(m.conns, i)
		}
	}
	n.conns = nil
	delete(g.index, id)
	return n
}

// install makes list (other people's ids) the connections of node i if no
// connection change was applied since the read began (changes is the
// count it began at) and nobody installed them meanwhile. Ids that are
// not in the graph (deleted since) are skipped. It reports whether node i
// is loaded now.
func (g *graph) install(i int32, list []string, changes uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nodes[i]
	if n.loaded {
		return true
	}
	if g.changes != changes {
		return false
	}
	conns := make([]int32, 0, len(list))
	for _, other := range list {
		if j, ok := g.index[other]; ok {
			conns = append(conns, j)
		}
	}
	slices.Sort(conns)
	n.conns, n.loaded = slices.Compact(conns), true
	return true
}

// pending returns the node index of id and the change count when id's
// connections are still to be loaded; ok is false when they are loaded or
// id is unknown (nothing to load).
func (g *graph) pending(id string) (i int32, changes uint64, ok bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	i, known := g.index[id]
	if !known || g.nodes[i].loaded {
		return 0, 0, false
	}
	return i, g.changes, true
}

// connected reports whether a and b are connected; known is false when
// neither side's connections are loaded.
func (g *graph) connected(a, b string) (connected, known bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	ia, oka := g.index[a]
	ib, okb := g.index[b]
	if !oka || !okb {
		return false, true
	}
	n, other := g.nodes[ia], ib
	if !n.loaded {
		n, other = g.nodes[ib], ia
	}
	if !n.loaded {
		return false, false
	}
	_, found := slices.BinarySearch(n.conns, other)
	return found, true
}

// count returns the number of connections of id; known is false when they
// are not loaded.
func (g *graph) count(id string) (n int, known bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	i, ok := g.index[id]
	if !ok {
		return 0, true
	}
	return len(g.nodes[i].conns), g.nodes[i].loaded
}

// circle appends the node of id to dst and, when withConns is set, the
// nodes of everyone connected to id. known is false (and dst unchanged)
// when the connections are wanted but not loaded.
func (g *graph) circle(id string, withConns bool, dst []*node) (_ []*node, known bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	i, ok := g.index[id]
	if !ok {
		return dst, true
	}
	n := g.nodes[i]
	if withConns && !n.loaded {
		return dst, false
	}
	dst = append(dst, n)
	if !withConns {
		return dst, true
	}
	for _, j := range n.conns {
		dst = append(dst, g.nodes[j])
	}
	return dst, true
}

// anyNewer reports whether anyone connected to id posted after from;
// known is false when id's connections are not loaded.
func (g *graph) anyNewer(id string, from int64) (newer, known bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	i, ok := g.index[id]
	if !ok {
		return false, true
	}
	n := g.nodes[i]
	if !n.loaded {
		return false, false
	}
	for _, j := range n.conns {
		if g.nodes[j].newest.Load() > from {
			return true, true
		}
	}
	return false, true
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
