package app

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// hasher bounds concurrent bcrypt work to one less than the number of cores
// (at least one): bcrypt is CPU-bound (~50-80 ms at cost 10 here) and uses
// only 4 KB each, so the bound keeps one core's worth of capacity free of
// password hashing for everything else (a flood of sign-ins slows
// sign-ins, not feeds), and 50 simultaneous sign-ins queue instead of
// piling up goroutines and buffers.
type hasher struct {
	cost  int
	slots chan struct{}
	// dummy is a hash to compare against when the handle is unknown, made on
	// first use so that it does not cost start-up time.
	dummy func() []byte
}

// newHasher bounds hashing at cost (0: bcrypt's default, see
// store.HashPassword).
func newHasher(cost int) *hasher {
	return &hasher{
		cost:  cost,
		slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)),
		dummy: sync.OnceValue(func() []byte {
			h, _ := store.HashPassword("not a password", cost)
			return []byte(h)
		}),
	}
}

// hashWait is how long a request waits for a hashing slot before 503.
const hashWait = 5 * time.Second

func (h *hasher) acquire(ctx context.Context) error {
	t := time.NewTimer(hashWait)
	defer t.Stop()
	select {
	case h.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errOverloaded()
	}
}

func (h *hasher) hash(ctx context.Context, password string) (string, error) {
	if err := h.acquire(ctx); err != nil {
		return "", err
	}
	defer func() { <-h.slots }()
	return store.HashPassword(password, h.cost)
}

// check compares password with hash; an empty hash compares against a dummy
// so that an unknown handle takes as long as a wrong password.
func (h *hasher) check(ctx context.Context, hash, password string) (bool, error) {
	if err := h.acquire(ctx); err != nil {
		return false, err
	}
	defer func() { <-h.slots }()
	hb := []byte(hash)
	if hash == "" {
		hb = h.dummy()
	}
	return store.CheckPassword(hb, password) && hash != "", nil
}

// checkSecret runs check, the look-up of a one-time link or join code that
// the client presented, under the per-address limit of bogus ones: past it
// the answer is 429 before the look-up. An unknown, used or expired secret
// (a not-found or invalid answer) counts; a good one, or a failure of the
// store, does not. Handlers call it before they read a password, let alone
// hash one.
func (a *App) checkSecret(r *http.Request, check func() error) error {
	at, err := a.secretsByAddr.take(a.clientAddr(r))
	if err != nil {
		return err
	}
	err = check()
	if c := nah.ErrorCode(err); err == nil || c != nah.NotFound && c != nah.Invalid {
		at.giveBack()
	}
	return err
}

type ctxKey int

const personKey ctxKey = 0

// requirePerson authenticates the bearer token and puts the person and the
// token into the request context.
func (a *App) requirePerson(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if !ok {
			a.writeError(w, r, nah.Errorf(nah.Unauthorized, "missing_token", "an Authorization: Bearer token is required"))
			return
		}
		p, err := a.store.PersonForToken(r.Context(), token)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		ctx := context.WithValue(r.Context(), personKey, session{person: p, token: token})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type session struct {
	person nah.Person
	token  string
}

func sessionOf(r *http.Request) session {
	return r.Context().Value(personKey).(session)
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

// clientAddr is the key rate limits count a client by: the connection's
// peer, or, when that peer is a trusted proxy, the rightmost address in
// X-Forwarded-For that is not itself a trusted proxy. An IPv4 client (also
// one written as IPv4-mapped IPv6) is its address; an IPv6 client is its
// /64, the smallest block a subscriber is given, since one host can use
// every address of it and would otherwise have 2^64 limits.
func (a *App) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host // not an IP listener: the server's text, not the client's
	}
	peer = peer.Unmap()
	if !a.trusted(peer) {
		return addrKey(peer)
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		addr, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // garbage: stop believing the header here
		}
		addr = addr.Unmap()
		if !a.trusted(addr) {
			return addrKey(addr)
		}
	}
	return addrKey(peer)
}

// addrKey is the rate-limit key of an unmapped address: IPv4 as is, IPv6
// as its /64 (without a zone).
func addrKey(addr netip.Addr) string {
	if addr.Is4() {
		return addr.String()
	}
	p, _ := addr.WithZone("").Prefix(64) // fails only for a bit count out of range
	return p.String()
}

// fromTrustedProxy reports whether the connection's peer is a trusted proxy.
func (a *App) fromTrustedProxy(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	peer, err := netip.ParseAddr(host)
	return err == nil && a.trusted(peer.Unmap())
}

func (a *App) trusted(addr netip.Addr) bool {
	for _, p := range a.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
