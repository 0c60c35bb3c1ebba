package ui

// PersonKeys is a person's end-to-end keys on their console page: their
// MLS clients and the newest entries of their key log.
type PersonKeys struct {
	Clients []KeyClient
	Log     []KeyLogRow // newest first, at most KeyLogShown
	LogSize int64
	LogHead string // hex of the head hash
}

// KeyLogShown is how many key log entries the person page shows.
const KeyLogShown = 20

// KeyClient is one MLS client.
type KeyClient struct {
	ID          string
	Name        string
	CreatedAt   int64  // unix ms
	Fingerprint string // first 16 hex of SHA-256 of the signature key
}

// KeyLogRow is one key log entry.
type KeyLogRow struct {
	Pos    int64
	Kind   string // client_added, client_removed
	Client string
	At     int64 // unix ms
}
