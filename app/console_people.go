package app

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/go-chi/chi/v5"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
	"github.com/nah-app/nah/ui"
)

// People: the list with search as you type, one person's page, and what an
// operator does to a person (create, disable, enable, reset link, revoke
// sessions).

const (
	// sessionsPerPage is how many of a person's sessions their page lists,
	// newest first.
	sessionsPerPage = 100
	resetLinkTTL    = 24 * time.Hour
	peoplePerPage   = 50
)

func toRow(p nah.Person) ui.PersonRow {
	return ui.PersonRow{ID: p.ID, Handle: p.Handle, CreatedAt: p.CreatedAt, NewestAt: p.NewestAt, Disabled: p.Disabled}
}

// peopleView is the People page: page ?page= of those whose handle holds ?q=.
func (a *App) peopleView(r *http.Request) (ui.People, error) {
	q := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("q")))
	if len(q) > nah.HandleMaxLen {
		q = q[:nah.HandleMaxLen]
	}
	pageNum, _ := strconv.Atoi(r.URL.Query().Get("page"))
	pageNum = max(pageNum, 1)
	v := ui.People{Page: page(r, "People", "people"), Query: q, PageNum: pageNum}
	ps, total, err := a.store.ListPeople(r.Context(), q, (pageNum-1)*peoplePerPage, peoplePerPage)
	if err != nil {
		return v, err
	}
	v.Total, v.PageCount = total, (total+peoplePerPage-1)/peoplePerPage
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	counts, err := a.store.ListedCounts(r.Context(), ids)
	if err != nil {
		return v, err
	}
	for _, p := range ps {
		row, c := toRow(p), counts[p.ID]
		row.Moments, row.Storage, row.StorageKnown = c.Moments, c.DatabaseBytes+c.MediaBytes, c.MediaKnown
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

func (a *App) handlePeople(w http.ResponseWriter, r *http.Request) {
	v, err := a.peopleView(r)
	if err != nil {
		a.consoleError(w, r, v.Page, err)
		return
	}
	// htmx's search-as-you-type asks for the list alone; boosted navigation
	// and browsers without JavaScript get the page.
	if r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-Boosted") != "true" {
		a.render(w, r, http.StatusOK, ui.PeopleList(v))
		return
	}
	a.render(w, r, http.StatusOK, ui.PeoplePage(v))
}

func (a *App) handlePersonCreate(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	handle, password := strings.TrimSpace(r.PostFormValue("handle")), r.PostFormValue("password")
	// A refusal shows the People page again, its message in the form.
	refuse := func(err error) {
		v, verr := a.peopleView(r)
		if verr != nil {
			a.consoleError(w, r, v.Page, verr)
			return
		}
		a.respondError(w, r, err, func(e *nah.Error) templ.Component {
			v.CreateError, v.NewHandle = refusalText(e), handle
			return ui.PeoplePage(v)
		})
	}
	if err := nah.CheckSignup(handle, password); err != nil {
		refuse(err)
		return
	}
	hash, err := a.hasher.hash(r.Context(), password)
	if err != nil {
		refuse(err)
		return
	}
	person, err := a.store.CreatePerson(r.Context(), store.NewPerson{Handle: handle, PasswordHash: hash})
	if err != nil {
		refuse(err)
		return
	}
	http.Redirect(w, r, "/console/people/"+person.ID+"?m=created", http.StatusSeeOther)
}

