package nah

import "embed"

// Migrations holds the numbered SQL files of the directory database
// (migrations/directory) and of every person file (migrations/person). They
// live at the root because go:embed cannot reach into parent folders.
//
//go:embed migrations
var Migrations embed.FS

// UIStatic holds the console's vendored assets (htmx, Pico CSS and their
// licences), served by the ui package under content-hashed names.
//
//go:embed ui/static
var UIStatic embed.FS
