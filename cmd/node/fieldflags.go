package main

import (
	"errors"
	"flag"
	"reflect"
	"regexp"
	"strings"

	"github.com/ringlimit/ringlimit"
)

// A person reads the node's configuration errors: they say which flag (or
// environment variable) is wrong, rather than which field of
// ringlimit.Config is. How to write a value is internal/flagvalue's part.

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
