package ui

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Page is what the layout needs of every page.
type Page struct {
	Title  string
	Nav    string // which nav item is current: overview, people, joincodes, settings
	Admin  string // signed-in admin's name; empty on sign-in and setup pages
	Flash  string // a one-time message, such as a code shown once
	Error  string
	Secret string // a value shown once (a join code, a reset link)
	// SecretLink, when set, is the link that hands Secret over (a join
	// code's): the QR code and the copy button hold it rather than Secret.
	SecretLink string
	// SecretNote says for whom Secret is, until when, and what to do
	// with it; SecretWarning what stops it from working, if anything.
	SecretNote    string
	SecretWarning string
}

// Overview is the home page of the console.
type Overview struct {
	Page
	People       int
	Moments      int64
	StorageBytes int64
	MediaBytes   int64 // of StorageBytes, people's media files
	OpenFiles    int
	MaxOpenFiles int
	RSSBytes     int64
	PeakRSSBytes int64
	HeadBytes    int64
	Uptime       time.Duration
	Points       []Point

	// What needs attention: a full disk, the person files that cannot
	// be read (the first few of AttentionTotal), and the names of
	// NAH_DOMAIN without a good HTTPS certificate.
	DiskFull       bool
	Attention      []AttentionRow
	AttentionTotal int
	Certificates   []CertProblem

	// Checklist is what a new server still needs (empty once each item
	// but the optional ones is done); ChecklistHidden: the admin hid it,
	// with ChecklistToDo items not done.
	Checklist       []CheckItem
	ChecklistHidden bool
	ChecklistToDo   int

	// Backups is replication at a glance (nil: NAH_REPLICA_URL is off).
	Backups *BackupHealth
	Drill   *DrillView // the last restore drill (nil: none)
	Signins Signins    // who tried to get in
}

// CheckItem is one item of the first-run checklist: what, whether it is
// done, and how to do it (Link: the page where it is done, if any).
type CheckItem struct {
	ID, Title, How, Link string
	Done                 bool
	Optional             bool // this server can do without it
}

// CertProblem is a name of NAH_DOMAIN without a good HTTPS certificate:
// none could be obtained, or renewing it keeps failing.
type CertProblem struct {
	Domain, Problem string // Problem is the CA's or the network's error
	Since, Tried    int64  // first and last failure in a row
}

// AttentionRow is a person whose file cannot be read.
type AttentionRow struct {
	ID, Handle string
	Problem    string // what is wrong with the file, for the operator
	Since      int64
}

// Point is one minute of the chart.
type Point struct {
	Minute           time.Time
	FeedP95, PostP95 float64 // ms
	RSSMB            float64
}

// PersonRow is one line of the people list.
type PersonRow struct {
	ID, Handle          string
	CreatedAt, NewestAt int64
	Disabled            bool
	// Moments and Storage are the store's counts (the list's columns);
	// StorageKnown is false while their media are not counted in this
	// run, so Storage is their database alone.
	Moments      int64
	Storage      int64
	StorageKnown bool
}

// People is the people list with its search.
type People struct {
	Page
	Query     string
	Rows      []PersonRow
	Total     int
	PageNum   int
	PageCount int
	// CreateError is a refused Create, shown in its form with the handle
	// typed (NewHandle).
	CreateError, NewHandle string
	// ImportError is a refused import, shown in its form. With
	// ImportTicket, the export is kept on the server and the form asks
	// only for a new handle, ImportHandle filled in.
	ImportError, ImportTicket, ImportHandle string
}

// Imported is the page after a person is imported: Page.Secret holds
// their one-time link.
type Imported struct {
	Page
	Person  PersonRow
	Moments int
	// FormerConnections are the handles of the person's connections on
	// their old server that have an account here.
	FormerConnections []string
}

// Person is one person's page.
type Person struct {
	Page
	PersonRow
	Connections []PersonRow
	// FormerConnections are the handles, here, of connections they had on
	// the server they were imported from and do not have now.
	FormerConnections []string
	Moments           int
	// DatabaseBytes and MediaBytes are their storage, against Quota.
	DatabaseBytes int64
	MediaBytes    int64
	MediaCount    int
	Quota         int64
	Sessions      Sessions
	// Attention, when set, is what is wrong with the person's file, which
	// cannot be read since AttentionSince; Moments is then unknown.
	Attention      string
	AttentionSince int64
	// Digest is their digest time and zone ("08:30 Europe/Lisbon"), empty
	// when they chose none; Devices is how many phones get it.
	Digest       string
	DigestOn     bool
	Devices      int
	LastDigestAt int64
	// DeleteError is a refused deletion, shown in its form.
	DeleteError string
	// UndoUntil is when the file their last restore to a time replaced
	// stops being kept for an undo; zero when there is none.
	UndoUntil time.Time
	UndoSince time.Time // when the file an undo puts back was kept
	Keys      PersonKeys
}

