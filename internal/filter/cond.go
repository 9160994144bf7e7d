package filter

import (
	"encoding/json"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// valueKind is the JSON type of a value met in an event. Header values, and
// the elements of a header's array, are all kindString.
type valueKind uint8

const (
	kindString valueKind = iota
	kindNumber
	kindTrue
	kindFalse
	kindNull
)

// value is one scalar met in an event. For a string, text is its content
// with the quotes removed; escaped says it still holds JSON escapes.
type value struct {
	kind    valueKind
	text    string
	escaped bool
}

// str returns a string value's content, unescaped.
func (v value) str() string {
	if !v.escaped {
		return v.text
	}
	var s string
	if json.Unmarshal([]byte(`"`+v.text+`"`), &s) != nil {
		return v.text
	}
	return s
}

// number returns the value's text read as a number quantized to the
// policy precision, if it is a number as JSON writes it.
func (v value) number() (float64, bool) {
	if !isJSONNumber(v.text) {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.text, 64)
	if err != nil {
		return 0, false
	}
	return quantize(f), true
}

// The numbers SNS documents: at most maxMagnitude either side of zero, kept
// to decimalPlaces digits after the decimal point; scale is 10 to that
// power.
const (
	decimalPlaces = 5
	scale         = 1e5
	maxMagnitude  = 1e9
)

// quantize rounds f to decimalPlaces, in units of 1/scale, so that
// comparisons see numbers as SNS documents them.
func quantize(f float64) float64 { return math.Round(f * scale) }

// leaf is the conditions one key path holds: any of conds, or exists.
type leaf struct {
	conds       []cond
	existsTrue  bool
	existsFalse bool
	// typed says values keep their JSON types (Body scope); otherwise every
	// value is text, and numeric conditions read it.
	typed bool
	// numeric caches wantsNumber.
	numeric bool
}

// holds reports whether what Match learnt satisfies the leaf.
func (l *leaf) holds(st leafState) bool {
	return st.matched || l.existsTrue && st.present || l.existsFalse && !st.present
}

// matches reports whether v meets one of the leaf's value conditions.
func (l *leaf) matches(v value) bool {
	if v.escaped {
		v = value{kind: v.kind, text: v.str()}
	}
	// A body's values keep their JSON types; a header's text is read as a
	// number when it is one.
	num, isNum := 0.0, false
	if l.numeric && (v.kind == kindNumber || v.kind == kindString && !l.typed) {
		num, isNum = v.number()
	}
	for i := range l.conds {
		if l.conds[i].matches(v, num, isNum) {
			return true
		}
	}
	return false
}

// wantsNumber reports whether a condition of the leaf reads numbers, so
// that Match parses a value as one only when something will read it.
func (l *leaf) wantsNumber() bool {
	for i := range l.conds {
		if l.conds[i].op.wantsNumber() {
			return true
		}
	}
	return false
}

// op is a condition's operator.
type op uint8

const (
	opEquals op = iota
	opNumeric
	opPrefix
	opSuffix
	opEqualsIgnoreCase
	opAnythingBut
	opAnythingButPrefix
	opLiteral
	opCIDR
)

func (o op) wantsNumber() bool { return o == opNumeric || o == opAnythingBut }

// cond is one entry of a key's array, other than exists.
type cond struct {
	op op
	// text is the string for opEquals, opPrefix, opSuffix,
	// opEqualsIgnoreCase and opAnythingButPrefix.
	text string
	// lo and hi bound opNumeric, in quantized units; a bound that is absent
	// is infinite.
	lo, hi         float64
	loOpen, hiOpen bool
	// texts and nums are what opAnythingBut excludes.
	texts []string
	nums  []float64
	// literal is the JSON literal opLiteral matches.
	literal valueKind
	// block is the addresses opCIDR matches.
	block netip.Prefix
}

func (c *cond) matches(v value, num float64, isNum bool) bool {
	switch c.op {
	case opEquals:
		return v.kind == kindString && v.str() == c.text
	case opNumeric:
		return isNum && c.inRange(num)
	case opPrefix:
		return v.kind == kindString && strings.HasPrefix(v.str(), c.text)
	case opSuffix:
		return v.kind == kindString && strings.HasSuffix(v.str(), c.text)
	case opEqualsIgnoreCase:
		return v.kind == kindString && strings.EqualFold(v.str(), c.text)
	case opAnythingBut:
		return v.kind != kindNull && !c.excludes(v, num, isNum)
	case opAnythingButPrefix:
		return v.kind == kindString && !strings.HasPrefix(v.str(), c.text)
	case opLiteral:
		return v.kind == c.literal
	case opCIDR:
		if v.kind != kindString {
			return false
		}
		addr, err := netip.ParseAddr(v.str())
		return err == nil && c.block.Contains(addr)
	}
	return false
}

func (c *cond) inRange(n float64) bool {
	if n < c.lo || n == c.lo && c.loOpen {
		return false
	}
	return n < c.hi || n == c.hi && !c.hiOpen
}

// excludes reports whether v is one of the values anything-but lists.
func (c *cond) excludes(v value, num float64, isNum bool) bool {
	if isNum {
		for _, n := range c.nums {
			if n == num {
				return true
			}
		}
	}
	if v.kind == kindString {
		s := v.str()
		for _, t := range c.texts {
			if t == s {
				return true
			}
		}
	}
	return false
}

// isJSONNumber reports whether s is a number as JSON writes it; header text
// must be one for numeric conditions to read it, so that "0x10", "Inf" or
// " 5" do not pass for numbers.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		i = digits(s, i)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		if j := digits(s, i+1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

func digits(s string, i int) int {
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}
