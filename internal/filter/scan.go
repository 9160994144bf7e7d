package filter

import "encoding/json"

// scanner walks JSON text that json.Valid has accepted, so it checks
// nothing and never fails: it only finds where each value starts and ends.
// It walks the text once, descending only into the fields a policy names
// and skipping the rest.
type scanner struct {
	s string
	i int
	// asText makes every scalar a string value, for the elements of a
	// header's array: herald headers are text.
	asText bool
}

// value reads the value at s.i. If f is nil nothing wants it and it is
// skipped; otherwise objects descend into f's children, arrays are
// flattened, and scalars go to f's leaves.
func (s *scanner) value(p *Policy, f *field, st []leafState) {
	s.space()
	if f == nil {
		s.skip()
		return
	}
	switch s.s[s.i] {
	case '{':
		s.object(p, f, st)
	case '[':
		s.array(p, f, st)
	default:
		v := s.scalar()
		for _, i := range f.leaves {
			p.visit(i, st, v)
		}
	}
}

func (s *scanner) object(p *Policy, f *field, st []leafState) {
	s.i++ // {
	for {
		s.space()
		if s.s[s.i] == '}' {
			s.i++
			return
		}
		if s.s[s.i] == ',' {
			s.i++
			s.space()
		}
		name, escaped := s.str()
		s.space()
		s.i++ // :
		var child *field
		if f.children != nil {
			if escaped {
				name = value{kind: kindString, text: name, escaped: true}.str()
			}
			child = f.children[name]
		}
		s.value(p, child, st)
	}
}

func (s *scanner) array(p *Policy, f *field, st []leafState) {
	s.i++ // [
	for {
		s.space()
		switch s.s[s.i] {
		case ']':
			s.i++
			return
		case ',':
			s.i++
		}
		s.space()
		if s.s[s.i] == ']' {
			continue
		}
		s.value(p, f, st)
	}
}

// scalar reads a string, number or literal.
func (s *scanner) scalar() value {
	start := s.i
	if s.s[s.i] == '"' {
		text, escaped := s.str()
		return value{kind: kindString, text: text, escaped: escaped}
	}
	for s.i < len(s.s) && !isDelimiter(s.s[s.i]) {
		s.i++
	}
	text := s.s[start:s.i]
	if s.asText {
		return value{kind: kindString, text: text}
	}
	switch text[0] {
	case 't':
		return value{kind: kindTrue, text: text}
	case 'f':
		return value{kind: kindFalse, text: text}
	case 'n':
		return value{kind: kindNull, text: text}
	}
	return value{kind: kindNumber, text: text}
}

// str reads a string and returns its content without the quotes, still
// escaped if escaped is true.
func (s *scanner) str() (text string, escaped bool) {
	s.i++ // opening quote
	start := s.i
	for s.s[s.i] != '"' {
		if s.s[s.i] == '\\' {
			escaped = true
			s.i++
		}
		s.i++
	}
	text = s.s[start:s.i]
	s.i++ // closing quote
	return text, escaped
}

// skip passes over one value without reading it.
func (s *scanner) skip() {
	depth := 0
	for {
		switch c := s.s[s.i]; {
		case c == '"':
			s.str()
			if depth == 0 {
				return
			}
			continue
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				s.i++
				return
			}
		case depth == 0 && !isSpace(c):
			s.scalar()
			return
		}
		s.i++
	}
}

func (s *scanner) space() {
	for s.i < len(s.s) && isSpace(s.s[s.i]) {
		s.i++
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDelimiter(c byte) bool { return c == ',' || c == '}' || c == ']' || isSpace(c) }

// isJSONArray reports whether a header's text is a JSON array, which
// stands for SNS's String.Array.
func isJSONArray(h string) bool {
	return len(h) >= 2 && h[0] == '[' && h[len(h)-1] == ']' && json.Valid([]byte(h))
}