// personPage renders a person's page with status; secret is a value shown
// once, deleteErr a refused deletion to show in its form.
func (a *App) personPage(w http.ResponseWriter, r *http.Request, status int, secret, deleteErr string) {
	id := chi.URLParam(r, "id")
	pg := page(r, "Person", "people")
	p, err := a.store.FindPersonByID(r.Context(), id)
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	v := ui.Person{Page: pg, PersonRow: toRow(p)}
	v.Title = p.Handle
	v.Flash = flashes[r.URL.Query().Get("m")]
	v.Secret = secret
	if secret != "" {
		v.SecretNote = resetNote(p.Handle)
		v.SecretWarning = a.linkWarning()
	}
	v.DeleteError = deleteErr
	if until, ok := a.store.ReplacedUntil(id); ok && a.cfg.Backups != nil {
		v.UndoUntil, v.UndoSince = until, until.Add(-a.store.DeleteGrace())
	}
	ss, err1 := a.store.Sessions(r.Context(), id, sessionsPerPage)
	cs, err2 := a.store.Connections(r.Context(), id)
	var err3, err5 error
	v.FormerConnections, err5 = a.store.FormerConnections(r.Context(), id)
	v.Moments, err3 = a.store.MomentCount(r.Context(), id)
	st, err4 := a.store.StorageOf(r.Context(), id)
	v.DatabaseBytes, v.MediaBytes, v.MediaCount = st.Database, st.Media, st.MediaCount
	v.Quota = a.cfg.QuotaBytes
	// A file that cannot be read is what this page must show, not fail on.
	if fp, ok := a.store.FileProblemOf(id); ok {
		v.Attention, v.AttentionSince = fp.Problem, fp.Since
		if nah.ErrorCode(err3) == nah.Unavailable {
			err3 = nil
		}
		if nah.ErrorCode(err4) == nah.Unavailable {
			err4 = nil
		}
	}
	err6 := a.personDigest(r, &v)
	var err7 error
	if v.Attention == "" {
		v.Keys, err7 = a.personKeys(r, id)
	}
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	v.Sessions = sessionList(p, ss)
	for _, c := range cs {
		v.Connections = append(v.Connections, ui.PersonRow{ID: c.ID, Handle: c.Handle, NewestAt: c.NewestAt})
	}
	a.render(w, r, status, ui.PersonPage(v))
}

// personKeys reads person id's MLS clients (at most store.MLSMaxClients)
// and the newest ui.KeyLogShown entries of their key log.
func (a *App) personKeys(r *http.Request, id string) (ui.PersonKeys, error) {
	var k ui.PersonKeys
	cs, _, err := a.store.Clients(r.Context(), id)
	if err != nil {
		return k, err
	}
	log, head, err := a.store.KeyLogNewest(r.Context(), id, ui.KeyLogShown)
	if err != nil {
		return k, err
	}
	for _, c := range cs {
		sum := sha256.Sum256(c.SignatureKey)
		k.Clients = append(k.Clients, ui.KeyClient{ID: c.ID, Name: c.Name, CreatedAt: c.CreatedAt, Fingerprint: hex.EncodeToString(sum[:8])})
	}
	for _, e := range log {
		k.Log = append(k.Log, ui.KeyLogRow{Pos: e.Pos, Kind: e.Kind, Client: e.Client, At: e.At})
	}
	k.LogSize, k.LogHead = head.Size, hex.EncodeToString(head.Hash)
	return k, nil
}

func (a *App) handlePerson(w http.ResponseWriter, r *http.Request) {
	a.personPage(w, r, http.StatusOK, "", "")
}

func (a *App) setDisabled(w http.ResponseWriter, r *http.Request, disabled bool, m string) {
	id := chi.URLParam(r, "id")
	if err := a.store.SetDisabled(r.Context(), id, disabled); err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	http.Redirect(w, r, "/console/people/"+id+"?m="+m, http.StatusSeeOther)
}

func (a *App) handlePersonDisable(w http.ResponseWriter, r *http.Request) {
	a.setDisabled(w, r, true, "disabled")
}

func (a *App) handlePersonEnable(w http.ResponseWriter, r *http.Request) {
	a.setDisabled(w, r, false, "enabled")
}

// handlePersonReset makes a one-time link and shows it once: the operator
// hands it to the person, who sets a new password there.
func (a *App) handlePersonReset(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if _, err := a.store.FindPersonByID(r.Context(), id); err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	token, err := a.store.CreateLink(r.Context(), store.LinkReset, id, resetLinkTTL)
	if err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	a.personPage(w, r, http.StatusCreated, ResetLink(a.cfg.PublicURL, token), "")
}

// resetNote says for whom a reset link is and what to do with it.
func resetNote(handle string) string {
	return "For " + handle + ": they open this link on their phone (or scan it) and choose a new password. It works once, for 24 hours; every phone signed in as " + handle + " is then signed out."
}

// deletedPerPage bounds the deleted people listed: deletions are rare, and
// the list shows those purged soonest.
const deletedPerPage = 200

// handlePersonDelete deletes a person once the operator has typed their
// handle; a wrong one shows the page again with the refusal.
func (a *App) handlePersonDelete(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	r.Body = http.MaxBytesReader(w, r.Body, smallBody)
	typed := strings.TrimSpace(r.PostFormValue("handle"))
	p, err := a.store.FindPersonByID(r.Context(), id)
	if err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	if typed != p.Handle {
		a.personPage(w, r, http.StatusBadRequest, "", "Type the handle "+p.Handle+" exactly to delete them.")
		return
	}
	if err := a.store.DeletePerson(r.Context(), id); err != nil {
		a.consoleError(w, r, page(r, "Person", "people"), err)
		return
	}
	http.Redirect(w, r, "/console/deleted?m=deleted", http.StatusSeeOther)
}

// handleDeleted lists the people deleted and not yet purged, with an undo.
func (a *App) handleDeleted(w http.ResponseWriter, r *http.Request) {
	pg := page(r, "Deleted people", "deleted")
	ds, err := a.store.DeletedPeople(r.Context(), deletedPerPage)
	if err != nil {
		a.consoleError(w, r, pg, err)
		return
	}
	pg.Flash = flashes[r.URL.Query().Get("m")]
	v := ui.Deleted{Page: pg, Grace: graceText(a.store.DeleteGrace())}
	for _, d := range ds {
		v.Rows = append(v.Rows, ui.DeletedRow{ID: d.ID, Handle: d.Handle, DeletedAt: d.DeletedAt, PurgeAt: d.PurgeAt})
	}
	a.render(w, r, http.StatusOK, ui.DeletedPage(v))
}

// handlePersonRestore undoes a deletion before the purge.
func (a *App) handlePersonRestore(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if err := a.store.RestorePerson(r.Context(), id); err != nil {
		a.consoleError(w, r, page(r, "Deleted people", "deleted"), err)
		return
	}
	http.Redirect(w, r, "/console/people/"+id+"?m=restored", http.StatusSeeOther)
}

// graceText says a grace period as an operator would: "7 days", "36h0m0s".
func graceText(d time.Duration) string {
	switch {
	case d == 0:
		return "none: deletions purge at once"
	case d == 24*time.Hour:
		return "1 day"
	case d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + " days"
	}
	return d.String()
}

// linkWarning says that the links the console makes reach no phone when
// the public address is this machine's own (NAH_PUBLIC_URL unset, and
// the server listening on a loopback address), or only phones at home
// when it is a private listen address that no one configured; empty
// otherwise.
func (a *App) linkWarning() string {
	u, err := url.Parse(a.cfg.PublicURL)
	if err != nil {
		return ""
	}
	h := u.Hostname()
	fix := "Set NAH_PUBLIC_URL to the address phones use (" + envFileWords + ", then restart the server), and make a new link."
	ip, err := netip.ParseAddr(h)
	if (err == nil && (ip.IsLoopback() || ip.IsUnspecified())) || h == "localhost" {
		return "This link starts with " + u.Scheme + "://" + u.Host + ", an address only this machine reaches: a phone cannot open it. " + fix
	}
	if a.cfg.PublicURLFromListen && err == nil && (ip.IsPrivate() || ip.IsLinkLocalUnicast()) {
		return "This link starts with " + u.Scheme + "://" + u.Host + ", the address the server listens on, which only phones on this network reach: the server does not know its public address. " + fix
	}
	return ""
}
