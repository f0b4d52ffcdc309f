// Package flagvalue makes the flag package's errors readable: a value it
// cannot parse is reported with how to write one ("a duration needs a
// unit: write e.g. \"100ms\""), named by its flag, and without the usage
// dump. The commands (cmd/node, cmd/ringlimit) use it the same way:
//
//	fs.SetOutput(io.Discard) // errors are printed by the command
//	... define the flags ...
//	var bad error
//	flagvalue.Explain(fs, &bad)
//	if err := flagvalue.Parse(fs, args, &bad); err != nil {
//		// err is flag.ErrHelp, or one line such as
//		// --period "60": a duration needs a unit: write e.g. "60ms" or "60s"
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
func (v explained) IsBoolFlag() bool { return isBool(v.Value) }

// Explain wraps every flag defined in fs so far: a value that one cannot
// parse makes an error that says how to write it, and the first such error
// is stored in *bad, prefixed with the flag's name and the value. Call it
// after defining the flags and before setting any.
func Explain(fs *flag.FlagSet, bad *error) {
	fs.VisitAll(func(f *flag.Flag) { f.Value = explained{Value: f.Value, name: f.Name, bad: bad} })
}

// Parse parses args with fs, whose flags Explain has wrapped, recording
// into bad. It returns nil, flag.ErrHelp for -h or --help, or an error of
// one line in the flags' --names: the first bad value explained, an
// unknown flag, or a flag without its value. fs.Usage is not called: the
// caller writes the usage for flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string, bad *error) error {
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return err
	case *bad != nil:
		return *bad
	}
	if msg := misuse(fs, args); msg != "" {
		return errors.New(msg)
	}
	return err
}

// misuse finds the flag of args that the flag package refused without a
// bad value: one it does not define, or one whose value is missing. It
// follows the flag package's syntax: -name or --name, =value or the next
// argument (none for a boolean), up to "--" or the first argument that is
// not a flag.
func misuse(fs *flag.FlagSet, args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return ""
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := fs.Lookup(name)
		switch {
		case f == nil && (name == "h" || name == "help"):
			return ""
		case f == nil:
			return fmt.Sprintf("unknown flag --%s", name)
		case hasValue || isBool(f.Value):
		case i+1 == len(args):
			return fmt.Sprintf("--%s needs a value", name)
		default:
			i++
		}
	}
	return ""
}

// isBool reports whether v is a boolean flag's value, which takes none.
func isBool(v flag.Value) bool {
	b, ok := v.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
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
