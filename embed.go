package nah

import "embed"

// Migrations holds the numbered SQL files of the directory database
// (migrations/directory) and of every person file (migrations/person). They
// live at the root because go:embed cannot reach into parent folders.
//
//go:embed migrations
var Migrations embed.FS
