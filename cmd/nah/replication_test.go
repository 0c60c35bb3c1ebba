package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nah-app/nah/internal/tests3"
)

// TestReplicaBadTargetExits2: serve refuses to start, with status 2 and a
// message naming NAH_REPLICA_URL, when the replica target is malformed or
// cannot be used: wrong S3 keys, a missing bucket, nothing listening at the
// endpoint, a directory that cannot be made. Checked at start, not an hour
// later in a log.
func TestReplicaBadTargetExits2(t *testing.T) {
	srv := tests3.Start(t)
	good := []string{"AWS_ENDPOINT_URL_S3=" + srv.Endpoint(), "AWS_ACCESS_KEY_ID=" + tests3.Key, "AWS_SECRET_ACCESS_KEY=" + tests3.Secret}
	for _, c := range []struct {
		name string
		env  []string
		says string // a part of the message
	}{
		{"malformed", []string{"NAH_REPLICA_URL=gs://bucket/nah"}, `unknown scheme "gs"`},
		{"s3 without a bucket", []string{"NAH_REPLICA_URL=s3:///nah"}, "without a bucket"},
		{"s3 endpoint not a URL", []string{"NAH_REPLICA_URL=s3://b/nah", "AWS_ENDPOINT_URL_S3=localhost:9000"}, "not an http(s) URL"},
		{"s3 key without secret", []string{"NAH_REPLICA_URL=s3://b/nah", "AWS_ACCESS_KEY_ID=k"}, "AWS_SECRET_ACCESS_KEY"},
		{"wrong secret", append([]string{"NAH_REPLICA_URL=s3://" + tests3.Bucket + "/nah"}, append(good[:2:2], "AWS_SECRET_ACCESS_KEY=wrong")...), "403"},
		// versitygw answers a HEAD with an unknown key 404, AWS 403.
		{"unknown key", append([]string{"NAH_REPLICA_URL=s3://" + tests3.Bucket + "/nah"}, good[0], "AWS_ACCESS_KEY_ID=nobody", "AWS_SECRET_ACCESS_KEY=s"), "HeadBucket"},
		{"missing bucket", append([]string{"NAH_REPLICA_URL=s3://no-such-bucket/nah"}, good...), "404"},
		{"nothing listening", []string{"NAH_REPLICA_URL=s3://b/nah", "AWS_ENDPOINT_URL_S3=http://" + tests3.FreeAddr(t), "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s"}, "connect"},
		{"directory that cannot be made", []string{"NAH_REPLICA_URL=/proc/nah-replica"}, "/proc/nah-replica"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(binary, "serve")
			cmd.Env = append([]string{"NAH_ADDR=127.0.0.1:0", "NAH_DATA_DIR=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, c.env...)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(start)
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want status 2:\n%s", err, out)
			}
			last := lastLine(string(out))
			if !strings.Contains(last, "NAH_REPLICA_URL") || !strings.Contains(last, c.says) {
				t.Errorf("the message does not name NAH_REPLICA_URL and say %q: %s", c.says, last)
			}
			if strings.Contains(string(out), "wrong") && c.name == "wrong secret" {
				t.Errorf("the output shows the secret: %s", out)
			}
			if took > 20*time.Second {
				t.Errorf("took %v to refuse", took)
			}
			t.Logf("%v: %s", took.Round(time.Millisecond), last)
		})
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}
