package topic

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

const headersForm = `"Name: value" pairs separated by ';' or by newlines, e.g. "X-Api-Key: k1; X-Env: prod"`

// setHeaders parses the string form of Attributes.HTTPHeaders. It replaces
// all headers rather than merging, so that headers can also be removed.
func setHeaders(a *Attributes, v string) error {
	sep := ";"
	if strings.Contains(v, "\n") {
		sep = "\n"
	}
	var h map[string]string
	for entry := range strings.SplitSeq(v, sep) {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, value, ok := strings.Cut(entry, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return fmt.Errorf("%s is not a \"Name: value\" pair", quoteShort(entry))
		}
		for prev := range h {
			// Header names are case-insensitive: two spellings of one
			// name would be sent as one header, with either value.
			if strings.EqualFold(prev, name) {
				return fmt.Errorf("header %s is given twice", name)
			}
		}
		if h == nil {
			h = make(map[string]string)
		}
		h[name] = strings.TrimSpace(value)
	}
	a.HTTPHeaders = h
	return nil
}

// formatHeaders is the inverse of setHeaders, with names sorted so that
// the result is stable.
func formatHeaders(h map[string]string) string {
	sep := "; "
	for _, v := range h {
		if strings.Contains(v, ";") {
			sep = "\n"
		}
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if b.Len() > 0 {
			b.WriteString(sep)
		}
		b.WriteString(name + ": " + h[name])
	}
	if sep == "\n" && len(h) == 1 {
		// A lone header still needs a newline, or its ';' would split it.
		b.WriteString("\n")
	}
	return b.String()
}

// validateHeaders checks that headers can be sent as they are: names must
// be HTTP tokens (RFC 9110, section 5.6.2), and values must not contain
// control characters, which could end the header early and inject others.
func validateHeaders(h map[string]string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if !isToken(name) {
			errs = append(errs, invalidf("invalid http_headers name %s: use letters, digits and !#$%%&'*+-.^_`|~ only, e.g. X-Api-Key", quoteShort(name)))
		}
		if i := strings.IndexFunc(h[name], isCtl); i >= 0 {
			errs = append(errs, invalidf("invalid http_headers value for %s: it contains the control character %q; remove it", quoteShort(name), h[name][i]))
		}
	}
	return errors.Join(errs...)
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isNameByte(c) && !strings.ContainsRune("!#$%&'*+.^`|~", rune(c)) {
			return false
		}
	}
	return true
}

// isCtl reports control characters other than horizontal tab, which header
// values may contain.
func isCtl(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }
