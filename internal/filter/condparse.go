package filter

import (
	"encoding/json"
	"math"
	"net/netip"
	"slices"
	"strings"
)

// operators lists the condition objects a key's array may hold, for
// errors.
const operators = "anything-but, cidr, equals-ignore-case, exists, numeric, prefix, suffix"

// keyOperators are those "$key" allows: the event key is always present
// and a string.
var keyOperators = []string{"anything-but", "equals-ignore-case", "prefix", "suffix"}

// condParser parses the entries of one key's array.
type condParser struct {
	typed bool // Body scope: JSON literals are values too
	isKey bool // the key is "$key"
}

// entry parses one entry of a key's array into l.
func (cp condParser) entry(l *leaf, x any) error {
	switch x := x.(type) {
	case string:
		l.conds = append(l.conds, cond{op: opEquals, text: x})
		return nil
	case json.Number:
		if cp.isKey {
			return reason("$key is a string; number " + x.String() + " cannot match it")
		}
		n, err := parseNumber(x)
		l.conds = append(l.conds, cond{op: opNumeric, lo: n, hi: n})
		return err
	case bool, nil:
		return cp.literal(l, x)
	case []any:
		return reason("an array cannot hold another array; list the values in one array")
	}
	return cp.operator(l, x.(map[string]any))
}

// literal parses true, false or null.
func (cp condParser) literal(l *leaf, x any) error {
	text := jsonText(x)
	if !cp.typed || cp.isKey {
		return reason(text + " cannot match a string; headers and the event key are text, so write \"" + text + "\" to match that text")
	}
	kind := kindNull
	if x == true {
		kind = kindTrue
	} else if x == false {
		kind = kindFalse
	}
	l.conds = append(l.conds, cond{op: opLiteral, literal: kind})
	return nil
}

// operator parses an object such as {"prefix": "a"}.
func (cp condParser) operator(l *leaf, obj map[string]any) error {
	if len(obj) != 1 {
		return reason("a condition object must have exactly one operator, one of " + operators)
	}
	for name, arg := range obj {
		if cp.isKey && !slices.Contains(keyOperators, name) {
			return reason("$key takes exact strings and " + strings.Join(keyOperators, ", ") + "; not " + quote(name))
		}
		c, err := cp.parseOperator(l, name, arg)
		if err != nil {
			return reason(name + ": " + err.Error())
		}
		if c != nil {
			l.conds = append(l.conds, *c)
		}
	}
	return nil
}

// parseOperator parses the argument of one operator. It returns nil and no
// error for exists, which it records in l itself.
func (cp condParser) parseOperator(l *leaf, name string, arg any) (*cond, error) {
	switch name {
	case "prefix":
		return stringOperator(opPrefix, arg, false)
	case "suffix":
		return stringOperator(opSuffix, arg, false)
	case "equals-ignore-case":
		return stringOperator(opEqualsIgnoreCase, arg, true)
	case "anything-but":
		return cp.anythingBut(arg)
	case "numeric":
		return numeric(arg)
	case "cidr":
		return cidr(arg)
	case "exists":
		return nil, exists(l, arg)
	}
	return nil, reason("is not an operator; the operators are " + operators)
}

// stringOperator parses an operator whose argument is one string; only
// equals-ignore-case may take an empty one, as an empty prefix or suffix
// would match every string.
func stringOperator(o op, arg any, emptyOK bool) (*cond, error) {
	s, ok := arg.(string)
	if !ok {
		return nil, reason("takes a string, not " + jsonType(arg))
	}
	if s == "" && !emptyOK {
		return nil, reason("takes a non-empty string; an empty one would match every string")
	}
	return &cond{op: o, text: s}, nil
}

