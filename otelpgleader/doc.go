// Package otelpgleader reports pgleader's elections as OpenTelemetry metrics.
//
// An [Observer] is a pgleader.Observer: pass it in pgleader.Options and it
// records every elector it observes, so one Observer serves all the
// electors of a process.
//
//	obs, err := otelpgleader.New(otelpgleader.WithMeterProvider(mp))
//	if err != nil { ... }
//	defer obs.Close()
//	el, err := pgleader.New(backend, spec, pgleader.Options{Lead: lead, Observer: obs})
//
// This package is a Go module of its own,
// github.com/pgleader/pgleader/otelpgleader, tagged otelpgleader/vX.Y.Z: the
// module github.com/pgleader/pgleader does not require OpenTelemetry, so
// only programs that import this package have their OpenTelemetry versions
// raised to the ones it was built with.
//
// # Instruments
//
// Every instrument carries the attributes key and owner (owner can be left
// out with [WithoutOwner]).
//
//	pgleader.leader          Int64ObservableGauge  {leader}  1 from the term's start until it begins to end, else 0
//	pgleader.token           Int64ObservableGauge  {token}   the token of the replica's current or last term
//	pgleader.terms.started   Int64Counter          {term}    terms won
//	pgleader.terms.ended     Int64Counter          {term}    terms over, by reason (stopped, expiring, lost, finished, refused, resigned)
//	pgleader.renew.duration  Float64Histogram      s         round trip of each renewal, by outcome (ok, lost, error)
//	pgleader.claims.refused  Int64Counter          {claim}   terms whose Claim hook refused the token or failed
//
// The gauges report an elector from its first observation on, that is from
// the first term it wins; a replica that never led reports nothing.
//
// # Cardinality
//
// The owner of a pgleader elector defaults to hostname:pid:random, new for
// every process. With many restarts that makes many time series; use
// [WithoutOwner] if your backend charges for them, or give each replica a
// stable owner such as its pod name.
package otelpgleader
