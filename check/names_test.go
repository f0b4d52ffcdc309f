package check_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// vocabulary is the set of type names that only package check (and, for
// Algorithm, package bucket; for the wire enumerations, proto/) declares.
var vocabulary = map[string]bool{"Mode": true, "Policy": true, "Status": true, "Algorithm": true, "Request": true, "Response": true}

// speakers are the packages that speak the vocabulary and must neither
// declare their own words (not even as aliases) nor import the coordination
// core for them (#18: one set of names).
var speakers = map[string]bool{"client": true, "rules": true, "envoy": true, "middleware": true}

const module = "github.com/ringlimit/ringlimit"

// TestOneSetOfNames fails if any package of the module other than check,
// bucket and the generated proto/ declares a type named Mode, Policy,
// Status, Algorithm, Request or Response; if client, rules, envoy,
// middleware, the root or cmd/ declare one even as an alias; or if client,
// rules, envoy or middleware import package sync.
func TestOneSetOfNames(t *testing.T) {
	root := filepath.Join("..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		top := strings.Split(filepath.ToSlash(rel), "/")[0]
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case top == "check" || top == "bucket" || top == "proto" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			case top == "compare" || top == "conformance": // modules of their own
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		strict := speakers[top] || top == "cmd" || !strings.Contains(filepath.ToSlash(rel), "/")
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				if !vocabulary[ts.Name.Name] {
					continue
				}
				if ts.Assign.IsValid() && !strict {
					continue // an alias of check's word, outside the speakers
				}
				want := "check." + ts.Name.Name
				if ts.Name.Name == "Algorithm" {
					want = "bucket.Algorithm"
				}
				t.Errorf("%s: declares its own %s; use %s", fset.Position(ts.Pos()), ts.Name.Name, want)
			}
		}
		if speakers[top] {
			for _, im := range f.Imports {
				if path, _ := strconv.Unquote(im.Path.Value); path == module+"/sync" {
					t.Errorf("%s: %s imports the coordination core; its words are in package check", fset.Position(im.Pos()), top)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files under %s; want the whole module", files, root)
	}
}
