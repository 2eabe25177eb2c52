package main

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// compose is the part of a compose file the test reads.
type compose struct {
	Services map[string]service `yaml:"services"`
}

type service struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
}

// TestComposeFile checks docker-compose.yml against the program its images
// run, since no Docker engine runs the tests: the build context and
// Dockerfile exist and build this package, every command parses with this
// program's flags, every environment variable is one it reads, and the
// services start in order, each after what it needs is healthy or done.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"postgres", "migrate", "publisher-a", "publisher-b", "watch"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("no service %q", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	pg := c.Services["postgres"]
	if pg.Image != "postgres:16-alpine" {
		t.Errorf("postgres: image %q, want postgres:16-alpine", pg.Image)
	}
	if h := pg.Healthcheck; h == nil || !slices.Contains(h.Test, "pg_isready") || h.Interval == "" || h.Retries < 1 {
		t.Errorf("postgres: healthcheck %+v; want pg_isready, an interval and retries", h)
	}
	user, password, dbname := pg.Environment["POSTGRES_USER"], pg.Environment["POSTGRES_PASSWORD"], pg.Environment["POSTGRES_DB"]
	if password == "" {
		t.Error("postgres: no POSTGRES_PASSWORD; the image refuses to start without one")
	}
	if user == "" {
		user = "postgres"
	}
	if dbname == "" {
		dbname = user
	}
	// scripts/demo.sh reaches this server from the host.
	demo, err := os.ReadFile(filepath.Join(root, "scripts", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pg.Ports {
		hostPort := p[:strings.LastIndex(p, ":")]
		if !strings.Contains(string(demo), "@"+hostPort+"/") {
			t.Errorf("postgres: published on %s, which scripts/demo.sh does not connect to", hostPort)
		}
	}

	readsEnv := map[string]bool{}
	for _, env := range envs {
		readsEnv[env] = true
	}
	owners := map[string]bool{}
	for _, name := range []string{"migrate", "publisher-a", "publisher-b"} {
		s := c.Services[name]
		checkImage(t, root, name, s)
		for env := range s.Environment {
			if !readsEnv[env] {
				t.Errorf("%s: sets %s, which the publisher does not read", name, env)
			}
		}
		cfg, err := parseConfig(s.Command, func(k string) string { return s.Environment[k] }, &strings.Builder{})
		if err != nil {
			t.Errorf("%s: the publisher refuses its command %q and environment: %v", name, s.Command, err)
			continue
		}
		u, err := url.Parse(cfg.database)
		if err != nil {
			t.Errorf("%s: DATABASE_URL: %v", name, err)
			continue
		}
		if pw, _ := u.User.Password(); u.Hostname() != "postgres" || u.Port() != "5432" ||
			u.User.Username() != user || pw != password || strings.TrimPrefix(u.Path, "/") != dbname {
			t.Errorf("%s: DATABASE_URL %s does not name the postgres service's server, user, password and database", name, cfg.database)
		}
		if name == "migrate" {
			if !cfg.migrateOnly {
				t.Errorf("migrate: command %q does not exit after migrating", s.Command)
			}
			dependsOn(t, name, s, "postgres", "service_healthy")
			continue
		}
		if cfg.migrateOnly {
			t.Errorf("%s: only migrates", name)
		}
		if cfg.owner != name {
			t.Errorf("%s: owner %q, want the service's name", name, cfg.owner)
		}
		owners[cfg.owner] = true
		dependsOn(t, name, s, "migrate", "service_completed_successfully")
	}
	dependsOn(t, "publisher-b", c.Services["publisher-b"], "publisher-a", "service_started")
	if len(owners) != 2 {
		t.Errorf("the publishers' owners %v are not two distinct names", owners)
	}

	w := c.Services["watch"]
	dependsOn(t, "watch", w, "migrate", "service_completed_successfully")
	if !strings.HasPrefix(w.Image, "postgres:") || !strings.Contains(strings.Join(w.Command, " "), "FROM published") {
		t.Errorf("watch: image %q, command %q; want psql reading the table published", w.Image, w.Command)
	}
	if e := w.Environment; e["PGHOST"] != "postgres" || e["PGUSER"] != user || e["PGPASSWORD"] != password || e["PGDATABASE"] != dbname {
		t.Errorf("watch: environment %v does not name the postgres service's server, user, password and database", e)
	}
}

// checkImage checks that a service builds this package from the module's
// root, with a Go as new as go.mod asks for, into a small final image.
func checkImage(t *testing.T, root, name string, s service) {
	t.Helper()
	if s.Build == nil {
		t.Errorf("%s: no build section", name)
		return
	}
	context := filepath.Join(root, s.Build.Context)
	if _, err := os.Stat(filepath.Join(context, "go.mod")); err != nil {
		t.Errorf("%s: build context %q is not the module's root: %v", name, s.Build.Context, err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(context, s.Build.Dockerfile))
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllSubmatch(dockerfile, -1)
	switch {
	case len(froms) < 2 || goVersion == nil:
		t.Errorf("%s: %s is not a multi-stage build", name, s.Build.Dockerfile)
	case !strings.HasPrefix(string(froms[0][1]), "golang:"+string(goVersion[1])):
		t.Errorf("%s: builds with %s; go.mod asks for Go %s", name, froms[0][1], goVersion[1])
	case strings.HasPrefix(string(froms[len(froms)-1][1]), "golang:"):
		t.Errorf("%s: the final stage is the Go toolchain image", name)
	}
	if !regexp.MustCompile(`go build .*\./examples/publisher\b`).Match(dockerfile) {
		t.Errorf("%s: %s does not build ./examples/publisher", name, s.Build.Dockerfile)
	}
}

func dependsOn(t *testing.T, name string, s service, on, condition string) {
	t.Helper()
	if d, ok := s.DependsOn[on]; !ok || d.Condition != condition {
		t.Errorf("%s: depends_on %v; want %s with condition %s", name, s.DependsOn, on, condition)
	}
}
