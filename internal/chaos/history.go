package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// Kind says what an Event records.
type Kind string

// The kinds of events. Replicas record acquire, renew, release, claim,
// write and term-end; the harness records the rest.
const (
	KindAcquire Kind = "acquire" // a campaign's acquire: won (ok), held by another (refused), or failed
	KindRenew   Kind = "renew"   // a renewal: extended (ok), lost, or failed
	KindRelease Kind = "release" // a release: freed (ok), no longer ours (refused), or failed
	KindClaim   Kind = "claim"   // the Claim hook: the store's fence was lower (ok), or not (refused)
	KindWrite   Kind = "write"   // one unit: acknowledged (ok), fenced (refused), or failed
	KindTermEnd Kind = "term-end"
	// KindTermEnding: the term began to end (Live turned false), as its
	// replica saw it: the end of its belief that it leads. Recorded with
	// SessionBound only.
	KindTermEnding Kind = "term-ending"
	// KindLapse: a session-bound set member's set_bind or set_wake lapsed
	// the term of Owner (another member's, or its own of an ended
	// session) with Token begun at Term: its lease expires at DB. Sent is
	// when the statement was sent; Replica and Detail name who sent it.
	KindLapse   Kind = "lapse"
	KindStart   Kind = "start" // a replica incarnation started
	KindStop    Kind = "stop"  // a replica incarnation stopped (Detail: graceful or crash)
	KindFault   Kind = "fault" // a fault began (Fault names it)
	KindFaultUp Kind = "fault-end"
	KindWipe    Kind = "wipe" // the lease rows were deleted, at DB
	KindHeal    Kind = "heal" // every fault healed, at DB: a leader must be back soon
	// KindFailover: the primary Prev was killed (from Sent) and the standby
	// Server promoted (its clock read DB just after); every proxy had moved
	// to Server by Local, so a statement sent after Local reaches only it.
	KindFailover Kind = "failover"
	// KindStall: the harness's own process made no progress from Sent to
	// Local (its watchdog woke that late). The in-process proxies stand for
	// the network, so a stall delays every statement in flight on every path
	// beyond the bound the delay faults keep to.
	KindStall Kind = "stall"
)

// Result is an operation's outcome.
type Result string

// The outcomes.
const (
	OK      Result = "ok"
	Refused Result = "refused" // the database answered no: held, fenced, not ours
	Lost    Result = "lost"    // a renewal found the lease no longer the term's
	Failed  Result = "error"   // no answer: the outcome is unknown
)

// Event is one entry of a run's history. Times named Local are on the
// recording process's wall clock; DB, Term and Expires are on the
// database's clock (clock_timestamp()). A zero field does not apply.
type Event struct {
	Kind    Kind `json:"kind"`
	Replica int  `json:"replica"`
	// Key is the lease key a replica's event concerns: the elector's key,
	// or one key of a set. The harness's events (faults, wipes, heals,
	// failovers, starts and stops) have none and concern every key.
	Key    string `json:"key,omitempty"`
	Owner  string `json:"owner,omitempty"`
	Result Result `json:"result,omitempty"`
	Token  int64  `json:"token,omitempty"`
	// Term is the database time of the term's winning acquire: with Owner
	// and Token it identifies the term even when tokens restart after the
	// lease data was lost.
	Term    time.Time `json:"term,omitzero"`
	DB      time.Time `json:"db,omitzero"`
	Expires time.Time `json:"expires,omitzero"`
	Seq     int       `json:"seq,omitempty"`
	// ID is the log row of an acknowledged write.
	ID int64 `json:"id,omitempty"`
	// Local is when the event was recorded; Sent when the statement was
	// sent; Checked, for a write, when the body last saw Live true.
	Local   time.Time `json:"local"`
	Sent    time.Time `json:"sent,omitzero"`
	Checked time.Time `json:"checked,omitzero"`
	Fault   string    `json:"fault,omitempty"`
	// Server names the server that accepted a write (the setting
	// chaos.server of the run's own servers; "" on another server), or
	// the promoted server of a failover; Prev the failed one.
	Server string `json:"server,omitempty"`
	Prev   string `json:"prev,omitempty"`
	Detail string `json:"detail,omitempty"`
	Err    string `json:"err,omitempty"`
}

// TermID identifies a term: its holder, token and the database time of its
// winning acquire.
type TermID struct {
	Owner string
	Token int64
	Start time.Time
}

