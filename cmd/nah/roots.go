package main

// The container image is the binary on an empty base, without the system's
// CA certificates that Let's Encrypt (NAH_DOMAIN) and S3 replicas need:
// Mozilla's roots are built in, and used only where the system has none.
import _ "golang.org/x/crypto/x509roots/fallback"
