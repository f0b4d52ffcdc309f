package main

import (
	"errors"
	"flag"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
)

// A person reads the node's configuration errors: they say which flag (or
// environment variable) is wrong, and how to write it, rather than which
// field of ringlimit.Config is.

// checkedValue wraps the value of a flag so that a value it cannot parse is
// reported with how to write it (explain), and the first bad value on the
// command line is recorded, named by its flag, in *bad.
type checkedValue struct {
	flag.Value
	name string
	bad  *error
}

// Set sets the wrapped value, explaining a failure.
func (v checkedValue) Set(s string) error {
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
// value (--sidecar, not --sidecar true).
func (v checkedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// checkValues wraps every flag of fs in a checkedValue recording into bad.
func checkValues(fs *flag.FlagSet, bad *error) {
	fs.VisitAll(func(f *flag.Flag) { f.Value = checkedValue{Value: f.Value, name: f.Name, bad: bad} })
}

// explain returns err, a failure to set v to s, as a sentence that says how
// to write such a value. The flag package's own errors say only "parse
// error".
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
	}
	return err
}

// choiceValue is a string flag that takes one of a few words.
type choiceValue struct {
	p     *string
	valid []string
}

func (v choiceValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

// Set sets the value to s if s is one of the valid words.
func (v choiceValue) Set(s string) error {
	for _, ok := range v.valid {
		if s == ok {
			*v.p = s
			return nil
		}
	}
	return fmt.Errorf("want %s", orList(v.valid))
}

// Get returns the value, for flag.Getter.
func (v choiceValue) Get() any { return *v.p }

// choiceVar defines a flag that takes one of valid, stored in *p.
func choiceVar(fs *flag.FlagSet, p *string, name, def string, valid []string, usage string) {
	*p = def
	fs.Var(choiceValue{p: p, valid: valid}, name, usage+": "+orList(valid))
}

// orList writes words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// configFlags maps the fields of ringlimit.Config that Config.Validate names
// ("CheckTimeout", "Sync.RequestTimeout", and a field of Sync alone,
// "FlushInterval", as the core's own validation names it) to the flags
// that set them. Flags bound straight to a field are found by address;
// extra names the fields set from a flag by way of a variable.
func configFlags(fs *flag.FlagSet, c *ringlimit.Config, extra map[string]string) map[string]string {
	m := map[string]string{}
	byAddr := map[uintptr]string{}
	fs.VisitAll(func(f *flag.Flag) {
		// flag.DurationVar(p, ...) and its kin keep p as the value itself.
		if rv := reflect.ValueOf(f.Value); rv.Kind() == reflect.Pointer {
			byAddr[rv.Pointer()] = "--" + f.Name
		}
	})
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		for i := range v.NumField() {
			sf, fv := v.Type().Field(i), v.Field(i)
			if !sf.IsExported() {
				continue
			}
			path := prefix + sf.Name
			if name, ok := byAddr[fv.Addr().Pointer()]; ok && fv.Kind() != reflect.Struct {
				m[path] = name
				if prefix == "Sync." {
					m[sf.Name] = name
				}
			}
			if fv.Kind() == reflect.Struct && sf.Type.PkgPath() != "time" {
				walk(fv, path+".")
			}
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// fieldName matches a field path of ringlimit.Config in an error message.
var fieldName = regexp.MustCompile(`\b[A-Z][A-Za-z]*(\.[A-Z][A-Za-z]*)?\b`)

// inFlagNames rewrites an error of Config.Validate in the names of flags.
func inFlagNames(err error, flags map[string]string) string {
	msg := err.Error()
	if errors.Is(err, ringlimit.ErrConfig) {
		msg = strings.TrimPrefix(msg, ringlimit.ErrConfig.Error()+": ")
		msg = strings.TrimPrefix(msg, "Sync: sync: config: ")
	}
	msg = fieldName.ReplaceAllStringFunc(msg, func(s string) string {
		if f, ok := flags[s]; ok {
			return f
		}
		return s
	})
	for _, f := range flags { // "needs RulesPath (--rules)" became "needs --rules (--rules)"
		msg = strings.ReplaceAll(msg, f+" ("+f+")", f)
	}
	return msg
}
