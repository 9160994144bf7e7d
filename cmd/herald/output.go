package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// writeJSON writes v as one indented JSON document: what the API returns
// as its message's JSON (see apiMessage), anything else with camelCase
// names of its own.
func writeJSON(w io.Writer, v any) error {
	if m := apiMessage(v); m != nil {
		return writeProto(w, m)
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeJSONLine writes v as one JSON object on one line, for streams of
// items, as writeJSON would write it.
func writeJSONLine(w io.Writer, v any) error {
	if m := apiMessage(v); m != nil {
		return writeProtoLine(w, m)
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// newTable returns a writer that aligns tab-separated columns; call Flush.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// row writes cells as one table row.
func row(w io.Writer, cells ...any) {
	strs := make([]string, len(cells))
	for i, c := range cells {
		strs[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(w, strings.Join(strs, "\t"))
}

// payloadText shows a payload as is when it is printable UTF-8 text, and
// otherwise as "base64:" followed by its base64 encoding, so that every
// event stays on one line.
func payloadText(p []byte) string {
	if isPrintable(p) {
		return string(p)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(p)
}

func isPrintable(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, r := range string(p) {
		if r != '\t' && !unicode.IsGraphic(r) {
			return false
		}
	}
	return true
}

// orDash returns s, or "-" when s is empty, so table cells never vanish.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// timeText formats t for people; the zero time is "-".
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// ageText says how long ago t was, to the second; the zero time is "-".
func ageText(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
}

// count says "1 thing" or "n things" ("1 entry", "n entries").
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	if stem, ok := strings.CutSuffix(thing, "y"); ok && stem != "" && !strings.ContainsRune("aeiou", rune(stem[len(stem)-1])) {
		return fmt.Sprintf("%d %sies", n, stem)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// sortedKeys returns the keys of m in order.
func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
