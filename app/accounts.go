package app

import (
	"net/http"
	"time"

	"github.com/nah-app/nah"
	"github.com/nah-app/nah/store"
)

// smallBody bounds every JSON body that carries only short fields.
const smallBody = 4 << 10

type personJSON struct {
	ID        string  `json:"id"`
	Handle    string  `json:"handle"`
	CreatedAt string  `json:"created_at"`
	NewestAt  *string `json:"newest_at"`
}

func toPersonJSON(p nah.Person) personJSON {
	return personJSON{ID: p.ID, Handle: p.Handle, CreatedAt: nah.FormatTime(p.CreatedAt), NewestAt: optTime(p.NewestAt)}
}

// optTime formats ms, or gives null for 0 (never).
func optTime(ms int64) *string {
	if ms == 0 {
		return nil
	}
	s := nah.FormatTime(ms)
	return &s
}

type authJSON struct {
	Person personJSON `json:"person"`
	Token  string     `json:"token"`
}

// handleAccountCreate signs a person up, with a join code unless open sign-up
// is configured. Every attempt counts against the address's hourly limit,
// and a bogus join code also against the limit of bogus secrets, which
// holds when the hourly limit is off (NAH_SIGNUP_PER_HOUR=0): join codes
// cannot be guessed at speed.
func (a *App) handleAccountCreate(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Handle   jsonString `json:"handle"`
		Password jsonString `json:"password"`
		JoinCode jsonString `json:"join_code"`
	}
	if err := decodeJSON(w, r, smallBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	done, err := a.takeSignup(a.clientAddr(r))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var p nah.Person
	defer func() { done(p.ID != "", err) }()
	if err = nah.CheckSignup(string(in.Handle), string(in.Password)); err != nil {
		a.writeError(w, r, err)
		return
	}
	open, _, err := a.openSignup(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if in.JoinCode == "" && !open {
		err = nah.Errorf(nah.Invalid, "join_code_required", "sign-up needs a join code from the server's operator")
		a.writeError(w, r, err)
		return
	}
	// A bogus code is refused before the hash and before CreatePerson
	// makes the person's file; CreatePerson redeems the code atomically.
	if in.JoinCode != "" {
		if err = a.checkSecret(r, func() error { return a.store.JoinCodes().Check(r.Context(), string(in.JoinCode)) }); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	hash, err := a.hasher.hash(r.Context(), string(in.Password))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	created, err := a.store.CreatePerson(r.Context(), store.NewPerson{Handle: string(in.Handle), PasswordHash: hash, JoinCode: string(in.JoinCode)})
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	p = created
	a.startSession(w, r, p, hash)
}

// takeSignup counts a sign-up from addr against Config.SignupPerHour and
// signupFailuresPerAddr before the work (429 if either is used up); done
// gives back the one that did not apply, and both for the server's failures.
func (a *App) takeSignup(addr string) (done func(ok bool, err error), err error) {
	failure, err := a.signupFailuresByAddr.take(addr)
	if err != nil {
		return nil, err
	}
	success, err := a.signupByAddr.take(addr)
	if err != nil {
		failure.giveBack()
		return nil, err
	}
	return func(ok bool, err error) {
		switch {
		case ok:
			failure.giveBack()
		case nah.ErrorCode(err) == nah.Invalid || nah.ErrorCode(err) == nah.Conflict:
			success.giveBack() // a taken handle, a wrong code, a short password
		default:
			failure.giveBack()
			success.giveBack()
		}
	}, nil
}

// handleSessionCreate signs in. Every attempt is counted per address and
// per handle before the password is hashed, and given back when the
// password is right; while either is over its limit the answer is 429
// whatever the password.
func (a *App) handleSessionCreate(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Handle   jsonString `json:"handle"`
		Password jsonString `json:"password"`
	}
	if err := decodeJSON(w, r, smallBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	name := ""
	if nah.ValidHandle(string(in.Handle)) {
		name = string(in.Handle)
	}
	at, err := a.takeSignin(a.clientAddr(r), name)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	giveBack := at.giveBack
	bad := nah.Errorf(nah.Unauthorized, "invalid_credentials", "the handle or password is wrong")
	if name == "" || len(in.Password) > nah.PasswordMaxBytes {
		a.signinFailed(r, at, signinApp, "")
		a.writeError(w, r, bad)
		return
	}
	p, hash, err := a.store.FindPersonByHandle(r.Context(), string(in.Handle))
	if err != nil && nah.ErrorCode(err) != nah.NotFound {
		giveBack() // nothing was checked
		a.writeError(w, r, err)
		return
	}
	ok, err := a.hasher.check(r.Context(), hash, string(in.Password))
	if err != nil {
		giveBack() // nothing was checked
		a.writeError(w, r, err)
		return
	}
	// A disabled account's right password is answered, and counted, as a
	// wrong one: the answer must not tell a guesser they found it.
	if !ok || p.Disabled {
		a.signinFailed(r, at, signinApp, p.Handle)
		a.writeError(w, r, bad)
		return
	}
	giveBack()
	a.startSession(w, r, p, hash)
}

// takeSignin counts one sign-in attempt against the client's address and,
// unless name is "", against the name, before any password is hashed; a
// refusal from either is the answer, and the other's count is given back.
// The attempt's giveBack gives both back, for a right password or an
// attempt that checked nothing.
func (a *App) takeSignin(addr, name string) (signinAttempt, error) {
	byAddr, err := a.signinByAddr.take(addr)
	if err != nil {
		return signinAttempt{}, err
	}
	var byName attempt
	if name != "" {
		if byName, err = a.signinByHandle.take(name); err != nil {
			byAddr.giveBack()
			return signinAttempt{}, err
		}
	}
	return signinAttempt{byAddr, byName}, nil
}

// signinAttempt is one sign-in counted against an address and a name.
type signinAttempt struct{ byAddr, byName attempt }

func (s signinAttempt) giveBack() { s.byAddr.giveBack(); s.byName.giveBack() }

// startSession answers a sign-up or sign-in with a new token for p, whose
// password was checked against hash: none if it changed meanwhile.
func (a *App) startSession(w http.ResponseWriter, r *http.Request, p nah.Person, hash string) {
	token, err := a.store.SignIn(r.Context(), p.ID, hash, deviceOf(r))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, authJSON{toPersonJSON(p), token})
}

// handleSessionDelete revokes the token of this request.
func (a *App) handleSessionDelete(w http.ResponseWriter, r *http.Request) {
	if err := a.store.DeleteSession(r.Context(), sessionOf(r).token); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleMe describes the signed-in person.
func (a *App) handleMe(w http.ResponseWriter, r *http.Request) {
	p := sessionOf(r).person
	p, err := a.store.FindPersonByID(r.Context(), p.ID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	st, err := a.store.StorageOf(r.Context(), p.ID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	conns, err := a.store.ConnectionCount(r.Context(), p.ID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	// The digest settings, or null for someone who never chose any.
	var digest *digestJSON
	if d, _, err := a.store.FindDigest(r.Context(), p.ID); err == nil {
		dj := toDigestJSON(d)
		digest = &dj
	} else if nah.ErrorCode(err) != nah.NotFound {
		a.writeError(w, r, err)
		return
	}
	type storage struct {
		Database int64 `json:"database"`
		Media    int64 `json:"media"`
		Uploads  int64 `json:"uploads"`
		Quota    int64 `json:"quota"`
	}
	writeJSON(w, http.StatusOK, struct {
		Person      personJSON  `json:"person"`
		Connections int         `json:"connections"`
		StorageUsed int64       `json:"storage_used"`
		Storage     storage     `json:"storage"`
		Digest      *digestJSON `json:"digest"`
	}{toPersonJSON(p), conns, st.Used(), storage{st.Database, st.MediaCharged, st.Uploads, a.cfg.QuotaBytes}, digest})
}

// handleHealth answers 503 only when the directory cannot be read (no token
// can be checked). A full disk, unreadable person files or replication behind
// are 200 "degraded": a restart would mend none of them and stop every read.
func (a *App) handleHealth(w http.ResponseWriter, r *http.Request) {
	if err := a.store.Ping(r.Context()); err != nil {
		a.log.Error("health check", "err", err)
		e := nah.Errorf(nah.Unavailable, "", "the directory database cannot be read")
		e.RetryAfter = 5 * time.Second // like every other 503: a load balancer asks again
		a.writeError(w, r, e)
		return
	}
	st := a.store.Stats()
	h := struct {
		Status             string             `json:"status"`
		OpenFiles          int                `json:"open_files"`
		DiskFull           bool               `json:"disk_full"`
		FilesNeedAttention int                `json:"files_need_attention"`
		Replication        *replicationHealth `json:"replication,omitempty"`
		RestoreDrill       string             `json:"restore_drill,omitempty"` // ok, or failed until a drill passes
	}{"ok", st.OpenFiles, st.DiskFull, st.UnreadableFiles, a.replicationHealth(), a.drillHealth()}
	// Replication behind is "degraded", never 503: posts go on locally and
	// are shipped when the target answers again, and taking the server out
	// of rotation for a replica that is down would stop everyone's posts
	// and reads and mend nothing.
	// A replica over its budget (NAH_REPLICA_BUDGET) is "degraded" too: it
	// is on its way to fill the target's disk.
	if h.DiskFull || h.FilesNeedAttention > 0 || (h.Replication != nil && (h.Replication.Status != "ok" || h.Replication.Disk != nil && h.Replication.Disk.OverBudget)) || h.RestoreDrill == "failed" {
		h.Status = "degraded"
	}
	writeJSON(w, http.StatusOK, h)
}

// handleMeDelete deletes the signed-in person, who confirms with their
// password (store.DeletePerson says what goes at once and what waits for
// the purge). The password check is a sign-in attempt: counted per address
// and per handle before the hash, given back when the password is right,
// so a stolen token cannot be used to guess the password at speed.
func (a *App) handleMeDelete(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Password jsonString `json:"password"`
	}
	if err := decodeJSON(w, r, smallBody, &in); err != nil {
		a.writeError(w, r, err)
		return
	}
	if in.Password == "" {
		a.writeError(w, r, nah.Errorf(nah.Invalid, "password_required", "the password is required to delete the account"))
		return
	}
	p := sessionOf(r).person
	at, err := a.takeSignin(a.clientAddr(r), p.Handle)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	giveBack := at.giveBack
	wrong := nah.Errorf(nah.Forbidden, "wrong_password", "the password is wrong")
	if len(in.Password) > nah.PasswordMaxBytes {
		a.signinFailed(r, at, signinApp, p.Handle)
		a.writeError(w, r, wrong)
		return
	}
	_, hash, err := a.store.FindPersonByHandle(r.Context(), p.Handle)
	if err != nil {
		giveBack() // nothing was checked
		if nah.ErrorCode(err) == nah.NotFound {
			err = errPersonGone // deleted by a request that won the race
		}
		a.writeError(w, r, err)
		return
	}
	ok, err := a.hasher.check(r.Context(), hash, string(in.Password))
	if err != nil {
		giveBack()
		a.writeError(w, r, err)
		return
	}
	if !ok {
		a.signinFailed(r, at, signinApp, p.Handle)
		a.writeError(w, r, wrong)
		return
	}
	giveBack()
	if err := a.store.DeletePerson(r.Context(), p.ID); err != nil {
		if nah.ErrorCode(err) == nah.NotFound {
			err = errPersonGone
		}
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// errPersonGone answers a request of a person deleted since their token was
// checked: the token is revoked by now.
var errPersonGone = nah.Errorf(nah.Unauthorized, "invalid_token", "the token is missing, revoked or invalid")

// maxDevice bounds the User-Agent kept with a session (store.Session.Device).
const maxDevice = 128

// deviceOf is r's User-Agent as a session keeps it: printable ASCII only,
// each other byte a '?', at most maxDevice bytes.
func deviceOf(r *http.Request) string {
	ua := r.UserAgent()
	b := make([]byte, 0, min(len(ua), maxDevice))
	for i := 0; i < len(ua) && len(b) < maxDevice; i++ {
		c := ua[i]
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		b = append(b, c)
	}
	return string(b)
}
