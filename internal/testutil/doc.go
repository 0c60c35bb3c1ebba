// Package testutil holds the helpers the tests of several packages share:
// a clock the test moves, a client that reads slowly, a dump of every table
// of a SQLite file, and walks of a data directory. Test helpers only: no
// product code imports it, and it imports none of ours (store's own tests
// use it).
package testutil
