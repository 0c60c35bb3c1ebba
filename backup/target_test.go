package backup_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nah-app/nah/backup"
)

// TestParseTarget: NAH_REPLICA_URL as an operator writes it, read into where
// each database's replica goes (the URL `litestream restore` takes), and
// every malformed form refused with a reason.
func TestParseTarget(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range keys {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	const rel = "people/p1/person.db"
	for _, c := range []struct {
		name, raw string
		env       map[string]string
		s3        bool
		url       string // ReplicaURL(rel)
		redacted  string // a part of Redacted()
		err       string // a part of the error
	}{
		{name: "relative path", raw: "./replica", url: "file://" + filepath.Join(wd, "replica", rel)},
		{name: "bare relative", raw: "backups/nah", url: "file://" + filepath.Join(wd, "backups/nah", rel)},
		{name: "absolute path", raw: "/mnt/backup/nah/", url: "file:///mnt/backup/nah/" + rel, redacted: "/mnt/backup/nah"},
		{name: "file URL", raw: "file:///mnt/backup", url: "file:///mnt/backup/" + rel},
		{name: "file URL localhost", raw: "file://localhost/mnt/b", url: "file:///mnt/b/" + rel},
		{name: "file URL cleaned", raw: "file:///mnt/b/../c/", url: "file:///mnt/c/" + rel},
		{name: "s3 from env", raw: "s3://bucket/nah/prod", env: with(map[string]string{"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"}), s3: true,
			url: "s3://bucket/nah/prod/" + rel + "?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=eu-west-1", redacted: "s3://bucket/nah/prod at http://127.0.0.1:9000 (key AKIA…)"},
		{name: "s3 general endpoint and default region", raw: "s3://bucket/p", env: with(map[string]string{"AWS_ENDPOINT_URL": "https://s3.example.net", "AWS_DEFAULT_REGION": "ap-south-1"}), s3: true,
			url: "s3://bucket/p/" + rel + "?endpoint=https%3A%2F%2Fs3.example.net&region=ap-south-1"},
		{name: "s3 specific endpoint wins", raw: "s3://bucket/p", env: with(map[string]string{"AWS_ENDPOINT_URL": "https://general", "AWS_ENDPOINT_URL_S3": "https://specific"}), s3: true,
			url: "s3://bucket/p/" + rel + "?endpoint=https%3A%2F%2Fspecific&region=us-east-1"},
		{name: "s3 query wins over env", raw: "s3://bucket/p?endpoint=http://10.0.0.5:7070&region=us-west-2", env: with(map[string]string{"AWS_ENDPOINT_URL_S3": "https://env", "AWS_REGION": "eu-west-1"}), s3: true,
			url: "s3://bucket/p/" + rel + "?endpoint=http%3A%2F%2F10.0.0.5%3A7070&region=us-west-2"},
		{name: "s3 AWS itself, no prefix", raw: "s3://bucket", env: keys, s3: true, url: "s3://bucket/" + rel + "?region=us-east-1", redacted: "s3://bucket/ (key AKIA…)"},
		{name: "s3 instance credentials", raw: "s3://bucket/x/", env: map[string]string{}, s3: true, url: "s3://bucket/x/" + rel + "?region=us-east-1"},

		{name: "empty", raw: "", err: "empty"},
		{name: "unknown scheme", raw: "gs://bucket/p", err: `unknown scheme "gs"`},
		{name: "http", raw: "http://example.net/backups", err: "unknown scheme"},
		{name: "file URL with a host", raw: "file://backup/nah", err: "with a host"},
		{name: "file URL without a path", raw: "file://", err: "without a path"},
		{name: "s3 without a bucket", raw: "s3:///prefix", env: keys, err: "without a bucket"},
		{name: "s3 with credentials in the URL", raw: "s3://AKIA:secret@bucket/p", env: keys, err: "credentials in it"},
		{name: "s3 endpoint not http", raw: "s3://bucket/p?endpoint=ftp://host", env: keys, err: "not an http(s) URL"},
		{name: "s3 endpoint without a host", raw: "s3://bucket/p", env: with(map[string]string{"AWS_ENDPOINT_URL_S3": "http://"}), err: "not an http(s) URL"},
		{name: "s3 endpoint not a URL", raw: "s3://bucket/p", env: with(map[string]string{"AWS_ENDPOINT_URL_S3": "127.0.0.1:9000"}), err: "not an http(s) URL"},
		{name: "s3 key without secret", raw: "s3://bucket/p", env: map[string]string{"AWS_ACCESS_KEY_ID": "AKIA"}, err: "both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{name: "s3 secret without key", raw: "s3://bucket/p", env: map[string]string{"AWS_SECRET_ACCESS_KEY": "x"}, err: "both"},
		{name: "bad URL", raw: "s3://bu cket/%zz", env: keys, err: "not a URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg, err := backup.ParseTarget(c.raw, func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParseTarget(%q) = %v, want an error with %q", c.raw, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTarget(%q): %v", c.raw, err)
			}
			if tg.IsS3() != c.s3 {
				t.Errorf("IsS3 = %v, want %v", tg.IsS3(), c.s3)
			}
			if got := tg.ReplicaURL(rel); got != c.url {
				t.Errorf("ReplicaURL = %s\nwant          %s", got, c.url)
			}
			red := tg.Redacted()
			if c.redacted != "" && !strings.Contains(red, c.redacted) {
				t.Errorf("Redacted = %q, want it to hold %q", red, c.redacted)
			}
			for _, secret := range []string{"secret", "AKIAEXAMPLE"} {
				if strings.Contains(red, secret) {
					t.Errorf("Redacted = %q shows %q", red, secret)
				}
			}
		})
	}
}
