package app

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/mls"
	"github.com/nah-app/nah/store"
)

// A person's group: registered by the owner's first client, then moved
// from epoch to epoch by commits that nah reads the framing of (mls/).

// mlsCommitBody bounds a commit's request: the commit, a Welcome and a
// GroupInfo at their bounds in base64, with room for the JSON.
const mlsCommitBody = (store.MLSCommitMaxBytes+store.MLSWelcomeMaxBytes+store.MLSGroupInfoMaxBytes)*4/3 + 1024

// heldFor is the memory a JSON request of at most limit bytes holds while
// it is decoded: the body, the base64 strings and the decoded bytes, 3
// times its Content-Length (the server reads no more than that), or the
// limit's when it has none.
func heldFor(r *http.Request, limit int) int {
	n := int64(limit)
	if r.ContentLength >= 0 && r.ContentLength < n {
		n = r.ContentLength
	}
	return 3*int(n) + 4096
}

// pageTake takes the memory of a page of commits or Welcomes from the
// budget as the store reads it (store.Take), and give returns it all.
func (a *App) pageTake() (take store.Take, give func()) {
	taken := 0
	take = func(n int) error {
		if err := a.takeBulkOrOverloaded(n); err != nil {
			return err
		}
		taken += n
		return nil
	}
	return take, func() { a.mem.give(int64(taken)) }
}

// writeMLSError is writeError with an EpochError's epoch beside the
// SPEC's error body, so that a phone knows where the group is, and a
// PrunedError's 410 with the path of the GroupInfo to join again from.
func (a *App) writeMLSError(w http.ResponseWriter, r *http.Request, err error) {
	type errorJSON struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	var ee *store.EpochError
	var pe *store.PrunedError
	switch {
	case errors.As(err, &ee):
		writeJSON(w, http.StatusConflict, map[string]any{"error": errorJSON{ee.Reason, ee.Error()}, "epoch": ee.Epoch})
	case errors.As(err, &pe):
		writeJSON(w, http.StatusGone, map[string]any{"error": errorJSON{"log_pruned", pe.Error()}, "epoch": pe.Epoch,
			"group_info": "/api/v1/people/" + pathParam(r, "id") + "/group/info"})
	default:
		a.writeError(w, r, err)
	}
}

// handleGroupCreate registers the caller's group at epoch 0.
func (a *App) handleGroupCreate(w http.ResponseWriter, r *http.Request) {
	me, id := sessionOf(r).person.ID, pathParam(r, "id")
	if id != me {
		if err := a.mayKnow(r, id); err != nil {
			a.writeError(w, r, err)
			return
		}
		a.writeError(w, r, nah.Errorf(nah.Forbidden, "not_owner", "only its owner registers a person's group"))
		return
	}
	var in struct {
		Client  jsonString `json:"client"`
		GroupID []byte     `json:"group_id"`
	}
	if err := decodeJSON(w, r, smallBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	if !bytes.Equal(in.GroupID, store.GroupIDOf(me)) {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "wrong_group", "your group's id is the UTF-8 of %q", store.GroupIDOf(me)))
		return
	}
	if err := a.store.CreateGroup(r.Context(), me, string(in.Client)); err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"group_id": in.GroupID, "epoch": 0})
}

// handleGroup returns a person's group: who is at which leaf, what must
// be removed, and who waits to be added.
func (a *App) handleGroup(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "id")
	if err := a.mayKnow(r, id); err != nil {
		a.writeError(w, r, err)
		return
	}
	g, err := a.store.Group(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	type member struct {
		Leaf   uint32 `json:"leaf"`
		Client string `json:"client"`
		Person string `json:"person"`
	}
	ms := make([]member, len(g.Members))
	for i, m := range g.Members {
		ms[i] = member{m.Leaf, m.Client, m.Person}
	}
	writeJSON(w, http.StatusOK, map[string]any{"group_id": g.GroupID, "epoch": g.Epoch, "members": ms,
		"pending_removals": orNone(g.PendingRemovals), "waiting": orNone(g.Waiting)})
}

