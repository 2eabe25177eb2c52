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
		Context    string            `yaml:"context"`
		Dockerfile string            `yaml:"dockerfile"`
		Args       map[string]string `yaml:"args"`
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
// run, since make test needs no Docker engine (make compose-test runs the
// file): the build context and
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
	if img := withDefaults(pg.Image); img != "postgres:16-alpine" {
		t.Errorf("postgres: image %q is %q by default, want postgres:16-alpine", pg.Image, img)
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
	if w.Image != pg.Image {
		t.Errorf("watch: image %q, want the postgres service's %q", w.Image, pg.Image)
	}
	if !strings.HasPrefix(withDefaults(w.Image), "postgres:") || !strings.Contains(strings.Join(w.Command, " "), "FROM published") {
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
	// The base images are build arguments: their defaults in the Dockerfile,
	// overridden by the compose file's args, themselves variables with
	// defaults.
	args := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ARG (\w+)=(\S+)`).FindAllSubmatch(dockerfile, -1) {
		args[string(m[1])] = string(m[2])
	}
	for k, v := range s.Build.Args {
		if _, ok := args[k]; !ok {
			t.Errorf("%s: build arg %s is not an ARG of %s", name, k, s.Build.Dockerfile)
		}
		if withDefaults(v) != args[k] {
			t.Errorf("%s: build arg %s is %q by default, the Dockerfile's default is %q", name, k, withDefaults(v), args[k])
		}
	}
	var froms []string
	for _, m := range regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllSubmatch(dockerfile, -1) {
		from := string(m[1])
		if arg := strings.TrimSuffix(strings.TrimPrefix(from, "${"), "}"); arg != from {
			from = args[arg]
		}
		froms = append(froms, from)
	}
	switch {
	case len(froms) < 2 || goVersion == nil:
		t.Errorf("%s: %s is not a multi-stage build", name, s.Build.Dockerfile)
	case !strings.HasPrefix(froms[0], "golang:"+string(goVersion[1])):
		t.Errorf("%s: builds with %s; go.mod asks for Go %s", name, froms[0], goVersion[1])
	case strings.HasPrefix(froms[len(froms)-1], "golang:"):
		t.Errorf("%s: the final stage is the Go toolchain image", name)
	}
	if !regexp.MustCompile(`go build .*\./examples/publisher\b`).Match(dockerfile) {
		t.Errorf("%s: %s does not build ./examples/publisher", name, s.Build.Dockerfile)
	}
}

// withDefaults replaces each ${VAR:-default} in s with its default, as
// compose does when VAR is unset.
func withDefaults(s string) string {
	return regexp.MustCompile(`\$\{\w+:-([^}]*)\}`).ReplaceAllString(s, "$1")
}

func dependsOn(t *testing.T, name string, s service, on, condition string) {
	t.Helper()
	if d, ok := s.DependsOn[on]; !ok || d.Condition != condition {
		t.Errorf("%s: depends_on %v; want %s with condition %s", name, s.DependsOn, on, condition)
	}
}
