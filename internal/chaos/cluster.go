package chaos

import (
	"context"

	"github.com/pgleader/pgleader/internal/embedpg"
)

// Cluster is a throwaway PostgreSQL cluster of the chaos run's own, in a
// temporary directory, so the run may restart the server, kill it, or
// promote a standby. It is never the machine's main server; as root it runs
// as the OS user postgres.
type Cluster = embedpg.Server

// ClusterOptions change how a cluster's server runs (extra settings, an
// environment such as libfaketime's).
type ClusterOptions = embedpg.Options

// FindPostgresBin returns the directory of initdb and pg_ctl (see
// [embedpg.FindBin]).
func FindPostgresBin() (string, error) { return embedpg.FindBin() }

// StartCluster creates a cluster with the binaries in bin and starts it on
// a free loopback port, with fsync off and commit timestamps tracked. Stop
// it with Stop, which also deletes it.
func StartCluster(ctx context.Context, bin string) (*Cluster, error) { return embedpg.Start(ctx, bin) }

// StartClusterWith is StartCluster with options.
func StartClusterWith(ctx context.Context, bin string, opts ClusterOptions) (*Cluster, error) {
	return embedpg.StartWith(ctx, bin, opts)
}