func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// handleCommit accepts a commit to a person's group at its epoch.
func (a *App) handleCommit(w http.ResponseWriter, r *http.Request) {
	me, id := sessionOf(r).person.ID, pathParam(r, "id")
	if err := a.mayKnow(r, id); err != nil {
		a.writeError(w, r, err)
		return
	}
	held := heldFor(r, mlsCommitBody)
	if err := a.takeBulkOrOverloaded(held); err != nil {
		a.writeError(w, r, err)
		return
	}
	defer a.mem.give(int64(held))
	var in struct {
		Commit    []byte `json:"commit"`
		Welcome   []byte `json:"welcome"`
		GroupInfo []byte `json:"group_info"`
	}
	if err := decodeJSON(w, r, mlsCommitBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	c, err := readCommit(id, in.Commit, in.Welcome, in.GroupInfo)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	epoch, err := a.store.Commit(r.Context(), id, me, c)
	if err != nil {
		a.writeMLSError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"epoch": epoch})
}

// readCommit reads what nah checks of a commit to owner's group, and of
// the Welcome and GroupInfo that come with it.
func readCommit(owner string, commit, welcome, info []byte) (store.MLSCommit, error) {
	bad := func(reason, format string, args ...any) (store.MLSCommit, error) {
		return store.MLSCommit{}, nah.Errorf(nah.Invalid, reason, format, args...)
	}
	for _, b := range []struct {
		what string
		n    int
		max  int
	}{{"commit", len(commit), store.MLSCommitMaxBytes}, {"welcome", len(welcome), store.MLSWelcomeMaxBytes}, {"group_info", len(info), store.MLSGroupInfoMaxBytes}} {
		if b.n > b.max {
			return store.MLSCommit{}, nah.Errorf(nah.TooLarge, b.what+"_too_large", "a %s is at most %d bytes", b.what, b.max)
		}
	}
	m, err := mls.Parse(commit)
	switch {
	case err != nil:
		return bad("invalid_commit", "commit is not an MLS message: %v", err)
	case m.WireFormat != mls.WirePublicMessage:
		return bad("invalid_commit", "commit is an MLS message of wire format %d, not a PublicMessage (1)", m.WireFormat)
	case m.ContentType == mls.ContentProposal:
		return bad("proposal_by_reference", "nah takes proposals inline in commits, not on their own")
	case m.ContentType != mls.ContentCommit:
		return bad("invalid_commit", "commit is a PublicMessage of content type %d, not a commit (3)", m.ContentType)
	case !bytes.Equal(m.GroupID, store.GroupIDOf(owner)):
		return bad("wrong_group", "the commit is for another group than this person's")
	case m.Sender.Type != mls.SenderMember && m.Sender.Type != mls.SenderNewMemberCommit:
		return store.MLSCommit{}, nah.Errorf(nah.Forbidden, "not_your_leaf", "a commit comes from a member (sender type 1) or joins (4), not %d", m.Sender.Type)
	}
	c := store.MLSCommit{Epoch: m.Epoch, SenderLeaf: m.Sender.LeafIndex, Body: commit, GroupInfo: info, Welcome: welcome,
		External: m.Sender.Type == mls.SenderNewMemberCommit}
	if p := m.Commit.Path; p != nil {
		c.PathClient, c.PathKey = string(p.Identity), p.SignatureKey
	}
	inits := 0
	refs := map[string]string{}
	for _, p := range m.Commit.Proposals {
		if p.ByRef != nil {
			return bad("proposal_by_reference", "nah takes proposals inline in commits: this one has one by reference")
		}
		switch p.Type {
		case mls.ProposalExternalInit:
			inits++
		case mls.ProposalRemove:
			c.Removes = append(c.Removes, p.RemoveLeaf)
		case mls.ProposalAdd:
			if err := p.Add.Verify(); errors.Is(err, mls.ErrUnsupportedSuite) {
				return bad("unsupported_cipher_suite", "an Add's KeyPackage is of cipher suite %d, which nah does not verify", p.Add.CipherSuite)
			} else if err != nil {
				return bad("invalid_key_package", "an Add's KeyPackage: %v", err)
			}
			ref, _ := p.Add.Ref()
			client := string(p.Add.Leaf.Identity)
			c.Adds = append(c.Adds, store.MLSAdd{Client: client, SignatureKey: p.Add.Leaf.SignatureKey})
			refs[string(ref)] = client
		}
	}
	// An external commit (RFC 9420 §12.4.3.2) has one ExternalInit and a
	// path whose leaf is the joiner; nah takes no Add or Welcome with it.
	if c.External && (inits != 1 || c.PathKey == nil || len(c.Adds) > 0 || welcome != nil) {
		return bad("invalid_external_commit", "an external commit has one ExternalInit, a path, and no Add or Welcome")
	}
	if welcome != nil {
		wm, err := mls.Parse(welcome)
		if err != nil || wm.WireFormat != mls.WireWelcome {
			return bad("invalid_welcome", "welcome is not an MLS Welcome")
		}
		for _, ref := range wm.Welcome.NewMembers {
			client, ok := refs[string(ref)]
			if !ok {
				return bad("invalid_welcome", "the Welcome names a KeyPackage (%s) that no Add of the commit has", base64.StdEncoding.EncodeToString(ref))
			}
			c.WelcomeTo = append(c.WelcomeTo, client)
		}
	}
	if info != nil {
		im, err := mls.Parse(info)
		if err != nil || im.WireFormat != mls.WireGroupInfo || !bytes.Equal(im.GroupID, m.GroupID) || im.Epoch != m.Epoch+1 {
			return bad("invalid_group_info", "group_info is not an MLS GroupInfo of this group at the commit's new epoch (%d)", m.Epoch+1)
		}
	}
	return c, nil
}

