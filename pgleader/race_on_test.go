//go:build race

package pgleader_test

// raceEnabled: the tests run under the race detector.
const raceEnabled = true