// anythingBut parses a string, a number, an array of them, or
// {"prefix": "p"}.
func (cp condParser) anythingBut(arg any) (*cond, error) {
	if obj, ok := arg.(map[string]any); ok {
		p, isPrefix := obj["prefix"]
		if len(obj) != 1 || !isPrefix {
			return nil, reason("an object here must be {\"prefix\": \"...\"}")
		}
		c, err := stringOperator(opAnythingButPrefix, p, false)
		if err != nil {
			return nil, reason("prefix: " + err.Error())
		}
		return c, nil
	}
	list, isList := arg.([]any)
	if !isList {
		list = []any{arg}
	} else if len(list) == 0 {
		return nil, reason("takes at least one value")
	}
	c := &cond{op: opAnythingBut}
	for _, v := range list {
		switch v := v.(type) {
		case string:
			c.texts = append(c.texts, v)
		case json.Number:
			if cp.isKey {
				return nil, reason("$key is a string; number " + v.String() + " cannot match it")
			}
			n, err := parseNumber(v)
			if err != nil {
				return nil, err
			}
			c.nums = append(c.nums, n)
		default:
			return nil, reason("takes strings and numbers, not " + jsonType(v))
		}
	}
	return c, nil
}

// numeric parses ["op", n] or [">"|">=", lo, "<"|"<=", hi].
func numeric(arg any) (*cond, error) {
	list, ok := arg.([]any)
	if !ok || (len(list) != 2 && len(list) != 4) {
		return nil, reason("takes [operator, number] or [\">\" or \">=\", number, \"<\" or \"<=\", number]")
	}
	c := &cond{op: opNumeric, lo: math.Inf(-1), hi: math.Inf(1)}
	for i := 0; i < len(list); i += 2 {
		o, ok := list[i].(string)
		if !ok {
			return nil, reason("an operator must be a string, one of =, <, <=, >, >=; not " + jsonType(list[i]))
		}
		num, ok := list[i+1].(json.Number)
		if !ok {
			return nil, reason("operator " + quote(o) + " takes a number, not " + jsonType(list[i+1]))
		}
		n, err := parseNumber(num)
		if err != nil {
			return nil, err
		}
		if err := c.bound(o, n, i, len(list)); err != nil {
			return nil, err
		}
	}
	if c.lo > c.hi || c.lo == c.hi && (c.loOpen || c.hiOpen) {
		return nil, reason("the range is empty: its lower bound is not below its upper bound")
	}
	return c, nil
}

// bound applies the operator at index i of a numeric array of length n.
func (c *cond) bound(o string, v float64, i, n int) error {
	lower, upper := i == 0, i == 2 || n == 2
	switch {
	case o == "=" && n == 2:
		c.lo, c.hi = v, v
	case (o == ">" || o == ">=") && lower:
		c.lo, c.loOpen = v, o == ">"
	case (o == "<" || o == "<=") && upper:
		c.hi, c.hiOpen = v, o == "<"
	case !slices.Contains([]string{"=", "<", "<=", ">", ">="}, o):
		return reason("operator " + quote(o) + " is not one of =, <, <=, >, >=")
	case n == 4 && i == 0:
		return reason("a range starts with > or >=, not " + quote(o))
	default:
		return reason("a range ends with < or <=, not " + quote(o))
	}
	return nil
}

// cidr parses an IP address block, such as "10.0.0.0/24", or one address.
func cidr(arg any) (*cond, error) {
	s, ok := arg.(string)
	if !ok {
		return nil, reason("takes a string, not " + jsonType(arg))
	}
	block, err := netip.ParsePrefix(s)
	if err != nil {
		addr, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return nil, reason(quote(s) + " is not an IP address or a CIDR block such as \"10.0.0.0/24\"")
		}
		block = netip.PrefixFrom(addr, addr.BitLen())
	}
	return &cond{op: opCIDR, block: block.Masked()}, nil
}

// exists records {"exists": true|false} in l.
func exists(l *leaf, arg any) error {
	b, ok := arg.(bool)
	if !ok {
		return reason("takes true or false, not " + jsonType(arg))
	}
	if b {
		l.existsTrue = true
	} else {
		l.existsFalse = true
	}
	return nil
}

func jsonText(x any) string {
	b, _ := json.Marshal(x)
	return string(b)
}
