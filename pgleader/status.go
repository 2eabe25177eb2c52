package pgleader

import "time"

// State is what an Elector is doing.
type State int

// The states of an Elector.
const (
	// StateStopped: Run is not running.
	StateStopped State = iota
	// StateCampaigning: an acquire is being sent or awaited.
	StateCampaigning
	// StateWaiting: another term holds the lease; the elector looks again
	// at Status.WaitUntil, or sooner when it hears of a release.
	StateWaiting
	// StateBackingOff: the last campaign failed (see Status.LastError); the
	// next is at Status.WaitUntil.
	StateBackingOff
	// StateLeading: a term was won; Status.Leading says whether it is
	// still live or already ending.
	StateLeading
)

// String returns the state's lower-case name.
func (s State) String() string {
	switch s {
	case StateStopped:
		return "stopped"
	case StateCampaigning:
		return "campaigning"
	case StateWaiting:
		return "waiting"
	case StateBackingOff:
		return "backing-off"
	case StateLeading:
		return "leading"
	}
	return "unknown"
}

// Status is a snapshot of an Elector for health endpoints and logs.
type Status struct {
	Key, Owner string
	// State is what the elector is doing; WaitUntil is when it next
	// campaigns while StateWaiting or StateBackingOff (zero otherwise).
	State     State
	WaitUntil time.Time
	// Listening reports whether the backend is delivering lease events now
	// (false for a backend with no Abilities.Events): a replica that waits and
	// listens takes over within milliseconds of a release.
	Listening bool
	// Leading is true while a term is live (won and not yet ending).
	Leading bool
	// Token is the current term's token, or the last term's.
	Token int64
	// Deadline is the live term's safe end on the local clock; zero when
	// not leading.
	Deadline time.Time
	// LastRenewSent is when the live term's last successful acquire or
	// renew was sent, on the local clock; zero when not leading.
	LastRenewSent time.Time
	// Terms counts the terms this elector has won.
	Terms int
	// LastEnd is why the last term ended.
	LastEnd EndReason
	// LastError is the last error from the backend or a hook, and when.
	LastError   error
	LastErrorAt time.Time
}

// Status returns a snapshot of the elector's state.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.status
	if e.ab.Events != nil {
		s.Listening = e.ab.Events.Listening()
	}
	if e.term != nil {
		s.Leading = e.term.Live()
		if s.Leading {
			s.Deadline, s.LastRenewSent = e.term.Deadline(), e.term.renewedSent()
		}
	}
	return s
}

// SetStatus is a snapshot of a Set.
type SetStatus struct {
	Name, Owner string
	// Running is whether Run is running.
	Running bool
	// Keys is how many keys the set campaigns for; Held how many of them
	// this replica holds with a live term; Ending how many terms are ending
	// or releasing.
	Keys, Held, Ending int
	// Members is the number of live replicas of the set at the last
	// campaign or renewal, and Share this replica's fair share
	// ceil(Keys / Members).
	Members, Share int
	// LastRenewSent is when the last successful renewal tick was sent.
	LastRenewSent time.Time
	// LastError is the last error from the backend or a hook, and when.
	LastError   error
	LastErrorAt time.Time
}

// Status returns a snapshot of the set.
func (s *Set) Status() SetStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}
