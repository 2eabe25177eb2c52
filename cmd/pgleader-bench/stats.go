package main

import (
	"fmt"
	"slices"
	"time"
)

// percentile returns the p-th percentile (nearest rank) of samples.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(p/100*float64(len(s)) + 0.5)
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// summary is "p50 / p90 / p99 / max" of samples.
func summary(samples []time.Duration) string {
	return fmt.Sprintf("%s / %s / %s / %s", ms(percentile(samples, 50)), ms(percentile(samples, 90)),
		ms(percentile(samples, 99)), ms(slices.Max(samples)))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
