package app

import "testing"

// TestConfigSettings: the console shows the settings cmd/nah hands over,
// empty values visibly, and a variable it was not told of as a default.
func TestConfigSettings(t *testing.T) {
	c := Config{Settings: []Setting{
		{"NAH_OPEN_SIGNUP", "true", "the environment"},
		{"NAH_METRICS_ADDR", "", "the default"},
	}}
	got := c.Effective()
	if len(got) != 2 || got[0].Value != "true" || got[0].Source != "the environment" || got[1].Value != "(empty)" {
		t.Errorf("Effective: %+v", got)
	}
	if s := c.source("NAH_OPEN_SIGNUP"); s != "the environment" {
		t.Errorf("source: %q", s)
	}
	if s := c.source("NAH_ELSE"); s != "the default" {
		t.Errorf("source of an unknown variable: %q", s)
	}
}