func (e Event) termID() TermID { return TermID{e.Owner, e.Token, instant(e.Term)} }

// instant normalizes t for use in a comparable key: no monotonic reading,
// UTC.
func instant(t time.Time) time.Time { return t.Round(0).UTC() }

// Sink receives events. Implementations are safe for concurrent use.
type Sink interface {
	Record(Event)
}

// History is a Sink that keeps the events of a run in the order they were
// recorded: in memory, or spooled to a file (NewSpooledHistory). It is safe
// for concurrent use.
type History struct {
	// spooled is set once, by NewSpooledHistory.
	spooled bool
	mu      sync.Mutex
	events  []Event
	// The spool: each event one JSON line, buffered; nil once closed.
	spool *os.File
	w     *bufio.Writer
	err   error // the spool's first write error
}

// NewSpooledHistory returns a History that writes its events to a file in
// dir (os.TempDir if empty) as they come, and reads them back only when
// asked (Events), so a run's history never sits in memory while it runs.
// A history of a 1,000-key set is hundreds of megabytes; held in memory,
// its garbage collections stalled the whole harness, in-process proxies
// included, for up to 2.4 s on a loaded 2-core machine, delaying statements
// in flight beyond the bound the delay faults keep to (docs/safety.md).
// Close removes the file.
func NewSpooledHistory(dir string) (*History, error) {
	f, err := os.CreateTemp(dir, "pgleader-chaos-history-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("chaos: spool the history: %w", err)
	}
	return &History{spooled: true, spool: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

// Record appends e, stamping Local if it is zero.
func (h *History) Record(e Event) {
	if e.Local.IsZero() {
		e.Local = time.Now()
	}
	if !h.spooled {
		h.mu.Lock()
		h.events = append(h.events, e)
		h.mu.Unlock()
		return
	}
	b, err := json.Marshal(e)
	b = append(b, '\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.w == nil {
		return // closed: the run is over
	}
	if err == nil {
		_, err = h.w.Write(b)
	}
	if err != nil && h.err == nil {
		h.err = err
	}
}

// Events returns a copy of the events recorded so far; for a spooled
// history, read back from its file, and an error if a write to it failed.
func (h *History) Events() ([]Event, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.spooled:
		return slices.Clone(h.events), nil
	case h.spool == nil:
		return nil, errors.New("chaos: the history's spool is closed")
	case h.err != nil:
		return nil, fmt.Errorf("chaos: the history's spool: %w", h.err)
	}
	if err := h.w.Flush(); err != nil {
		return nil, fmt.Errorf("chaos: the history's spool: %w", err)
	}
	r, err := os.Open(h.spool.Name())
	if err != nil {
		return nil, fmt.Errorf("chaos: the history's spool: %w", err)
	}
	defer r.Close()
	var events []Event
	if err := readEvents(r, sinkFunc(func(e Event) { events = append(events, e) })); err != nil {
		return nil, fmt.Errorf("chaos: the history's spool: %w", err)
	}
	return events, nil
}

// Close removes a spooled history's file; events recorded after it are
// dropped. An in-memory history is unchanged.
func (h *History) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.spool == nil {
		return nil // in memory, or closed already
	}
	err := h.spool.Close()
	if rerr := os.Remove(h.spool.Name()); err == nil {
		err = rerr
	}
	h.spool, h.w = nil, nil
	return err
}

// WriteJSON writes the events as JSON lines.
func (h *History) WriteJSON(w io.Writer) error {
	events, err := h.Events()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

type sinkFunc func(Event)

func (f sinkFunc) Record(e Event) { f(e) }

// jsonSink writes each event as one JSON line, for a replica process whose
// parent collects its standard output.
type jsonSink struct {
	mu sync.Mutex
	w  io.Writer
}

// Record writes e as one line.
func (s *jsonSink) Record(e Event) {
	if e.Local.IsZero() {
		e.Local = time.Now()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	b = append(b, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.w.Write(b) // one write per line: a killed process leaves at most one torn line
}

// readEvents records every JSON line read from r into sink, skipping lines
// that do not parse (a process killed mid-line), until r ends; it returns
// the error that ended reading early, if any.
func readEvents(r io.Reader, sink Sink) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Kind != "" {
			sink.Record(e)
		}
	}
	return sc.Err()
}
