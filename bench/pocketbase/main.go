// Command pocketbase is PocketBase, unchanged, as the bench runs it beside
// nah (bench/README.md, "nah beside PocketBase"): PocketBase's own commands
// (serve, superuser, ...) plus, at serve, the collections nah's workload
// needs. It is its own module so that nah's go.mod does not carry
// PocketBase's dependencies.
package main

import (
	"log"
	"slices"

	"github.com/pocketbase/pocketbase"
	"github.com/pocketbase/pocketbase/core"
	"github.com/pocketbase/pocketbase/tools/types"
)

// FeedRule is who may list or view a moment: its author and the people
// connected to them, nah's rule. connections holds each connection in both
// directions and every person's row to themselves (a = b), so the rule is
// one indexed lookup per moment with no OR (see ensure).
const FeedRule = "@collection.connections.a ?= @request.auth.id && @collection.connections.b ?= author"

func main() {
	// Not dev mode (SQL printed per query), which PocketBase turns on by
	// itself for a binary under the temporary directory, as `go run` makes.
	app := pocketbase.NewWithConfig(pocketbase.Config{DefaultDev: false})
	app.OnServe().BindFunc(func(se *core.ServeEvent) error {
		if err := ensure(se.App); err != nil {
			return err
		}
		return se.Next()
	})
	// A moment's created time is the server's clock, as in nah; only a
	// superuser (the seed, writing the fixture's history) may give it.
	app.OnRecordCreateRequest("moments").BindFunc(func(e *core.RecordRequestEvent) error {
		if !e.HasSuperuserAuth() || e.Record.GetDateTime("created").IsZero() {
			e.Record.Set("created", types.NowDateTime())
		}
		return e.Next()
	})
	if err := app.Start(); err != nil {
		log.Fatal(err)
	}
}

// ensure makes the collections and settings of the bench once; on a data
// directory that has them it brings their rules and indexes to these and
// otherwise only reads them (PocketBase's cached collections and settings:
// no query).
func ensure(app core.App) error {
	s := app.Settings()
	// No request logs (PocketBase writes one row per request to
	// auxiliary.db unless Logs.MaxDays is 0); batches for the seed.
	if s.Logs.MaxDays != 0 || !s.Batch.Enabled || s.Batch.Timeout < 30 {
		s.Logs.MaxDays = 0
		s.Batch.Enabled = true
		s.Batch.MaxRequests = 100
		s.Batch.Timeout = 30
		if err := app.Save(s); err != nil {
			return err
		}
	}
	users, err := app.FindCollectionByNameOrId("users")
	if err != nil {
		return err
	}

	conns := core.NewBaseCollection("connections")
	conns.Fields.Add(
		&core.RelationField{Name: "a", CollectionId: users.Id, Required: true, MaxSelect: 1, CascadeDelete: true},
		&core.RelationField{Name: "b", CollectionId: users.Id, Required: true, MaxSelect: 1, CascadeDelete: true},
	)
	conns.ListRule = types.Pointer("a = @request.auth.id")
	conns.ViewRule = conns.ListRule
	conns.AddIndex("idx_connections_a_b", true, "a, b", "")
	// The feed's rule compares COALESCE(b, '') with the moment's author
	// (PocketBase's SQL for a field against a field): without this index
	// SQLite built a temporary one over all 151,000 rows for every feed
	// (26-36 ms of a feed's query, people-1k, PocketBase's dev log).
	conns.AddIndex("idx_connections_a_coalesce_b", false, "a, COALESCE(b, '')", "")
	if err := ensureCollection(app, conns); err != nil {
		return err
	}

	moments := core.NewBaseCollection("moments")
	moments.Fields.Add(
		&core.RelationField{Name: "author", CollectionId: users.Id, Required: true, MaxSelect: 1, CascadeDelete: true},
		// 400 bytes in nah's API are 536 characters of base64.
		&core.TextField{Name: "body", Required: true, Max: 100000},
		// A date, not an autodate: an autodate cannot be given at all,
		// and the seed gives the fixture's times (the hook in main).
		&core.DateField{Name: "created", Required: true},
	)
	moments.ListRule = types.Pointer(FeedRule)
	moments.ViewRule = moments.ListRule
	moments.CreateRule = types.Pointer(`@request.auth.id != "" && author = @request.auth.id`)
	moments.AddIndex("idx_moments_author_created", false, "author, created", "")
	moments.AddIndex("idx_moments_created", false, "created", "")
	return ensureCollection(app, moments)
}

// ensureCollection saves want if there is no collection of its name, or
// gives the one there is want's rules and indexes if they differ.
func ensureCollection(app core.App, want *core.Collection) error {
	have, err := app.FindCollectionByNameOrId(want.Name)
	if err != nil {
		return app.Save(want)
	}
	rule := func(r *string) string {
		if r == nil {
			return "<nil>"
		}
		return *r
	}
	if rule(have.ListRule) == rule(want.ListRule) && rule(have.ViewRule) == rule(want.ViewRule) &&
		rule(have.CreateRule) == rule(want.CreateRule) && slices.Equal(have.Indexes, want.Indexes) {
		return nil
	}
	log.Printf("bench/pocketbase: %s gets this binary's rules and indexes", want.Name)
	have.ListRule, have.ViewRule, have.CreateRule = want.ListRule, want.ViewRule, want.CreateRule
	have.Indexes = want.Indexes
	return app.Save(have)
}
