package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// An imported person.db's MLS tables are checked like its other ones, as
// untrusted input, and copied nowhere: an import makes a new person id,
// so a new group (nah:<id>), and connections are not carried, so neither
// are their clients in the group. The person's phones register again.

// mlsVersion is the schema version that has the MLS tables
// (migrations/person/0006_mls.sql), mlsPassedVersion the one whose members
// have the epoch each has passed (0007_mls_passed.sql).
const (
	mlsVersion       = 6
	mlsPassedVersion = 7
)

// mlsColumnMax is the bound of the MLS columns larger than
// untrustedValueMax, by "table.column".
var mlsColumnMax = map[string]int{
	"mls_key_packages.body": MLSKeyPackageMaxBytes,
	"mls_group.group_info":  MLSGroupInfoMaxBytes,
	"mls_commits.body":      MLSCommitMaxBytes,
	"mls_inbox.welcome":     MLSWelcomeMaxBytes,
}

// mlsChecks is, per MLS table, the most rows it may have and the SQL test
// each row must pass (its types and values), read before any value; a
// check with since applies to files of that schema version on.
var mlsChecks = []struct {
	table string
	max   int
	row   string
	since int
}{
	{"mls_clients", MLSMaxClients, `typeof(id) = 'text' AND octet_length(id) = 45 AND typeof(signature_key) = 'blob'
		AND octet_length(signature_key) BETWEEN 1 AND 256 AND typeof(name) = 'text' AND typeof(created_at) = 'integer'`, 0},
	{"mls_key_packages", MLSMaxClients * (MLSMaxKeyPackages + 1), `typeof(client) = 'text' AND octet_length(client) = 45
		AND last_resort IN (0, 1) AND typeof(body) = 'blob' AND octet_length(body) >= 1 AND typeof(created_at) = 'integer'`, 0},
	{"mls_group", 1, `typeof(group_id) = 'blob' AND octet_length(group_id) = 30 AND typeof(epoch) = 'integer' AND epoch >= 0
		AND (group_info IS NULL OR typeof(group_info) = 'blob') AND typeof(created_at) = 'integer'`, 0},
	{"mls_members", MLSMaxMembers, `leaf BETWEEN 0 AND 65535 AND typeof(client) = 'text' AND octet_length(client) = 45
		AND typeof(person) = 'text' AND octet_length(person) = 26`, 0},
	{"mls_members", MLSMaxMembers, `typeof(passed) = 'integer' AND passed >= 0`, mlsPassedVersion},
	{"mls_removals", MLSMaxMembers, `typeof(client) = 'text' AND octet_length(client) = 45 AND typeof(at) = 'integer'`, 0},
	{"mls_commits", MLSCommitsKept, `typeof(epoch) = 'integer' AND epoch >= 1 AND typeof(body) = 'blob' AND octet_length(body) >= 1
		AND typeof(created_at) = 'integer'`, 0},
	{"mls_inbox", MLSMaxClients * MLSInboxMax, `typeof(client) = 'text' AND octet_length(client) = 45 AND typeof(group_of) = 'text'
		AND octet_length(group_of) = 26 AND typeof(epoch) = 'integer' AND epoch >= 0 AND typeof(welcome) = 'blob'
		AND octet_length(welcome) >= 1 AND typeof(created_at) = 'integer'`, 0},
	{"mls_key_log", MLSKeyLogMax, `pos >= 1 AND kind IN ('client_added', 'client_removed') AND typeof(client) = 'text'
		AND octet_length(client) = 45 AND typeof(signature_key) = 'blob' AND octet_length(signature_key) BETWEEN 1 AND 256
		AND typeof(at) = 'integer' AND typeof(hash) = 'blob' AND octet_length(hash) = 32`, 0},
}

// checkMLS refuses a file whose MLS tables have more rows than their
// bound or a row outside it. Counts stop one past the bound.
func checkMLS(ctx context.Context, u *untrustedDB) error {
	if u.version < mlsVersion {
		return nil
	}
	for _, c := range mlsChecks {
		if u.version < c.since {
			continue
		}
		var n int
		if err := u.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s LIMIT %d)`, c.table, c.max+1)).Scan(&n); err != nil {
			return badExport("person.db's table %s cannot be read: %v", c.table, err)
		}
		if n > c.max {
			return badExport("person.db's table %s has more than %d rows, the most this server keeps", c.table, c.max)
		}
		var one int
		err := u.QueryRowContext(ctx, fmt.Sprintf(`SELECT 1 FROM %s WHERE NOT (%s) LIMIT 1`, c.table, c.row)).Scan(&one)
		switch {
		case err == nil:
			return badExport("a row of person.db's table %s is not one this server writes (its types or values are out of bounds)", c.table)
		case !errors.Is(err, sql.ErrNoRows):
			return badExport("person.db's table %s cannot be read: %v", c.table, err)
		}
	}
	return nil
}
