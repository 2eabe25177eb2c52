package migrations_test

import (
	"context"
	"testing"

	"github.com/pgleader/pgleader/internal/pgtest"
)

// TestRenewalsStayOnTheirPage: a renewal of many keys writes each new row
// version on the page of the old one (a heap-only update, the lease
// table's fillfactor), leaving lease_pkey alone. With the default fillfactor the
// pages are full and almost none is.
func TestRenewalsStayOnTheirPage(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	const n = 2000
	// Rows written once, as a plain INSERT: a renewal of them needs no
	// pruning of older versions, only the room the fillfactor left. Each
	// belongs to a role, as every row an acquire writes.
	if _, err := db.Pool.Exec(ctx, `
		INSERT INTO pgleader.lease (key, holder, token, acquired_at, renewed_at, expires_at, role)
		SELECT 'k-' || i, 'o', 1, now(), now(), now() + interval '1 minute', current_user FROM generate_series(1, $1) AS i`, n); err != nil {
		t.Fatal(err)
	}
	pages := func() map[string]string {
		rows, err := db.Pool.Query(ctx, `SELECT key, split_part(trim(both '()' from ctid::text), ',', 1) FROM pgleader.lease`)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for rows.Next() {
			var k, p string
			if err := rows.Scan(&k, &p); err != nil {
				t.Fatal(err)
			}
			m[k] = p
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := pages()
	var renewed int
	if err := db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM (SELECT array_agg(key) AS k, array_agg(token) AS t FROM pgleader.lease WHERE holder = 'o') AS h,
		       pgleader.renew_many('o', h.k, h.t, '1 minute')`).Scan(&renewed); err != nil {
		t.Fatal(err)
	}
	if renewed != n {
		t.Fatalf("renewed %d keys, want %d", renewed, n)
	}
	stayed := 0
	for k, p := range pages() {
		if before[k] == p {
			stayed++
		}
	}
	if stayed < n*9/10 {
		t.Fatalf("%d of %d renewed rows stayed on their page; want at least 90%%", stayed, n)
	}
}
