// Command testsum runs a command that runs go test -json, and prints what go
// test prints without -json: each package's ok or FAIL line, the whole
// output of the tests that failed (or were still running when their test
// binary died), and build errors. At the end it lists the tests that
// failed and the tests that were skipped, each skipped test with the reason
// its t.Skip gave. It exits with the command's status.
//
//	go run ./internal/cmd/testsum -- go test -json ./...
//	go run ./internal/cmd/testsum -- sh -c 'go test -json ./... && cd sub && go test -json ./...'
//
// Lines of the command's output that are not go test -json events pass
// through as they are; its standard error is testsum's. make test runs the
// tests through it.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testsum -- command [arg...]   (the command runs go test -json)")
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Args(), os.Stdout, os.Stderr))
}

// run runs argv, summarises its standard output on stdout and returns the
// exit status testsum should have: the command's, or 1 if it exited 0 and
// yet a test failed.
func run(argv []string, stdout, stderr io.Writer) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testsum: %v\n", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testsum: %v\n", err)
		return 127
	}
	// A Ctrl-C reaches the command too, as it is in the same process
	// group; a signal sent to testsum alone is passed on. Either way
	// testsum reads on until the command has exited.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for sig := range sigs {
			_ = cmd.Process.Signal(sig)
		}
	}()

	s := newSummary(stdout)
	r := bufio.NewReader(pipe)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			s.line(line)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(stderr, "testsum: reading the command's output: %v\n", err)
			}
			break
		}
	}
	err = cmd.Wait()
	failed := s.finish()
	status := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		if status = exit.ExitCode(); status < 0 { // killed by a signal
			status = 1
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
		}
	case err != nil:
		fmt.Fprintf(stderr, "testsum: %v\n", err)
		status = 1
	}
	if status == 0 && failed {
		status = 1
	}
	return status
}
