package ratelimit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// exampleBodies is every Example function's body in the module's example_test.go files (the
// compat module's included), one tab of indentation off, by name.
func exampleBodies(t *testing.T) map[string]string {
	t.Helper()
	bodies := map[string]string{}
	err := filepath.WalkDir(".", func(path string, entry fs.DirEntry, err error) error {
		if err != nil || entry.IsDir() || entry.Name() != "example_test.go" {
			return err
		}
		source, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files := token.NewFileSet()
		parsed, err := parser.ParseFile(files, path, source, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, declaration := range parsed.Decls {
			function, ok := declaration.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(function.Name.Name, "Example") {
				continue
			}
			start := files.Position(function.Body.Lbrace).Offset + 1
			end := files.Position(function.Body.Rbrace).Offset
			var lines []string
			for _, line := range strings.Split(strings.Trim(string(source[start:end]), "\n"), "\n") {
				lines = append(lines, strings.TrimPrefix(line, "\t"))
			}
			bodies[filepath.Dir(path)+": "+function.Name.Name] = strings.Join(lines, "\n")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bodies
}

// TestTheReadmesExamplesAreTheExampleFunctions: every go block of README.md is the body of an
// Example function, which go test compiles (and go vet checks), and every Example function is
// in the README.
func TestTheReadmesExamplesAreTheExampleFunctions(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)\n```").FindAllStringSubmatch(string(readme), -1)
	bodies := exampleBodies(t)
	if len(blocks) == 0 || len(bodies) == 0 {
		t.Fatalf("%d go blocks, %d examples", len(blocks), len(bodies))
	}
	shown := map[string]bool{}
	for _, block := range blocks {
		found := false
		for name, body := range bodies {
			if body == block[1] {
				shown[name], found = true, true
			}
		}
		if !found {
			t.Errorf("this block of README.md is no Example function's body:\n%s", block[1])
		}
	}
	for name := range bodies {
		if !shown[name] {
			t.Errorf("%s is not in README.md", name)
		}
	}
}
