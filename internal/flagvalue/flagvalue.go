// Package flagvalue makes the flag package's errors readable: a value it
// cannot parse is reported with how to write one ("a duration needs a
// unit: write e.g. \"100ms\""), named by its flag, and without the usage
// dump. The commands (cmd/node, cmd/ringlimit) use it the same way:
//
//	fs.SetOutput(io.Discard) // errors are printed by the command
//	... define the flags ...
//	var bad error
//	flagvalue.Explain(fs, &bad)
//	if err := fs.Parse(args); err != nil && bad != nil {
//		// bad is "--period \"60\": a duration needs a unit: ..."
//	}
package flagvalue

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// explained wraps the value of a flag so that a value it cannot parse is
// reported with how to write it, and the first bad value is recorded, named
// by its flag, in *bad.
type explained struct {
	flag.Value
	name string
	bad  *error
}

// Set sets the wrapped value, explaining a failure.
func (v explained) Set(s string) error {
	err := v.Value.Set(s)
	if err == nil {
		return nil
	}
	err = explain(v.Value, s, err)
	if *v.bad == nil {
		*v.bad = fmt.Errorf("--%s %q: %w", v.name, s, err)
	}
	return err
}

// IsBoolFlag tells the flag package that a wrapped boolean flag takes no
// value (--json, not --json true).
func (v explained) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Explain wraps every flag defined in fs so far: a value that one cannot
// parse makes an error that says how to write it, and the first such error
// is stored in *bad, prefixed with the flag's name and the value. Call it
// after defining the flags and before setting any.
func Explain(fs *flag.FlagSet, bad *error) {
	fs.VisitAll(func(f *flag.Flag) { f.Value = explained{Value: f.Value, name: f.Name, bad: bad} })
}

// explain returns err, a failure to set v to s, as a sentence that says how
// to write such a value; the flag package's own errors say "parse error".
func explain(v flag.Value, s string, err error) error {
	g, ok := v.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case time.Duration:
		if _, perr := strconv.ParseFloat(s, 64); perr == nil {
			return fmt.Errorf("a duration needs a unit: write e.g. %q or %q", s+"ms", s+"s")
		}
		return errors.New(`not a duration: write a number and a unit, e.g. "100ms", "2s" or "1m30s"`)
	case bool:
		return errors.New("want true or false")
	case int, int64:
		if _, perr := strconv.ParseInt(s, 0, 64); errors.Is(perr, strconv.ErrRange) {
			return errors.New("out of range")
		}
		return errors.New("want a whole number")
	case uint, uint64:
		if _, perr := strconv.ParseUint(s, 0, 64); errors.Is(perr, strconv.ErrRange) {
			return errors.New("out of range")
		}
		return errors.New("want a whole number, 0 or more")
	case float64:
		return errors.New("want a number")
	}
	return err
}

// choice is a string flag that takes one of a few words.
type choice struct {
	p     *string
	valid []string
}

func (v choice) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

// Set sets the value to s if s is one of the valid words.
func (v choice) Set(s string) error {
	for _, ok := range v.valid {
		if s == ok {
			*v.p = s
			return nil
		}
	}
	return fmt.Errorf("want %s", OrList(v.valid))
}

// Get returns the value, for flag.Getter.
func (v choice) Get() any { return *v.p }

// ChoiceVar defines a flag of fs that takes one of the words valid, stored in
// *p (def until set); usage is followed by the words.
func ChoiceVar(fs *flag.FlagSet, p *string, name, def string, valid []string, usage string) {
	*p = def
	fs.Var(choice{p: p, valid: valid}, name, usage+": "+OrList(valid))
}

// OrList writes words as "a, b or c".
func OrList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
