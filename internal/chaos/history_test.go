package chaos_test

import (
	"os"
	"testing"
	"time"

	"github.com/pgleader/pgleader/internal/chaos"
)

// A spooled history gives back what was recorded, in order, from its file;
// Close removes the file, and what is recorded after it is dropped.
func TestSpooledHistory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, err := chaos.NewSpooledHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		h.Record(chaos.Event{Kind: chaos.KindWrite, Replica: i, Key: "k", Seq: i + 1, Local: at.Add(time.Duration(i) * time.Millisecond)})
	}
	h.Record(chaos.Event{Kind: chaos.KindStall, Replica: -1, Sent: at, Local: at.Add(time.Second)})
	events, err := h.Events()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 4 || events[0].Seq != 1 || events[2].Seq != 3 || events[3].Kind != chaos.KindStall ||
		!events[3].Local.Equal(at.Add(time.Second)) {
		t.Fatalf("events read back: %+v", events)
	}
	if files, _ := os.ReadDir(dir); len(files) != 1 {
		t.Fatalf("%d files in the spool's directory, want 1", len(files))
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Errorf("%d files left after Close, want none", len(files))
	}
	h.Record(chaos.Event{Kind: chaos.KindWrite}) // dropped, no panic
	if _, err := h.Events(); err == nil {
		t.Error("Events after Close: no error")
	}
}