// Deleted lists the people deleted and not yet purged.
type Deleted struct {
	Page
	Rows []DeletedRow
	// Grace is how long a deletion can be undone, such as "7 days".
	Grace string
}

// DeletedRow is one deleted person.
type DeletedRow struct {
	ID, Handle         string
	DeletedAt, PurgeAt int64
}

// SessionRow is one signed-in device: its id (a prefix of its token's
// hash), the User-Agent it signed in with, and times in unix ms.
type SessionRow struct {
	ID                           string
	Device                       string
	CreatedAt, UsedAt, ExpiresAt int64
}

// JoinCodeRow is one join code, without the code.
type JoinCodeRow struct {
	ID, Hint                                string
	CreatedAt, ExpiresAt, UsedAt, RevokedAt int64
	UsedBy                                  string
	State                                   string // unused, used, revoked or expired
}

// JoinCodes is the join-code page.
// Signins is who tried to get in, since the server started: failed
// console sign-ins and lockouts, and the last ones, newest first.
type Signins struct {
	Failed, Lockouts int64
	Events           []SigninEvent
}

// SigninEvent is one failed console sign-in or one lockout.
type SigninEvent struct {
	At      int64  // Unix milliseconds
	What    string // "Console sign-in: wrong name or password"
	Account string // an account's name, "unknown account" or "any account"
	From    string // the client's address
}

// Join is the page a join link opens in a browser: the code and the
// server's address, for the nah app.
type Join struct {
	Page
	Code, Server string
}

type JoinCodes struct {
	Page
	Codes      []JoinCodeRow
	OpenSignup bool // codes are not needed while it is on
}

// Setting is one variable of the effective configuration: its name, a
// label and a sentence in words, its value and where the value came from.
type Setting struct {
	Name, Label, About, Value, Source string
}

// SettingGroup is a heading of the Settings page, with a sentence.
type SettingGroup struct {
	Title, About string
	Items        []Setting
}

// Settings is the settings page.
type Settings struct {
	Page
	OpenSignup       bool
	OpenSignupSource string
	// EnvFile names the environment file the settings are read from.
	EnvFile string
	Groups  []SettingGroup
}

// Form is a page with a single form: sign-in, first admin, password reset.
type Form struct {
	Page
	Action string
	Kind   string // signin, setup, reset
	Handle string
}

type versionKey struct{}

// WithVersion gives the layout the server's version, for its footer.
func WithVersion(ctx context.Context, v string) context.Context {
	return context.WithValue(ctx, versionKey{}, v)
}

// versionOf is the version WithVersion gave, or "".
func versionOf(ctx context.Context) string {
	v, _ := ctx.Value(versionKey{}).(string)
	return v
}

// htmxConfig is htmx's configuration (the layout's htmx-config meta tag):
// every answer but 204 is swapped in, refusals and errors included.
const htmxConfig = `{"responseHandling":[{"code":"204","swap":false},{"code":"...","swap":true}]}`

// InAbout says how long until something, as a person would: "in about 5
// minutes". It rounds up, so that whoever waits as told is never early.
func InAbout(d time.Duration) string {
	switch {
	case d <= time.Minute:
		return "in a minute"
	case d <= time.Hour:
		n := int((d + time.Minute - 1) / time.Minute)
		return "in about " + strconv.Itoa(n) + " minutes"
	}
	n := int((d + time.Hour - 1) / time.Hour)
	return "in about " + strconv.Itoa(n) + " " + plural(n, "hour", "hours")
}