// handleCommits returns a page of a group's commits after an epoch.
func (a *App) handleCommits(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "id")
	if err := a.mayKnow(r, id); err != nil {
		a.writeError(w, r, err)
		return
	}
	var after uint64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			a.writeError(w, r, nah.Errorf(nah.Invalid, "invalid_after", "after is an epoch: a whole number from 0"))
			return
		}
		after = n
	}
	client := r.URL.Query().Get("client")
	if p, ok := store.ClientPerson(client); client != "" && (!ok || p != sessionOf(r).person.ID) {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "not_your_client", "client is the id of one of your clients, the one that fetches"))
		return
	}
	take, give := a.pageTake()
	defer give()
	cs, epoch, more, err := a.store.Commits(r.Context(), id, client, after, take)
	if err != nil {
		a.writeMLSError(w, r, err)
		return
	}
	// The page is named by where it starts and the group's epoch: a
	// commit never changes, and a page whose first commit is pruned is a
	// 410, not a shorter page.
	sum := sha256.Sum256(fmt.Appendf(nil, "%d-%d", after, epoch))
	etag := `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "private, no-cache")
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	type commitJSON struct {
		Epoch  uint64 `json:"epoch"`
		Commit []byte `json:"commit"`
	}
	out := make([]commitJSON, len(cs))
	for i, c := range cs {
		out[i] = commitJSON{c.Epoch, c.Body}
	}
	var next *uint64
	if more {
		next = &cs[len(cs)-1].Epoch
	}
	writeJSON(w, http.StatusOK, map[string]any{"commits": out, "next": next, "epoch": epoch})
}

// handleGroupInfo returns the newest GroupInfo of a person's group.
func (a *App) handleGroupInfo(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "id")
	if err := a.mayKnow(r, id); err != nil {
		a.writeError(w, r, err)
		return
	}
	info, epoch, err := a.store.GroupInfo(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"group_info": info, "epoch": epoch})
}

// handleInbox returns the Welcomes waiting for one of the caller's clients.
func (a *App) handleInbox(w http.ResponseWriter, r *http.Request) {
	take, give := a.pageTake()
	defer give()
	ws, err := a.store.Inbox(r.Context(), sessionOf(r).person.ID, pathParam(r, "id"), take)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	type welcomeJSON struct {
		ID      int64  `json:"id"`
		Group   string `json:"group"`
		Epoch   uint64 `json:"epoch"`
		Welcome []byte `json:"welcome"`
	}
	out := make([]welcomeJSON, len(ws))
	for i, wl := range ws {
		out[i] = welcomeJSON{wl.ID, wl.Group, wl.Epoch, wl.Welcome}
	}
	writeJSON(w, http.StatusOK, map[string]any{"welcomes": out})
}

// handleInboxDelete deletes a Welcome the client has joined with.
func (a *App) handleInboxDelete(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(pathParam(r, "n"), 10, 64)
	if err != nil {
		a.writeError(w, r, nah.Errorf(nah.NotFound, "", "no such Welcome"))
		return
	}
	if err := a.store.DeleteWelcome(r.Context(), sessionOf(r).person.ID, pathParam(r, "id"), n); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
