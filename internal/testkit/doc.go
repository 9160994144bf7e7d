// Package testkit holds what herald's tests share: free loopback ports,
// throwaway TLS certificates and the broken CA files tests feed to TLS
// settings, and the real brokers the endpoint tests and the peer
// benchmarks run against (a nats-server and a private RabbitMQ node, each
// a subprocess on loopback ports, from the Debian packages that
// scripts/install-test-deps.sh installs), and moto's S3-compatible server
// for the tier store (from PyPI, which the script installs too).
//
// Its helpers take a testing.TB and fail the test on errors, except where
// a TestMain needs them before any test runs (NewRabbitMQ).
package testkit
