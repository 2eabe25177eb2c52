// Package docscheck holds only tests: that the documentation (README.md,
// docs/*.md, sqlfence/README.md, the examples' READMEs and the commands'
// package docs) names nothing the code lacks: no schema version other than
// those package migrations ships, no migration file that migrations/ does
// not have, and no pgleader command or flag the CLI does not define; and that
// docs/cli.md documents every flag of every command.
//
// Run it after changing the docs, the migrations or the CLI:
//
//	go test ./internal/docscheck/
//
// With DOCSCHECK_SHOW=1 and -v, TestSchemaVersions logs every schema
// version it found and where, to review what its patterns match.
package docscheck
