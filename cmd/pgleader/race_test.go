//go:build unix && race

package main_test

func init() { raceEnabled = true }
