// Command pocketbase is PocketBase, unchanged, as the bench runs it beside
// nah (bench/README.md, "nah beside PocketBase"): PocketBase's own commands
// (serve, superuser, ...) plus, at serve, the collections nah's workload
// needs. It is its own module so that nah's go.mod does not carry
// PocketBase's dependencies.
package main

import (
	"log"

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
// directory that has them it only reads them (PocketBase's cached
// collections and settings: no query).
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
	if _, err := app.FindCollectionByNameOrId("connections"); err != nil {
		c := core.NewBaseCollection("connections")
		c.Fields.Add(
			&core.RelationField{Name: "a", CollectionId: users.Id, Required: true, MaxSelect: 1, CascadeDelete: true},
			&core.RelationField{Name: "b", CollectionId: users.Id, Required: true, MaxSelect: 1, CascadeDelete: true},
		)
		c.ListRule = types.Pointer("a = @request.auth.id")
		c.ViewRule = c.ListRule
		// (b, a) and no index led by a: with one, SQLite starts the
		// feed's join from the reader's 151 rows and sorts all their
		// ~30,000 moments (137 ms a feed); with (b, a) it walks moments
		// newest first and stops at 30 (sqlite3 EXPLAIN, bench/README.md).
		c.AddIndex("idx_connections_b_a", true, "b, a", "")
		if err := app.Save(c); err != nil {
			return err
		}
	}
	if _, err := app.FindCollectionByNameOrId("moments"); err != nil {
		c := core.NewBaseCollection("moments")
		c.Fields.Add(
			&core.RelationField{Name: "author", CollectionId: users.Id, Required: true, MaxSelect: 1, CascadeDelete: true},
			// 400 bytes in nah's API are 536 characters of base64.
			&core.TextField{Name: "body", Required: true, Max: 100000},
			// A date, not an autodate: an autodate cannot be given at all,
			// and the seed gives the fixture's times (the hook in main).
			&core.DateField{Name: "created", Required: true},
		)
		c.ListRule = types.Pointer(FeedRule)
		c.ViewRule = c.ListRule
		c.CreateRule = types.Pointer(`@request.auth.id != "" && author = @request.auth.id`)
		c.AddIndex("idx_moments_author_created", false, "author, created", "")
		c.AddIndex("idx_moments_created", false, "created", "")
		if err := app.Save(c); err != nil {
			return err
		}
	}
	return nil
}
