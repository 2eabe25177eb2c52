package main

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr puts the command in a process group of its own and kills it
// if pgleader dies without a chance to (SIGKILL, a crash).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// becomeSubreaper makes this process adopt its orphaned descendants instead
// of init: a grandchild whose parent died is then still ours to find, kill
// and reap, even if it left the command's process group.
func becomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}

// proc is one process as /proc/PID/stat shows it.
type proc struct {
	pid, ppid, pgrp int
	zombie          bool
}

// strays returns the live descendants of this process that are not in
// process group pgid. Zombies among them that are this process's own
// children are reaped; call it only while no other child of this process
// (an exec.Cmd not yet waited for) could be one.
func strays(pgid int) []int {
	children := make(map[int][]proc)
	for _, p := range processes() {
		children[p.ppid] = append(children[p.ppid], p)
	}
	self := os.Getpid()
	var out []int
	queue := []int{self}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for _, p := range children[parent] {
			queue = append(queue, p.pid)
			if p.pgrp == pgid {
				continue
			}
			if p.zombie {
				if parent == self {
					var ws syscall.WaitStatus
					_, _ = syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
				}
				continue
			}
			out = append(out, p.pid)
		}
	}
	return out
}

// processes reads every process from /proc; entries that vanish while it
// reads are skipped.
func processes() []proc {
	dir, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil
	}
	var out []proc
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 3 {
			continue
		}
		ppid, err1 := strconv.Atoi(string(f[1]))
		pgrp, err2 := strconv.Atoi(string(f[2]))
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, proc{pid: pid, ppid: ppid, pgrp: pgrp, zombie: string(f[0]) == "Z"})
	}
	return out
}
