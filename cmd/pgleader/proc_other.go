//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts the command in a process group of its own.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// becomeSubreaper does nothing outside Linux: descendants that leave the
// command's process group are not followed.
func becomeSubreaper() error { return nil }

// strays finds nothing outside Linux.
func strays(int) []int { return nil }
