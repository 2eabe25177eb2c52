// Package scratch creates a throwaway database for the bench and chaos
// programs, so they change nothing of the server's but what they drop again.
package scratch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// Database creates a database named prefix plus a random suffix on the
// server that serverURL connects to, and returns its URL and a function
// that drops it.
func Database(ctx context.Context, serverURL, prefix string) (string, func(), error) {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect %s: %w (set DATABASE_URL)", serverURL, err)
	}
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	name := prefix + hex.EncodeToString(suffix)
	u, err := url.Parse(serverURL)
	if err != nil {
		admin.Close(ctx)
		return "", nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		admin.Close(ctx)
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(c, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		admin.Close(c)
	}
	return u.String(), drop, nil
}
