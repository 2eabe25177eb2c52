package lifecycle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPure: the machine has no goroutines, timers, channels or clock
// reads; it imports only package time, for its types and arithmetic. Its
// drivers do all of that.
func TestPure(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "machine.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if imp.Path.Value != `"time"` {
			t.Errorf("machine.go imports %s; the machine may import only time", imp.Path.Value)
		}
	}
	impure := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
		"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%v: a goroutine", fset.Position(n.Pos()))
		case *ast.ChanType, *ast.SendStmt, *ast.SelectStmt:
			t.Errorf("%v: a channel", fset.Position(n.Pos()))
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && impure[n.Sel.Name] {
				t.Errorf("%v: time.%s reads the clock or sets a timer", fset.Position(n.Pos()), n.Sel.Name)
			}
		}
		return true
	})
}

// TestElectorAndSetStandOnIt: the Elector's term and each of a Set's terms
// are driven by this machine, not by a copy of its decisions.
func TestElectorAndSetStandOnIt(t *testing.T) {
	for _, name := range []string{"elector.go", "set.go"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "pgleader", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"github.com/pgleader/pgleader/internal/lifecycle"`, "lifecycle.Start("} {
			if !strings.Contains(string(src), want) {
				t.Errorf("pgleader/%s lacks %s", name, want)
			}
		}
	}
}
