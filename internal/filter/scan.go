package filter

// maxDepth is how deeply a payload's arrays and objects may nest, as
// encoding/json allows; deeper payloads are not well-formed for Match.
const maxDepth = 10000

// scanner walks JSON text once, checking that it is well-formed as it goes
// (as json.Valid would, which on its own costs more than the walk), and
// feeds the scalars at the key paths a policy names to that path's leaves.
// Values no path names are walked with a nil field: checked, not read.
type scanner struct {
	s     string
	i     int
	depth int
	// asText makes every scalar a string value, for the elements of a
	// header's array: herald headers are text.
	asText bool
	bad    bool
}

// walk reads all of s as one JSON value and reports whether it is
// well-formed.
func (s *scanner) walk(p *Policy, f *field, st []leafState) bool {
	s.value(p, f, st)
	s.space()
	return !s.bad && s.i == len(s.s)
}

// fail marks the text malformed and moves to its end, which ends every
// loop of the walk.
func (s *scanner) fail() {
	s.bad = true
	s.i = len(s.s)
}

func (s *scanner) peek() byte {
	if s.i < len(s.s) {
		return s.s[s.i]
	}
	return 0
}

// value reads the value at s.i: objects descend into f's children, arrays
// are flattened into f, and scalars go to f's leaves.
func (s *scanner) value(p *Policy, f *field, st []leafState) {
	s.space()
	var v value
	switch s.peek() {
	case '{':
		s.object(p, f, st)
		return
	case '[':
		s.array(p, f, st)
		return
	case '"':
		text, escaped := s.str()
		v = value{kind: kindString, text: text, escaped: escaped}
	default:
		v = s.literal()
	}
	if f == nil || s.bad {
		return
	}
	for _, i := range f.leaves {
		p.visit(i, st, v)
	}
}

func (s *scanner) object(p *Policy, f *field, st []leafState) {
	for more := s.open('}'); more; more = s.next('}') {
		s.space()
		if s.peek() != '"' {
			s.fail()
			return
		}
		name, escaped := s.str()
		if s.space(); s.peek() != ':' {
			s.fail()
			return
		}
		s.i++
		s.value(p, f.child(name, escaped), st)
	}
}

func (s *scanner) array(p *Policy, f *field, st []leafState) {
	for more := s.open(']'); more; more = s.next(']') {
		s.value(p, f, st)
	}
}

// open steps into an object or array and reports whether it has a first
// member or element to read; it steps out again at once if it is empty.
func (s *scanner) open(closing byte) bool {
	s.i++
	s.depth++
	if s.depth > maxDepth {
		s.fail()
		return false
	}
	if s.space(); s.peek() == closing {
		s.leave()
		return false
	}
	return true
}

// leave steps out of an object or array.
func (s *scanner) leave() {
	s.i++
	s.depth--
}

// next reads what follows a member or element: a comma, and it reports
// true, or the closing bracket, and it reports false.
func (s *scanner) next(closing byte) bool {
	s.space()
	switch s.peek() {
	case ',':
		s.i++
		return true
	case closing:
		s.leave()
		return false
	}
	s.fail()
	return false
}

// str reads a string and returns its content without the quotes, still
// escaped if escaped is true.
func (s *scanner) str() (text string, escaped bool) {
	s.i++ // opening quote
	start := s.i
	for s.i < len(s.s) {
		switch c := s.s[s.i]; {
		case c == '"':
			text = s.s[start:s.i]
			s.i++
			return text, escaped
		case c < 0x20:
			s.fail()
		case c == '\\':
			escaped = true
			s.escape()
		default:
			s.i++
		}
	}
	s.fail()
	return "", false
}

// escape passes over one escape sequence in a string.
func (s *scanner) escape() {
	s.i++ // backslash
	switch s.peek() {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i++
	case 'u':
		if s.i+5 > len(s.s) {
			s.fail()
			return
		}
		for _, c := range []byte(s.s[s.i+1 : s.i+5]) {
			if !isHex(c) {
				s.fail()
				return
			}
		}
		s.i += 5
	default:
		s.fail()
	}
}

// literal reads a number, true, false or null.
func (s *scanner) literal() value {
	start := s.i
	for s.i < len(s.s) && isLiteralByte(s.s[s.i]) {
		s.i++
	}
	text := s.s[start:s.i]
	kind := kindNumber
	switch text {
	case "true":
		kind = kindTrue
	case "false":
		kind = kindFalse
	case "null":
		kind = kindNull
	default:
		if !isJSONNumber(text) {
			s.fail()
		}
	}
	if s.asText {
		kind = kindString
	}
	return value{kind: kind, text: text}
}

func (s *scanner) space() {
	for s.i < len(s.s) && isSpace(s.s[s.i]) {
		s.i++
	}
}

// child returns the field a member of an object at f descends into, or nil
// if no key path goes there.
func (f *field) child(name string, escaped bool) *field {
	if f == nil || f.children == nil {
		return nil
	}
	if escaped {
		name = value{kind: kindString, text: name, escaped: true}.str()
	}
	return f.children[name]
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isLiteralByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '+' || c == '-'
}

// isJSONArray reports whether a header's text is a well-formed JSON array,
// which stands for SNS's String.Array.
func isJSONArray(h string) bool {
	if len(h) < 2 || h[0] != '[' {
		return false
	}
	s := scanner{s: h}
	return s.walk(nil, nil, nil)
}
