package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheck is `nah healthcheck`: it asks this box's server (NAH_ADDR)
// for /healthz and fails unless the answer is 200 with status "ok", so that
// a container needs no shell or curl for its HEALTHCHECK. It exits 1 on
// "degraded" too: the container shows unhealthy, and the body printed says
// why (replication behind, a full disk...).
func healthcheck(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := readConfig(getenv)
	if err != nil {
		return usageError{err.Error()}
	}
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return usageError{fmt.Sprintf("NAH_ADDR=%q: %v", cfg.Addr, err)}
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme, tr := "http", http.DefaultTransport.(*http.Transport).Clone()
	if cfg.App.TLS.Enabled() {
		// The server's own port on loopback: its name is not what is
		// checked here, and a certificate still being obtained is no
		// reason to call the server unhealthy.
		scheme, tr.TLSClientConfig = "https", &tls.Config{InsecureSkipVerify: true}
	}
	// Docker's and Podman's default health check interval is 30 s; 5 s
	// is far above a healthy answer (under a millisecond on loopback).
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", scheme+"://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	// /healthz's body is a few hundred bytes; 64 KiB bounds a stranger's.
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return err
	}
	var h struct{ Status string }
	if err := json.Unmarshal(body, &h); err != nil || res.StatusCode != http.StatusOK || h.Status != "ok" {
		return fmt.Errorf("/healthz: %s %s", res.Status, body)
	}
	fmt.Fprintf(stdout, "%s\n", body)
	return nil
}
