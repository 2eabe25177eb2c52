// Package replication holds the tests of leadership across a PostgreSQL
// failover and crash recovery (docs/ha.md) on real servers: a throwaway
// primary and an asynchronous streaming standby on loopback ports (see
// internal/chaos's Cluster), reached through internal/tcpproxy so that the
// primary's address can move to the standby. It has no code of its own to
// import.
package replication