// Duration is d in words, in its two largest units: "7 days", "6 hours
// 30 minutes", "45 seconds", "less than a second"; never Go's "6h0m0s".
func Duration(d time.Duration) string {
	d = d.Abs()
	if d < time.Second {
		return "less than a second"
	}
	units := []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}}
	for i, u := range units {
		if d < u.d {
			continue
		}
		if i+1 == len(units) {
			return count(int(d.Round(time.Second)/time.Second), u.name)
		}
		next := units[i+1]
		d = d.Round(next.d)
		out := count(int(d/u.d), u.name)
		if rest := int(d % u.d / next.d); rest > 0 {
			out += " " + count(rest, next.name)
		}
		return out
	}
	return ""
}

// count is "1 day" or "3 days".
func count(n int, unit string) string {
	return strconv.Itoa(n) + " " + plural(n, unit, unit+"s")
}

// When formats a unix-millisecond time for a table, or "never".
func When(ms int64) string {
	if ms == 0 {
		return "never"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04 UTC")
}

// Bytes formats a size for people.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return strconv.FormatInt(n, 10) + " B"
}

// Chart geometry, in SVG user units.
const (
	chartW   = 600
	chartH   = 160
	chartPad = 30
)

// polyline returns the SVG points of values scaled to max over the chart;
// minutes without data (zero) are left out rather than drawn as zero.
func polyline(vals []float64, max float64) string {
	if max <= 0 {
		max = 1
	}
	var b strings.Builder
	for i, v := range vals {
		if v <= 0 {
			continue
		}
		x := chartPad + float64(i)*float64(chartW-2*chartPad)/float64(max1(len(vals)-1))
		y := chartH - chartPad - v/max*float64(chartH-2*chartPad)
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String())
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// ChartLines returns the polylines and scale labels of the overview chart:
// feed and post p95 share the left scale (ms), memory its own.
func ChartLines(pts []Point) (feed, post, rss string, msMax, mbMax float64) {
	var f, p, r []float64
	for _, pt := range pts {
		f, p, r = append(f, pt.FeedP95), append(p, pt.PostP95), append(r, pt.RSSMB)
		msMax = max(msMax, pt.FeedP95, pt.PostP95)
		mbMax = max(mbMax, pt.RSSMB)
	}
	msMax, mbMax = niceCeil(msMax), niceCeil(mbMax)
	return polyline(f, msMax), polyline(p, msMax), polyline(r, mbMax), msMax, mbMax
}

func niceCeil(v float64) float64 {
	for _, c := range []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000} {
		if v <= c {
			return c
		}
	}
	return v
}

func f0(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// pageURL is the people list's URL for a query and page.
func pageURL(q string, page int) string {
	return "/console/people?" + url.Values{"q": {q}, "page": {strconv.Itoa(page)}}.Encode()
}

// Digests is the Digests and push page: the digest loop's relay, its last
// run, its sends per minute over the last day and the relay's last errors.
type Digests struct {
	Page
	Running         bool // a digest loop runs in this process
	RelayConfigured bool
	RelayHost       string
	Last            DigestRun // At is 0 before the first run
	SendsPerMinute  []int     // the last day, oldest first
	Errors          []RelayError
}

// DigestRun is one minute's run of the digest loop.
type DigestRun struct {
	At                                        int64
	Due, WithNew, Sent, Failed, Skipped, Left int
	Duration, P95                             time.Duration
}

// RelayError is one failure of the push relay (it never holds a token).
type RelayError struct {
	At      int64
	Message string
}

// Bar is one minute's bar of a chart, in SVG user units.
type Bar struct{ X, Y string }

// SendsChart returns a bar for each minute with sends, and the scale:
// digests fall in a few minutes of the day, which a line would join
// across the empty hours between.
func SendsChart(sends []int) (bars []Bar, top float64) {
	for _, n := range sends {
		top = max(top, float64(n))
	}
	top = niceCeil(top)
	for i, n := range sends {
		if n == 0 {
			continue
		}
		x := chartPad + float64(i)*float64(chartW-2*chartPad)/float64(max1(len(sends)-1))
		y := chartH - chartPad - float64(n)/top*float64(chartH-2*chartPad)
		bars = append(bars, Bar{strconv.FormatFloat(x, 'f', 1, 64), strconv.FormatFloat(y, 'f', 1, 64)})
	}
	return bars, top
}

// slug is a heading as an id: lower case, words joined by hyphens.
func slug(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	}), "-")
}

// sourceWords says where a setting's value came from, as the Settings
// page shows it: "the default", "set in the environment".
func sourceWords(src string) string {
	if src == "the environment" {
		return "set in the environment"
	}
	return src
}
